// The split-K planner (plan/split_k.hpp): where it splits, by how much, and where it must not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"

namespace fp4moe::plan {
namespace {

int tile_named(const std::string& name) {
  for (int t = 0; t < kNumGemmTiles; ++t)
    if (gemm_tile_name(t) == name) return t;
  ADD_FAILURE() << "no tile " << name;
  return 0;
}

TEST(SplitKPlan, ExpectedChunksFollowTheRowsPerExpert) {
  EXPECT_EQ(expected_token_chunks(8, 256, 8, 8), 8);       // one token, top-8: 8 experts, one chunk each
  EXPECT_EQ(expected_token_chunks(1, 1, 8, 8), 1);         // the shared expert at one token
  EXPECT_EQ(expected_token_chunks(1024, 256, 8, 8), 256);  // 4 rows per expert
  EXPECT_EQ(expected_token_chunks(8192, 256, 8, 8), 1024); // 32 rows per expert: 4 chunks of 8
  EXPECT_EQ(expected_token_chunks(0, 256, 8, 8), 0);
  // chunks of 128 whose last may hold 144 rows: 272 rows per expert are two chunks, 273 three
  EXPECT_EQ(expected_token_chunks(272 * 256, 256, 128, 144), 512);
  EXPECT_EQ(expected_token_chunks(273 * 256, 256, 128, 144), 768);
  EXPECT_EQ(expected_token_chunks(144 * 256, 256, 128, 144), 256);
  EXPECT_EQ(expected_token_chunks(145 * 256, 256, 128, 144), 512);
}

TEST(SplitKPlan, SplitsWhereFewItemsLeaveSmsIdle) {
  const int sync256 = tile_named("bm256_nt8_bk256_mt1_c1_ws_sync"), sync128 = tile_named("bm128_nt8_bk256_mt1_c2_ws_sync");
  // the shared expert's GEMM1 at one token: 32 items of bm128 on 264 CTAs -> 8 parts (256 units)
  SplitKPlan p = plan_k_splits(sync128, 4096, 6144, 1, 264, kSplitKWorkspaceBytes);
  EXPECT_EQ(p.splits, 8) << p.explanation();
  EXPECT_NEAR(p.balance, 256.0 / 264.0, 1e-9);
  // 40 items on 132 CTAs (balance 0.30): 3 parts, 120 units, beat 6 (240 units, balance 0.91) after the 2% per part
  p = plan_k_splits(sync256, 512, 2048, 20, 132, kSplitKWorkspaceBytes);
  EXPECT_EQ(p.splits, 3) << p.explanation();
  // K = 512 has two bk256 stages: at most two parts
  p = plan_k_splits(sync128, 4096, 512, 1, 264, kSplitKWorkspaceBytes);
  EXPECT_EQ(p.splits, 2) << p.explanation();
}

TEST(SplitKPlan, NoSplitWhereItemsBalanceOrCannotSplit) {
  const int sync256 = tile_named("bm256_nt8_bk256_mt1_c1_ws_sync");
  // GEMM1 at one token: 8 x 16 = 128 items on 132 CTAs already balance (0.97)
  EXPECT_EQ(plan_k_splits(sync256, 4096, 6144, 8, 132, kSplitKWorkspaceBytes).splits, 1);
  // GEMM2 at one token: 8 x 24 = 192 items on 132 CTAs (0.73): two parts measured slower
  EXPECT_EQ(plan_k_splits(sync256, 6144, 2048, 8, 132, kSplitKWorkspaceBytes).splits, 1);
  // two full rounds or more: never split
  EXPECT_EQ(plan_k_splits(sync256, 6144, 2048, 256, 132, kSplitKWorkspaceBytes).splits, 1);
  // no workspace, or one too small for two parts
  EXPECT_EQ(plan_k_splits(sync256, 4096, 6144, 1, 132, 0).splits, 1);
  EXPECT_EQ(plan_k_splits(sync256, 4096, 6144, 1, 132,
                          SplitKWorkspace::kCounterBytes + 16 * SplitKWorkspace::slot_bytes(kGemmTiles[sync256]))
                .splits,
            1);
  // all-warps tiles do not split, nor wgmma tiles of 136+ accumulators per thread
  for (int t = 0; t < kNumGemmTiles; ++t) {
    if (!kGemmTiles[t].splits_k()) {
      EXPECT_EQ(plan_k_splits(t, 4096, 6144, 1, 264, kSplitKWorkspaceBytes).splits, 1) << gemm_tile_name(t);
    }
  }
}

TEST(SplitKPlan, NeverMorePartsThanStagesOrTheLimit) {
  for (int t = 0; t < kNumGemmTiles; ++t)
    for (int64_t k : {128, 256, 512, 2048, 7168})
      for (int64_t chunks : {1, 2, 8, 40}) {
        if (k % kGemmTiles[t].bk) continue;
        const SplitKPlan p = plan_k_splits(t, 2048, k, chunks, 264, kSplitKWorkspaceBytes);
        EXPECT_GE(p.splits, 1);
        EXPECT_LE(p.splits, kMaxKSplits);
        EXPECT_LE(p.splits, k / kGemmTiles[t].bk) << gemm_tile_name(t) << " K " << k;
        if (p.splits > 1) {  // the parts fit the workspace
          EXPECT_LE(chunks * (2048 / kGemmTiles[t].bm) * p.splits,
                    SplitKWorkspace::slots(kGemmTiles[t], kSplitKWorkspaceBytes));
        }
      }
}

TEST(SplitKPlan, BalancedWhereTheLastRoundLeavesCtasIdle) {
  const int sync256 = tile_named("bm256_nt8_bk256_mt1_c1_ws_sync");
  // GEMM2 at one token: 192 items on 132 CTAs (0.73), 8 stages each: 1536 stages, 12 a CTA at most
  SplitKPlan p = plan_k_splits(sync256, 6144, 2048, 8, 132, kSplitKWorkspaceBytes, true);
  EXPECT_TRUE(p.balanced_split) << p.explanation();
  EXPECT_EQ(p.splits, 1);
  EXPECT_NEAR(p.balance, 1536.0 / (12 * 132), 1e-9);
  EXPECT_NE(p.explanation().find("balanced split"), std::string::npos) << p.explanation();
  // not asked for; balanced already (GEMM1 at one token: 0.97); below 0.5 the split into parts stays
  EXPECT_FALSE(plan_k_splits(sync256, 6144, 2048, 8, 132, kSplitKWorkspaceBytes, false).balanced_split);
  EXPECT_FALSE(plan_k_splits(sync256, 4096, 6144, 8, 132, kSplitKWorkspaceBytes, true).balanced_split);
  p = plan_k_splits(sync256, 512, 2048, 20, 132, kSplitKWorkspaceBytes, true);
  EXPECT_FALSE(p.balanced_split);
  EXPECT_EQ(p.splits, 3);
  // no room for a slot per CTA
  EXPECT_FALSE(plan_k_splits(sync256, 6144, 2048, 8, 132,
                             SplitKWorkspace::kCounterBytes + 131 * SplitKWorkspace::slot_bytes(kGemmTiles[sync256]), true)
                   .balanced_split);
  // the kernel's 32-bit units: 4096 items of 2048 stages on 264 CTAs do not fit
  EXPECT_FALSE(BalancedSplitOf<int>::fits_32_bits(4096, 2048, 264));
  EXPECT_FALSE(balanced_split_fits(kGemmTiles[sync256], 4096, 2048 * 256, 264, int64_t(1) << 40));
  EXPECT_TRUE(balanced_split_fits(kGemmTiles[sync256], 192, 2048, 132, kSplitKWorkspaceBytes));
  // only tiles that balance
  for (int t = 0; t < kNumGemmTiles; ++t) {
    const SplitKPlan q = plan_k_splits(t, 6144, 2048, 8, 132, kSplitKWorkspaceBytes, true);
    if (q.balanced_split) { EXPECT_TRUE(kGemmTiles[t].balances_k()) << gemm_tile_name(t); }
    if (kGemmTiles[t].balances_k()) {
      EXPECT_TRUE(kGemmTiles[t].splits_k() && kGemmTiles[t].accumulators_per_thread() <= (kGemmTiles[t].wgmma ? 32 : 8));
    }
  }
}

// The schedule every CTA computes for itself: each unit run once; an item's
// parts on consecutive CTAs, none empty; a part other than 0 is its CTA's first
// segment (one slot per CTA), and part 0 of a cut item its CTA's last.
TEST(SplitKPlan, BalancedSegmentsCoverEveryStageOnce) {
  for (int64_t items : {1, 2, 7, 92, 128, 192, 4096})
    for (int64_t stages : {1, 2, 3, 8, 12, 24})
      for (int64_t ctas : {1, 5, 132, 264, 396}) {
        const BalancedSplit b{items, stages, ctas};
        ASSERT_TRUE(BalancedSplitOf<int>::fits_32_bits(items, stages, ctas));
        const BalancedSplitOf<int> b32{int(items), int(stages), int(ctas)};  // the kernel's arithmetic
        const std::string what = std::to_string(items) + " items, " + std::to_string(stages) + " stages, " +
                                 std::to_string(ctas) + " CTAs";
        std::vector<int> covered(size_t(items * stages), 0);
        std::vector<int64_t> parts_seen(size_t(items), 0), parts_of(size_t(items), -1);
        for (int64_t c = 0; c < ctas; ++c) {
          const int64_t first = b.first_item(c), end = b.end_item(c);
          if (c >= b.ctas()) { EXPECT_EQ(first, end) << what << ": CTA " << c << " past the sharing ones"; }
          for (int64_t i = first; i < end; ++i) {
            const BalancedSplit::Segment g = b.segment(c, i);
            const BalancedSplitOf<int>::Segment g32 = b32.segment(int(c), int(i));
            ASSERT_EQ(g32.kt0, g.kt0) << what;
            ASSERT_EQ(g32.kt1, g.kt1) << what;
            ASSERT_EQ(g32.part, g.part) << what;
            ASSERT_EQ(g32.parts, g.parts) << what;
            ASSERT_EQ(b32.first_item(int(c)), first) << what;
            ASSERT_EQ(b32.end_item(int(c)), end) << what;
            ASSERT_LT(g.kt0, g.kt1) << what;
            ASSERT_GE(g.part, 0) << what;
            ASSERT_LT(g.part, g.parts) << what;
            if (g.part > 0) { EXPECT_EQ(i, first) << what << ": a later part is its CTA's first segment"; }
            if (g.part == 0 && g.parts > 1) { EXPECT_EQ(i, end - 1) << what << ": part 0 of a cut item ends its CTA's range"; }
            EXPECT_EQ(g.part == 0, g.kt0 == 0) << what;
            if (parts_of[size_t(i)] >= 0) { EXPECT_EQ(parts_of[size_t(i)], g.parts) << what; }
            parts_of[size_t(i)] = g.parts;
            ++parts_seen[size_t(i)];
            for (int64_t kt = g.kt0; kt < g.kt1; ++kt) ++covered[size_t(i * stages + kt)];
          }
        }
        for (size_t u = 0; u < covered.size(); ++u) ASSERT_EQ(covered[u], 1) << what << ": unit " << u;
        for (int64_t i = 0; i < items; ++i) EXPECT_EQ(parts_seen[size_t(i)], parts_of[size_t(i)]) << what << ": item " << i;
      }
}

}  // namespace
}  // namespace fp4moe::plan
