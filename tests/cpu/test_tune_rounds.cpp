#include <gtest/gtest.h>

#include "fp4moe/error.hpp"
#include "plan/tune_rounds.hpp"

namespace fp4moe::plan {
namespace {

TEST(TuneRounds, CloseCandidatesKeepTheFastestWithinTheMarginAndTheRankingsChoice) {
  const std::vector<TileTiming> sweep = {{3, 1, 1.30}, {5, 2, 1.00}, {7, 1, 1.10}, {9, 3, 1.14}, {11, 1, 2.0}};
  const std::vector<TileTiming> c = close_candidates(sweep, 11, 0.15, 2);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].tile, 5);
  EXPECT_EQ(c[1].tile, 7);
  EXPECT_EQ(c[2].tile, 11);  // the ranking's choice, although 2x slower
  EXPECT_EQ(close_candidates(sweep, 5, 0.15, 4).size(), 3u);  // 5, 7, 9; 3 is 30% slower
  EXPECT_EQ(close_candidates(sweep, 42, 0.0, 4).size(), 1u);  // a tile never timed is not added
  EXPECT_THROW(close_candidates(sweep, 5, -0.1, 4), Error);
}

// A GPU heating up: every timing is slower than the one before. In a sequential
// sweep the later candidate looks slower although it is faster; in rotated
// rounds each candidate meets the same drift and the faster one wins.
TEST(TuneRounds, RotatedRoundsCancelADriftThatASequentialSweepDoesNot) {
  const std::vector<TileTiming> c = {{18, 4, 0}, {31, 2, 0}};
  const auto true_ms = [](const TileTiming& t) { return t.tile == 31 ? 1.00 : 1.05; };
  int calls = 0;
  const auto drifting = [&](const TileTiming& t) { return true_ms(t) * (1 + 0.04 * calls++); };
  // sequential, all of one tile then all of the other (as the sweep times them)
  std::vector<double> seq;
  for (const TileTiming& t : c) {
    double sum = 0;
    for (int r = 0; r < 5; ++r) sum += drifting(t);
    seq.push_back(sum / 5);
  }
  EXPECT_GT(seq[1], seq[0]) << "the drift should fool the sequential sweep";
  calls = 0;
  const std::vector<double> m = interleaved_medians(c, 5, drifting);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_LT(m[1], m[0]) << "tile 31 is the faster one";
  EXPECT_EQ(calls, 10);
  EXPECT_THROW(interleaved_medians(c, 0, drifting), Error);
}

}  // namespace
}  // namespace fp4moe::plan
