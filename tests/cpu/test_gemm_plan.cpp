// The decode kernel's shared-memory plan: every term adds up to what the
// kernel allocates, nothing over the target's budget is called a fit.
#include <gtest/gtest.h>

#include <tuple>

#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/tma_geometry.hpp"

namespace fp4moe::plan {
namespace {

int64_t sum_of_terms(const SmemPlan& p) {
  int64_t s = 0;
  for (const SmemTerm& t : p.terms)
    if (t.name != "runtime reservation") s += t.bytes;
  return s;
}

TEST(GemmPlan, TermsAddUpAndFitsMeansFits) {
  for (const Arch& arch : all_archs()) {
    const SmemBudget budget = budget_of(arch);
    for (int i = 0; i < kNumGemmTiles; ++i) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 6144}, {6144, 2048}, {7168, 7168}, {256, 2048}}) {
        const SmemPlan p = plan_gemm_tile(i, n, k, arch);
        const std::string what = std::string(arch.name) + " " + p.config;
        EXPECT_EQ(sum_of_terms(p), p.smem_bytes) << what;
        EXPECT_EQ(p.smem_bytes, gemm_layout(i).total_bytes(p.stages)) << what;
        EXPECT_EQ(p.capacity, budget.per_block_at(kGemmTiles[i].ctas_per_sm)) << what;
        if (p.fits) {
          EXPECT_LE(p.smem_bytes, p.capacity) << what;
          EXPECT_LE(p.smem_bytes, arch.smem_optin_per_block) << what;
          EXPECT_GE(p.stages, GemmSmemLayout::kMinStages) << what;
          EXPECT_LE(p.stages, kGemmTiles[i].max_stages) << what;
          EXPECT_LE(p.stages, k / kGemmTiles[i].bk + 1) << what;
          // ctas_per_sm blocks together, each with its reservation, fit the SM.
          EXPECT_LE((p.smem_bytes + arch.smem_reserved_per_block) * kGemmTiles[i].ctas_per_sm, arch.smem_per_sm) << what;
        } else {
          EXPECT_FALSE(p.explanation.empty()) << what;
        }
      }
    }
  }
}

TEST(GemmPlan, EveryTargetHasAFittingTileForGlm5) {
  for (const Arch& arch : all_archs()) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 6144}, {6144, 2048}}) {
      const int t = rank_gemm_tiles(n, k, budget_of(arch), 4.0, 200, 132);
      ASSERT_GE(t, 0) << arch.name;
      EXPECT_TRUE(plan_gemm_tile(t, n, k, arch).fits) << arch.name;
    }
  }
}

TEST(GemmPlan, RankingPicksWarpSpecializedTilesOnlyOnSm90) {
  for (const Arch& arch : all_archs()) {
    for (double tpe : {4.0, 8.0, 12.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0}) {
      const int t = rank_gemm_tiles(4096, 6144, budget_of(arch), tpe, 256, 132);
      ASSERT_GE(t, 0) << arch.name << " " << tpe;
      // sm_90: warp-specialized at every size, with warpgroup MMA from 12 tokens per expert:
      // 64-token tiles below 48, 128-token tiles above, from 112 the one whose last chunk takes 16 more rows,
      // from 192 its chunks of 136
      EXPECT_EQ(kGemmTiles[t].warp_specialized, arch.has_wgmma) << arch.name << " tokens/expert " << tpe << ": "
                                                                  << gemm_tile_name(t);
      EXPECT_EQ(kGemmTiles[t].wgmma, arch.has_wgmma && tpe >= 12) << arch.name << " tokens/expert " << tpe << ": "
                                                                     << gemm_tile_name(t);
      if (arch.has_wgmma && tpe >= 12) {
        EXPECT_EQ(kGemmTiles[t].nt, tpe >= 112 ? 144 : tpe >= 48 ? 128 : 64) << gemm_tile_name(t);
        EXPECT_EQ(kGemmTiles[t].chunk(), tpe >= 192 ? 136 : tpe >= 48 ? 128 : 64) << gemm_tile_name(t);
        EXPECT_EQ(kGemmTiles[t].bk, tpe >= 48 ? 128 : 256) << gemm_tile_name(t);  // K = 6144 takes stages of 256
      }
    }
  }
}

