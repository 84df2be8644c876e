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

// A GPU heating up: every timing is slower than the one before, by a steady
// step. In alternating rounds each candidate's median falls at the same point
// of the drift, so the medians keep the candidates' true ratios.
TEST(TuneRounds, AlternatingRoundsKeepTheTrueRatiosUnderASteadyDrift) {
  for (std::size_t n : {2u, 3u, 4u}) {
    std::vector<TileTiming> c;
    std::vector<double> truth;
    for (std::size_t i = 0; i < n; ++i) {
      c.push_back({int(i), 1, 0});
      truth.push_back(1.0 - 0.01 * double(i));  // later candidates 1% faster each, as tile 31 against tile 18
    }
    int calls = 0;
    const auto drifting = [&](const TileTiming& t) { return truth[size_t(t.tile)] * (1 + 0.04 * calls++); };
    const std::vector<double> m = interleaved_medians(c, 6, drifting);
    ASSERT_EQ(m.size(), n);
    EXPECT_EQ(calls, int(6 * n));
    for (std::size_t i = 1; i < n; ++i)
      EXPECT_NEAR(m[i] / m[0], truth[i] / truth[0], 1e-12) << n << " candidates, candidate " << i;
  }
  const std::vector<TileTiming> two = {{0, 1, 0}, {1, 1, 0}};
  const auto flat = [](const TileTiming&) { return 1.0; };
  EXPECT_THROW(interleaved_medians(two, 0, flat), Error);
  EXPECT_THROW(interleaved_medians(two, 5, flat), Error);  // odd: the drift would not cancel
}

}  // namespace
}  // namespace fp4moe::plan
