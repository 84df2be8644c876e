// The split-K planner (plan/split_k.hpp): where it splits, by how much, and where it must not.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fp4moe::plan