// GLM-5 on sm_90 (tokens per expert: routed rows over all 256 experts, as the layer and the
// benchmark pass them): the mma.sync tile of three CTAs per SM takes GEMM2 at one token (8 active
// experts, 384 items of 128 rows: one round of 396 CTAs against two of 264 or 132) and both GEMMs
// at 8 tokens (57 experts of mostly one token, many rounds), but not GEMM1 at one token (256 items:
// one round already with two CTAs per SM), T = 32 or 128 (1 and 4 tokens per expert), nor the
// shared expert alone (split-K spreads its few items).
TEST(GemmPlan, RankingTakesThreeCtasPerSmWhereTheyMeasuredFaster) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  struct Case { int64_t n, k; double tpe; int64_t active; bool three; };
  for (const Case c : {Case{6144, 2048, 8 / 256.0, 8, true}, Case{4096, 6144, 8 / 256.0, 8, false},
                       Case{4096, 6144, 0.25, 57, true}, Case{6144, 2048, 0.25, 57, true},
                       Case{4096, 6144, 1.0, 161, false}, Case{6144, 2048, 1.0, 161, false},
                       Case{6144, 2048, 4.0, 248, false}, Case{4096, 6144, 1.0, 1, false},
                       Case{6144, 2048, 1.0, 1, false}}) {
    const int t = rank_gemm_tiles(c.n, c.k, sm90, c.tpe, c.active, 132);
    ASSERT_GE(t, 0);
    EXPECT_EQ(kGemmTiles[t].ctas_per_sm == 3, c.three)
        << c.n << " x " << c.k << ", " << c.tpe << " tokens per expert, " << c.active << " experts: " << gemm_tile_name(t);
    EXPECT_TRUE(kGemmTiles[t].warp_specialized) << gemm_tile_name(t);
  }
}

TEST(GemmPlan, ClusterTilesNeedWholeClustersOfNTiles) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  int clustered = 0;
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTile& t = kGemmTiles[i];
    if (t.cluster_n == 1) continue;
    ++clustered;
    EXPECT_TRUE(t.wgmma && t.warp_specialized && !t.splits_k()) << gemm_tile_name(i);
    EXPECT_NE(gemm_tile_name(i).find("_cl" + std::to_string(t.cluster_n)), std::string::npos) << gemm_tile_name(i);
    EXPECT_TRUE(plan_gemm_tile(i, int64_t(t.bm) * t.cluster_n, 2048, sm90).fits) << gemm_tile_name(i);
    EXPECT_TRUE(plan_gemm_tile(i, 6144, 2048, sm90).fits) << gemm_tile_name(i);
    const SmemPlan odd = plan_gemm_tile(i, int64_t(t.bm) * (2 * t.cluster_n + 1), 2048, sm90);
    EXPECT_FALSE(odd.fits) << gemm_tile_name(i);
    EXPECT_NE(odd.explanation.find("not a multiple of " + std::to_string(t.cluster_n)), std::string::npos) << odd.explanation;
  }
  EXPECT_GE(clustered, 1);
}

// A K that the 256-k stages do not divide, in steps of 64: the warp-specialized
// bf16 tiles run it with a partial last stage (zero-filled past K); the others
// refuse it by name.
TEST(GemmPlan, WarpSpecializedTilesTakeAPartialLastKStage) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  const int full = rank_gemm_tiles(4096, 2048, sm90, 32.0, 256, 132);
  ASSERT_GE(full, 0);
  EXPECT_EQ(kGemmTiles[full].bk, 256) << gemm_tile_name(full);
  for (int64_t k : {int64_t(384), int64_t(2048 + 128), int64_t(2880)}) {
    const int t = rank_gemm_tiles(4096, k, sm90, 32.0, 256, 132);
    ASSERT_GE(t, 0) << k;
    EXPECT_EQ(gemm_tile_name(t), gemm_tile_name(full)) << k;
    EXPECT_TRUE(kGemmTiles[t].takes_tails()) << k;
  }
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTileFit f = fit_gemm_tile(i, 4096, 2880, sm90, 0, kGemmTiles[i].activations);
    if (kGemmTiles[i].takes_tails()) continue;
    EXPECT_EQ(f.why, GemmTileFit::Why::does_not_divide) << gemm_tile_name(i);
  }
  EXPECT_EQ(fit_gemm_tile(gemm_tile_index("bm256_nt64_bk128_mt1_c1_ws"), 4096, 2880 + 32, sm90).why,
            GemmTileFit::Why::does_not_divide)
      << "tails come in steps of 64";
  EXPECT_NE(plan_gemm_tile(gemm_tile_index("bm256_nt64_bk128_mt1_c1_ws"), 4096, 2880 + 32, sm90).explanation.find(
                "takes N and K in steps of 64"),
            std::string::npos);
}

TEST(GemmPlan, RankingSplitsASingleExpertsKOnSm90) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  // the shared expert: one expert, T tokens. Under 66 items of 256 rows (half the SMs):
  // GEMM1 (16 N tiles) at 128 and 512 tokens (16, 64 items), GEMM2 (24 N tiles) at 128 (24 items)
  for (auto [n, k, tpe] : {std::tuple{4096, 6144, 128.0}, std::tuple{4096, 6144, 512.0}, std::tuple{6144, 2048, 128.0}}) {
    const int t = rank_gemm_tiles(n, k, sm90, tpe, 1, 132);
    ASSERT_GE(t, 0);
    const GemmTile& d = kGemmTiles[t];
    EXPECT_TRUE(d.wgmma && d.warp_specialized) << n << " " << tpe << ": " << gemm_tile_name(t);
    EXPECT_EQ(d.bm, 128) << n << " " << tpe << ": " << gemm_tile_name(t);
    EXPECT_EQ(d.nt, 128) << n << " " << tpe << ": " << gemm_tile_name(t);
    EXPECT_TRUE(d.splits_k()) << n << " " << tpe << ": " << gemm_tile_name(t);
  }
  // enough items (GEMM2 at 512 tokens: 96; GEMM1 at 2048: 256): the prefill tile with chunks of 136
  for (auto [n, k, tpe] : {std::tuple{6144, 2048, 512.0}, std::tuple{4096, 6144, 2048.0}}) {
    const int t = rank_gemm_tiles(n, k, sm90, tpe, 1, 132);
    ASSERT_GE(t, 0);
    EXPECT_EQ(kGemmTiles[t].nt, 144) << n << " " << tpe << ": " << gemm_tile_name(t);
    EXPECT_EQ(kGemmTiles[t].chunk(), 136) << n << " " << tpe << ": " << gemm_tile_name(t);
  }
}

TEST(GemmPlan, ShapeTheTileCannotDivideIsAVerdictNamingIt) {
  const SmemPlan p = plan_gemm_tile(0, 4000, 6144, find_arch("sm_90"));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.explanation.find("N = 4000"), std::string::npos) << p.explanation;
}

TEST(GemmPlan, ExplicitStagesAreCheckedAsGiven) {
  const Arch& sm120 = find_arch("sm_120");
  const SmemPlan ok = plan_gemm_tile(8, 4096, 6144, sm120, 2);
  EXPECT_TRUE(ok.fits) << ok.explanation;
  EXPECT_EQ(ok.stages, 2);
  const SmemPlan too_many = plan_gemm_tile(8, 4096, 6144, sm120, 8);
  EXPECT_FALSE(too_many.fits);
  EXPECT_NE(too_many.explanation.find("101376"), std::string::npos) << too_many.explanation;
  EXPECT_FALSE(too_many.suggestions.empty());
}

TEST(GemmPlan, TooSmallABudgetSuggestsWhatWouldFit) {
  const SmemPlan p = plan_gemm_tile(0, 4096, 6144, find_arch("sm_120"));  // 3 CTAs/SM on a 100 KB SM
  EXPECT_FALSE(p.fits);
  ASSERT_GE(p.suggestions.size(), 2u);
  EXPECT_NE(p.suggestions[1].find("occupancy target"), std::string::npos) << p.suggestions[1];
}

TEST(GemmPlan, UnknownTileIsAnError) {
  EXPECT_THROW(plan_gemm_tile(kNumGemmTiles, 4096, 6144, find_arch("sm_90")), Error);
  EXPECT_THROW(plan_gemm_tile(-1, 4096, 6144, find_arch("sm_90")), Error);
}

}  // namespace
}  // namespace fp4moe::plan

namespace fp4moe::plan {
namespace {

// Every warp-specialized tile the planner accepts on sm_90 copies a stage as one
// box per operand: the box is valid for the tensor memory accelerator and holds
// exactly the planner's per-stage bytes (a K of 128 included: the small presets).
TEST(GemmPlan, TensorMapBoxesAreThePlannedStages) {
  const Arch& sm90 = find_arch("sm_90");
  int checked = 0;
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTile& t = kGemmTiles[i];
    if (!t.warp_specialized) continue;
    for (int64_t n : {256, 512, 2048, 2880, 4096, 5760, 6144, 7168})
      for (int64_t k : {128, 256, 2048, 2880, 6144, 7168}) {
        if (!plan_gemm_tile(i, n, k, sm90).fits) continue;
        const GemmSmemLayout L{t};
        const TmaGeometry w = weight_tma_geometry(256, n, k, t), s = scale_tma_geometry(256, n, k, t);
        EXPECT_TRUE(w.valid()) << gemm_tile_name(i) << " N " << n << " K " << k;
        EXPECT_TRUE(s.valid()) << gemm_tile_name(i) << " N " << n << " K " << k;
        EXPECT_EQ(w.box_bytes(), L.weight_bytes_per_stage()) << gemm_tile_name(i);
        EXPECT_EQ(s.box_bytes(), L.scale_bytes_per_stage()) << gemm_tile_name(i);
        EXPECT_EQ(w.dims[0] * w.dims[1], k * 8) << "a row group's weight bytes";
        EXPECT_EQ(w.dims[0] * w.dims[1] * w.dims[2] * w.dims[3], 256 * n * k / 2) << "the map spans the weights exactly";
        EXPECT_EQ(s.dims[0], (k + 127) / 128 * 128) << "a row group's scale bytes";
        EXPECT_EQ(s.dims[0] * s.dims[1] * s.dims[2], 256 * pack::scale_bytes(n, k)) << "the map spans the scales exactly";
        ++checked;
      }
  }
  EXPECT_GT(checked, 40);
}

// The expert widths real models use (DeepSeek-V2-Lite 1408, Qwen3 1536,
// gpt-oss 2880 and its GEMM1's 5760, GLM-5 2048) and their hidden sizes plan
// on sm_90 as they are, bf16 and e4m3, at every decode and prefill size: no
// refusal, and the tile's K stages and N tiles cover the shape.
TEST(GemmPlan, RealModelWidthsPlanUnpaddedOnSm90) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  for (const auto& [hidden, width] : {std::pair<int64_t, int64_t>{2048, 1408}, {4096, 1536}, {2880, 2880}, {6144, 2048}})
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2 * width, hidden}, {hidden, width}})
      for (ActivationType a : {ActivationType::bf16, ActivationType::e4m3})
        for (double tpe : {0.03, 1.0, 8.0, 32.0, 128.0, 512.0}) {
          const int t = rank_gemm_tiles(n, k, sm90, tpe, 128, 132, a);
          ASSERT_GE(t, 0) << n << " x " << k << " " << activation_type_name(a) << " at " << tpe;
          const GemmTile& tile = kGemmTiles[t];
          EXPECT_TRUE(fit_gemm_tile(t, n, k, sm90, 0, a).fits) << gemm_tile_name(t);
          EXPECT_GE(tile.k_steps(k) * tile.bk, k) << gemm_tile_name(t);
          EXPECT_LT((tile.k_steps(k) - 1) * tile.bk, k) << gemm_tile_name(t);
          EXPECT_GE(tile.n_tiles(n) * tile.bm, n) << gemm_tile_name(t);
          EXPECT_EQ(tile.n_tiles(n) % tile.cluster_n, 0) << gemm_tile_name(t);
        }
}

TEST(GemmPlan, RankingFallsBackToANarrowerWarpgroupTileThatFits) {
  // an sm_90 budget too small for the 144- and 128-token tiles' two stages (167040 and 176256 bytes)
  const SmemBudget small = SmemBudget::clamped(150000, 90);
  const int preferred = rank_gemm_tiles(6144, 2048, budget_of(find_arch("sm_90")), 256, 256, 132);
  ASSERT_FALSE(plan_gemm_tile(preferred, 6144, 2048, small).fits) << gemm_tile_name(preferred);
  const int t = rank_gemm_tiles(6144, 2048, small, 256, 256, 132);
  ASSERT_GE(t, 0);
  EXPECT_TRUE(plan_gemm_tile(t, 6144, 2048, small).fits);
  EXPECT_TRUE(kGemmTiles[t].wgmma) << gemm_tile_name(t);
  EXPECT_EQ(kGemmTiles[t].nt, 64) << gemm_tile_name(t);
}

TEST(GemmPlan, TokenChunksAtTheBoundaries) {
  // chunks of 128, the last up to 144
  EXPECT_EQ(token_chunks(0, 128, 144), 0);
  EXPECT_EQ(token_chunks(1, 128, 144), 1);
  EXPECT_EQ(token_chunks(144, 128, 144), 1);
  EXPECT_EQ(token_chunks(145, 128, 144), 2);
  EXPECT_EQ(token_chunks(272, 128, 144), 2);
  EXPECT_EQ(token_chunks(273, 128, 144), 3);
  // chunks of 136, the last up to 144
  EXPECT_EQ(token_chunks(280, 136, 144), 2);
  EXPECT_EQ(token_chunks(281, 136, 144), 3);
  EXPECT_EQ(token_chunks(552, 136, 144), 4);
  EXPECT_EQ(token_chunks(553, 136, 144), 5);
  // chunks as wide as the tile: the ceiling
  EXPECT_EQ(token_chunks(128, 128, 128), 1);
  EXPECT_EQ(token_chunks(129, 128, 128), 2);
  EXPECT_EQ(token_chunks(8, 8, 8), 1);
  EXPECT_EQ(token_chunks(9, 8, 8), 2);
}

TEST(GemmPlan, TokenChunksCoverEveryRowWithinTheTile) {
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTile& t = kGemmTiles[i];
    for (int64_t rows = 0; rows <= 4 * t.nt + 17; ++rows) {
      const int64_t c = t.chunks_of(rows);
      if (rows == 0) {
        EXPECT_EQ(c, 0);
        continue;
      }
      EXPECT_GE(c, 1) << gemm_tile_name(i) << " rows " << rows;
      // the kernel's items: c - 1 chunks of chunk() rows, then the rest, which must fit the tile's nt columns
      const int64_t last = rows - (c - 1) * t.chunk();
      EXPECT_GT(last, 0) << gemm_tile_name(i) << " rows " << rows;
      EXPECT_LE(last, t.nt) << gemm_tile_name(i) << " rows " << rows;
      // and no fewer chunks would do
      if (c > 1) {
        EXPECT_GT(rows - (c - 2) * t.chunk(), t.nt) << gemm_tile_name(i) << " rows " << rows;
      }
      if (t.chunk() == t.nt) {
        EXPECT_EQ(c, (rows + t.nt - 1) / t.nt);
      }
    }
  }
}

// An item's K-loop width (the columns its wgmma multiply and the activation
// rows its producer copies) is the smallest of the tile's widths that covers
// its rows; on a tile with a k_loop_step it is the rows rounded up to the step,
// and such a tile's chunk holds a whole expert of up to nt rows (one item: its
// weights dequantized once).
TEST(GemmPlan, KLoopWidthFollowsTheRows) {
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTile& t = kGemmTiles[i];
    int previous = 0;
    for (int rows = 1; rows <= t.nt; ++rows) {
      const int w = t.k_loop_columns(rows);
      EXPECT_GE(w, rows) << gemm_tile_name(i) << " rows " << rows;
      EXPECT_LE(w, t.nt) << gemm_tile_name(i) << " rows " << rows;
      EXPECT_EQ(w % 8, 0) << gemm_tile_name(i) << " rows " << rows;  // whole 8-row activation boxes
      EXPECT_GE(w, previous) << gemm_tile_name(i) << " rows " << rows;
      previous = w;
      if (t.k_loop_step > 0) {
        EXPECT_EQ(w, (rows + t.k_loop_step - 1) / t.k_loop_step * t.k_loop_step) << gemm_tile_name(i);
      }
      if (!t.narrows_k_loop()) {
        EXPECT_EQ(w, t.nt) << gemm_tile_name(i);
      }
    }
  }
  const int w16 = gemm_tile_index("bm256_nt128_bk128_mt1_c1_ws_w16");
  ASSERT_GE(w16, 0);
  const GemmTile& t = kGemmTiles[w16];
  EXPECT_EQ(t.chunks_of(128), 1);
  EXPECT_EQ(t.chunks_of(129), 2);
  EXPECT_EQ(t.k_loop_columns(1), 16);
  EXPECT_EQ(t.k_loop_columns(33), 48);
  EXPECT_EQ(t.k_loop_columns(100), 112);
  // four consumer warpgroups of 64 accumulators: the producer keeps the least so that they get 112
  EXPECT_EQ(t.producer_registers(), 24);
  EXPECT_EQ(t.consumer_registers(), 112);
}

// Every reallocating tile's split fits the launch's registers and setmaxnreg's
// range (24..256 in steps of 8); the widest cluster tile's consumers get 240,
// with which its biased instance compiles without spills.
TEST(GemmPlan, RegisterSplitsFitTheRegisterFile) {
  int reallocating = 0;
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTile& t = kGemmTiles[i];
    if (!t.warp_specialized || !t.reallocates_registers()) continue;
    ++reallocating;
    const int p = t.producer_registers(), c = t.consumer_registers();
    EXPECT_TRUE(p >= 24 && p % 8 == 0 && c % 8 == 0 && c <= 256) << gemm_tile_name(i) << ": " << p << " / " << c;
    EXPECT_GE(c, t.register_cap()) << gemm_tile_name(i);
    EXPECT_LE((GemmTile::kProducerThreads * p + (t.threads() - GemmTile::kProducerThreads) * c) * t.ctas_per_sm, 65536)
        << gemm_tile_name(i);
  }
  EXPECT_GT(reallocating, 10);
  const GemmTile& cl2 = kGemmTiles[gemm_tile_index("bm256_nt144_bk128_mt2_c1_ws_ch136_cl2")];
  EXPECT_EQ(cl2.producer_registers(), 24);
  EXPECT_EQ(cl2.consumer_registers(), 240);
}

// An N that 256-row tiles do not divide (2944, gpt-oss's 2880): their last N
// tile is partial (its rows past N zero-filled, not written), and the
// preference stays the 256-row tiles, in clusters where the tiles pair up.
TEST(GemmPlan, WarpgroupPreferenceTakesAPartialLastNTile) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(2944, 2944, sm90, 32.0, 128, 132)), "bm256_nt64_bk256_mt1_c1_ws_e16_cl2");
  EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(2944, 2944, sm90, 64.0, 128, 132)), "bm256_nt128_bk128_mt2_c1_ws_cl2");
  // 2880 rows: 12 tiles of 256 (the last of 64), in pairs
  EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(2880, 2880, sm90, 64.0, 128, 132)), "bm256_nt128_bk128_mt2_c1_ws_cl2");
  // where 256-row tiles divide N: the 64-token one (in clusters of two: 16 N tiles)
  EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(4096, 6144, sm90, 32.0, 256, 132)), "bm256_nt64_bk256_mt1_c1_ws_e16_cl2");
}

// The 64- and 128-token warpgroup tiles run in clusters of two N tiles where N
// holds whole pairs of 256-row tiles, and alone where it does not (23 tiles).
TEST(GemmPlan, RankingTakesClustersOfTwoWhereNHasWholePairs) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  for (int64_t n : {int64_t(4096), int64_t(6144), int64_t(5888)}) {
    const bool pairs = (n / 256) % 2 == 0;
    const std::string suffix = pairs ? "_cl2" : "";
    EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(n, 6144, sm90, 16.0, 256, 132)), "bm256_nt64_bk256_mt1_c1_ws_e16" + suffix) << n;
    EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(n, 6144, sm90, 32.0, 256, 132)), "bm256_nt64_bk256_mt1_c1_ws_e16" + suffix) << n;
    EXPECT_EQ(gemm_tile_name(rank_gemm_tiles(n, 6144, sm90, 64.0, 256, 132)), "bm256_nt128_bk128_mt2_c1_ws" + suffix) << n;
  }
  // A single expert (the shared one) of 16 N tiles is few items: the tile alone,
  // whose K splits over the SMs, not the cluster tile, which cannot split it.
  const int single = rank_gemm_tiles(4096, 6144, sm90, 32.0, 1, 132);
  EXPECT_EQ(gemm_tile_name(single), "bm256_nt64_bk256_mt1_c1_ws_e16");
  EXPECT_TRUE(kGemmTiles[single].splits_k());
}

// e4m3 GEMMs rank only e4m3 tiles, by rows per expert. The tiles take a
// partial last K stage and N tile, so gpt-oss's 2880 (and 2944) rank as
// GLM-5's shapes do.
TEST(GemmPlan, Fp8RankingTakesOnlyFp8TilesThatFit) {
  const SmemBudget sm90 = budget_of(find_arch("sm_90"));
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 6144}, {6144, 2048}, {6144, 3072}, {5760, 2880},
                             {2880, 2880}, {5888, 2944}, {2944, 2944}})
    for (double tpe : {0.03, 1.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0}) {
      const int t = rank_gemm_tiles(n, k, sm90, tpe, 128, 132, ActivationType::e4m3);
      ASSERT_GE(t, 0) << n << " x " << k << " at " << tpe;
      EXPECT_TRUE(kGemmTiles[t].fp8()) << gemm_tile_name(t);
      EXPECT_TRUE(fit_gemm_tile(t, n, k, sm90, 0, ActivationType::e4m3).fits) << gemm_tile_name(t);
      const char* want = tpe <= 4 ? (k <= 4096 ? "bm128_nt8_bk256_mt1_c3_ws_fp8" : "bm128_nt8_bk256_mt1_c2_ws_fp8")
                         : tpe <= 48 ? "bm256_nt64_bk128_mt1_c1_ws_fp8"
                                     : "bm256_nt128_bk128_mt2_c1_ws_fp8";
      EXPECT_EQ(gemm_tile_name(t), want) << n << " x " << k << " at " << tpe;
    }
  // (and a bf16 GEMM never an e4m3 tile)
  for (double tpe : {1.0, 16.0, 256.0}) EXPECT_FALSE(kGemmTiles[rank_gemm_tiles(4096, 6144, sm90, tpe, 128, 132)].fp8());
}

}  // namespace
}  // namespace fp4moe::plan
