#include "plan/gemm_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "fp4moe/error.hpp"
#include "plan/split_k.hpp"
#include "plan/tma_geometry.hpp"

namespace fp4moe::plan {

std::string gemm_tile_name(int tile_index) {
  FP4MOE_CHECK(tile_index >= 0 && tile_index < kNumGemmTiles,
               "GEMM tile index " << tile_index << " is outside 0.." << kNumGemmTiles - 1);
  return kGemmTiles[tile_index].name;
}

namespace {

bool wgmma_switched_off() {
  static const bool off = std::getenv("FP4MOE_DISABLE_WGMMA") != nullptr;
  return off;
}

}  // namespace

GemmTileFit fit_gemm_tile(int tile_index, int64_t n, int64_t k, const SmemBudget& budget, int stages_request,
                          ActivationType activations) {
  FP4MOE_CHECK(tile_index >= 0 && tile_index < kNumGemmTiles,
               "GEMM tile index " << tile_index << " is outside 0.." << kNumGemmTiles - 1);
  const GemmSmemLayout L = gemm_layout(tile_index);
  const GemmTile& t = L.tile;
  GemmTileFit f;
  f.capacity = budget.per_block_at(t.ctas_per_sm);
  f.auto_stages = L.stages_for(f.capacity, k);
  f.stages = stages_request > 0 ? stages_request : f.auto_stages;
  f.smem_bytes = L.total_bytes(f.stages);
  using Why = GemmTileFit::Why;
  if (t.activations != activations) f.why = Why::other_activations;
  else if ((t.wgmma || t.warp_specialized) && !budget.has_wgmma()) f.why = Why::needs_sm90;
  else if (t.wgmma && wgmma_switched_off()) f.why = Why::wgmma_switched_off;
  else if (t.takes_tails() ? n % kTailGranule != 0 || k % kTailGranule != 0 : n % t.bm != 0 || k % t.bk != 0)
    f.why = Why::does_not_divide;
  else if (t.n_tiles(n) % t.cluster_n != 0) f.why = Why::odd_cluster_tiles;
  else if (t.warp_specialized && (!weight_tma_geometry(1, n, k, t).valid() || !scale_tma_geometry(1, n, k, t).valid()))
    f.why = Why::tensor_map;
  else if (f.stages < GemmSmemLayout::kMinStages) f.why = Why::too_few_stages;
  else if (f.stages > t.max_stages || f.stages > t.k_steps(k) + 1) f.why = Why::too_many_stages;
  else if (f.smem_bytes > f.capacity) f.why = Why::over_capacity;
  else f.why = Why::fits;
  f.fits = f.why == Why::fits;
  return f;
}

namespace {

// Every term of the tile's shared-memory account at `stages` stages.
std::vector<SmemTerm> gemm_smem_terms(const GemmSmemLayout& L, int stages) {
  const GemmTile& t = L.tile;
  const std::string xs = " x " + std::to_string(stages) + " stages";
  return {
      {"weights (FP4)", L.weight_bytes_per_stage() * stages, std::to_string(t.bm) + " rows x " + std::to_string(t.bk) + " k / 2" + xs},
      {"block scales", L.scale_bytes_per_stage() * stages, std::to_string(t.bm) + " rows x " + std::to_string(t.bk) + " k / 16" + xs},
      {std::string("activations (") + activation_type_name(t.activations) + ")",
       (L.act_bytes_per_stage() - L.act_padding_per_stage()) * stages,
       std::to_string(t.nt) + " tokens x " + std::to_string(t.bk) + " k x " + std::to_string(t.activation_bytes()) + xs +
           (t.chunk() < t.nt ? " (chunks of " + std::to_string(t.chunk()) + " tokens, an expert's last up to " +
                                   std::to_string(t.nt) + ")"
                             : std::string())},
      {"activation row padding", L.act_padding_per_stage() * stages,
       t.swizzled_activations() ? "none: 128-byte swizzle" : "16 bytes per row against ldmatrix bank conflicts" + xs},
      {"stage alignment padding", L.stage_alignment_padding() * stages,
       std::string("operands start on ") + (t.swizzled_activations() ? "1024" : "128") + " bytes" + xs},
      {"pipeline barriers", L.barrier_bytes(),
       t.warp_specialized ? "full + empty mbarrier x " + std::to_string(t.max_stages) + " stages (most) x 8"
                          : "cp.async groups need no mbarrier"},
      {"base alignment", 0, t.swizzled_activations() ? "the dynamic shared memory base is 1024-byte aligned (no static shared memory)" : "-"},
      {"epilogue staging (fp32)", L.epilogue_bytes(),
       (L.epilogue_groups() > 1 ? std::to_string(L.epilogue_groups()) + " warpgroups x " : std::string()) +
           std::to_string(L.epilogue_tokens()) + " tokens" + (L.epilogue_tokens() < t.nt ? " at a time" : "") + " x (" +
           std::to_string(L.epilogue_group_rows()) + " + 4) x 4"},
      {"scheduler prefix", L.scheduler_prefix_bytes(), "(1024 experts + 1) x 4, token chunks per expert"},
      {"row indices", L.row_index_bytes(),
       std::to_string(L.row_index_bytes() / 4 / t.nt) + " item(s) x " + std::to_string(t.nt) + " gathered activation rows x 4"},
      {"split-K arrival flag", L.split_flag_bytes(),
       t.splits_k()          ? "which CTA of a split item sums the partials (16 bytes)"
       : t.warp_specialized ? "reserved; this tile does not split K"
                            : "no split-K on all-warps tiles"},
      {"fixed-region alignment padding",
       L.scheduler_bytes() - L.scheduler_prefix_bytes() - L.row_index_bytes() - L.barrier_bytes() - L.split_flag_bytes(),
       "to 128 bytes"},
      {"runtime reservation", 1024, "per block, outside the opt-in capacity (sm_80+)"},
  };

}

// Why the tile fits or not, and (p.suggestions) what would make it fit.
std::string explain_fit(const GemmTileFit& f, const GemmSmemLayout& L, int64_t n, int64_t k, const SmemBudget& budget,
                        SmemPlan& p) {
  const GemmTile& t = L.tile;
  const std::string name = t.name;
  const int64_t capacity = f.capacity;
  const int auto_stages = f.auto_stages;
  std::ostringstream why;
  using Why = GemmTileFit::Why;
  if (capacity < budget.optin_per_block)
    why << "occupancy target " << t.ctas_per_sm << " CTAs/SM: per-block budget " << budget.per_sm << " / "
        << t.ctas_per_sm << " - " << budget.reserved_per_block << " = " << capacity << " of the "
        << budget.optin_per_block << " opt-in; ";
  switch (f.why) {
    case Why::needs_sm90:
      why << name << " uses Hopper " << (t.wgmma ? "warpgroup MMA" : "bulk copies and transaction mbarriers")
          << " (built for sm_90a only); the target is sm_" << budget.cc;
      break;
    case Why::other_activations:
      why << name << " multiplies " << activation_type_name(t.activations) << " activations; this GEMM's are "
          << activation_type_name(t.activations == ActivationType::bf16 ? ActivationType::e4m3 : ActivationType::bf16);
      break;
    case Why::wgmma_switched_off: why << name << ": warpgroup-MMA tiles are switched off by FP4MOE_DISABLE_WGMMA"; break;
    case Why::does_not_divide:
      if (t.takes_tails())
        why << name << " takes N and K in steps of " << kTailGranule << ": N = " << n << ", K = " << k;
      else
        why << name << " does not divide the problem: N = " << n << " (tile " << t.bm << "), K = " << k << " (tile " << t.bk << ")";
      break;
    case Why::odd_cluster_tiles:
      why << name << ": its clusters of " << t.cluster_n << " CTAs take adjacent N tiles of one token chunk, and N = " << n
          << " has " << t.n_tiles(n) << " tiles of " << t.bm << " rows, not a multiple of " << t.cluster_n;
      break;
    case Why::tensor_map:
      why << name << ": its stage boxes of weights (" << t.bm / 16 << " row groups x " << t.bk * 8 << " bytes) or scales ("
          << t.bk << " bytes) do not fit a tensor map of N = " << n << ", K = " << k;
      break;
    case Why::too_few_stages: {
      why << name << ": " << p.stages << " stage(s) of " << p.per_stage << " bytes fit in " << capacity
          << " bytes after the epilogue (" << L.epilogue_bytes() << ") and scheduler (" << L.scheduler_bytes()
          << "); the kernel needs at least " << p.min_stages;
      const int64_t need = L.total_bytes(p.min_stages);
      p.suggestions.push_back(std::to_string(p.min_stages) + " stages need " + std::to_string(need) + " bytes, " +
                              std::to_string(need - capacity) + " more than this budget");
      for (int c = t.ctas_per_sm - 1; c >= 1; --c)
        if (budget.per_block_at(c) >= need) {
          p.suggestions.push_back("an occupancy target of " + std::to_string(c) + " CTA(s)/SM gives " +
                                  std::to_string(budget.per_block_at(c)) + " bytes per block: " +
                                  std::to_string(L.stages_for(budget.per_block_at(c), k)) + " stages fit");
          break;
        }
      for (int i = 0; i < kNumGemmTiles; ++i) {
        const GemmTile& o = kGemmTiles[i];
        if (o.nt == t.nt && o.bk < t.bk && gemm_layout(i).total_bytes(p.min_stages) <= budget.per_block_at(o.ctas_per_sm)) {
          p.suggestions.push_back("tile " + gemm_tile_name(i) + " (K stage " + std::to_string(o.bk) + ") fits");
          break;
        }
      }
      break;
    }
    case Why::too_many_stages:
      why << name << ": " << p.stages << " stages requested, the kernel supports at most " << p.max_stages
          << " and K stages + 1 = " << t.k_steps(k) + 1;
      break;
    case Why::over_capacity:
      why << name << " with " << p.stages << " stages needs " << p.smem_bytes << " bytes; the limit is " << capacity
          << ": launch refused";
      p.suggestions.push_back(std::to_string(auto_stages) + " stages (" + std::to_string(L.total_bytes(auto_stages)) +
                              " bytes) fit");
      break;
    case Why::fits:
      why << name << ": " << p.stages << " stages x " << p.per_stage << " + epilogue " << L.epilogue_bytes()
          << " + scheduler " << L.scheduler_bytes() << " = " << p.smem_bytes << " of " << capacity << " bytes, "
          << p.headroom << " spare";
      break;
  }
  return why.str();
}

}  // namespace

SmemPlan plan_gemm_tile(int tile_index, int64_t n, int64_t k, const SmemBudget& budget, int stages_request,
                        ActivationType activations) {
  const GemmTileFit f = fit_gemm_tile(tile_index, n, k, budget, stages_request, activations);
  const GemmSmemLayout L = gemm_layout(tile_index);
  const GemmTile& t = L.tile;
  SmemPlan p;
  p.kernel = "grouped";
  p.config = gemm_tile_name(tile_index);
  p.capacity = f.capacity;
  p.per_stage = L.smem_bytes_per_stage();
  p.min_stages = GemmSmemLayout::kMinStages;
  p.max_stages = t.max_stages;
  p.threads = t.threads();
  p.ctas_per_sm = t.ctas_per_sm;
  p.activations = activation_type_name(t.activations);
  p.stages = f.stages;
  p.smem_bytes = f.smem_bytes;
  p.headroom = f.capacity - p.smem_bytes;
  p.fits = f.fits;
  p.terms = gemm_smem_terms(L, p.stages);
  p.explanation = explain_fit(f, L, n, k, budget, p);
  return p;
}

SmemPlan plan_gemm_tile(int tile_index, int64_t n, int64_t k, const Arch& arch, int stages_request,
                        ActivationType activations) {
  SmemPlan p = plan_gemm_tile(tile_index, n, k, budget_of(arch), stages_request, activations);
  p.arch = std::string(arch.name);
  return p;
}

namespace {

// e4m3 activations: by rows per expert, the tile measured fastest there
// (bench_w4a8_gemm on the H200, docs/fp8.md), falling back to the next that
// fits; the tuner measures the rest.
int rank_fp8_tiles(int64_t n, int64_t k, const SmemBudget& capacity, double tokens_per_expert) {
  struct Preferred {
    const char* tile;
    double up_to_tokens_per_expert;
    int64_t up_to_k = INT64_MAX;
  };
  // Three CTAs per SM of three stages each win where K is short (gpt-oss's
  // 3072, GLM-5's GEMM2 2048); at GLM-5's K = 6144 two of four stages do.
  static constexpr Preferred kPreferred[] = {
      {"bm128_nt8_bk256_mt1_c3_ws_fp8", 4, 4096}, {"bm128_nt8_bk256_mt1_c2_ws_fp8", 4},
      {"bm128_nt16_bk128_mt1_c2_ws_fp8", 4},      {"bm256_nt64_bk128_mt1_c1_ws_fp8", 48},
      {"bm256_nt128_bk128_mt2_c1_ws_fp8", 1e30},  {"bm256_nt64_bk128_mt1_c1_ws_fp8", 1e30},
      // where no 256-row tile fits (a smaller shared-memory budget): 128 rows, then the last resort
      {"bm128_nt128_bk128_mt1_c1_ws_fp8", 1e30},
      {"bm128_nt16_bk128_mt1_c2_ws_fp8", 1e30},
  };
  for (const Preferred& want : kPreferred) {
    if (tokens_per_expert > want.up_to_tokens_per_expert || k > want.up_to_k) continue;
    const int i = gemm_tile_index(want.tile);
    if (fit_gemm_tile(i, n, k, capacity, 0, ActivationType::e4m3).fits) return i;
  }
  return -1;
}

}  // namespace

int rank_gemm_tiles(int64_t n, int64_t k, const SmemBudget& capacity, double tokens_per_expert, int64_t active_experts,
                      int sm_count, ActivationType activations) {
  if (activations == ActivationType::e4m3) return rank_fp8_tiles(n, k, capacity, tokens_per_expert);
  // The kernels are bound by the issue rate of their dequantization, so
  // resident warps beat wide token tiles: up to ~6 tokens per expert an 8-token
  // tile, to ~12 a 16-token tile, beyond that 32-token tiles (experts with more
  // tokens take several chunks, whose weights come from L2). Among tiles of that
  // width: most resident warps, then the deeper pipeline; small bm when there
  // are too few items for the SMs. On sm_90 the warp-specialized tiles, whose
  // producer keeps the loads off the math warps' issue slots: below ~12 tokens
  // per expert those with mma.sync consumers; from ~12 the warpgroup-MMA tiles
  // (whose activation copies follow each item's rows, so a wide tile reads no
  // more than the rows it multiplies), 64-token bm256 (four consumer
  // warpgroups) to ~48 (stages of 256 k where K
  // allows: half the barrier waits), then the 128-token tile with the most weight
  // rows per activation byte; both in clusters of two N tiles sharing each
  // stage's activations where N has whole pairs of 256-row tiles (half the
  // activation bytes from L2 per CTA: less power at the cap) and the items are
  // not few (cluster tiles do not split K); from ~112 its variant whose last
  // chunk per expert takes up to 16 more rows, from ~192 the same with chunks of 136 (fewer
  // ragged items; below that its 136-column loop runs for chunks that 128
  // columns cover). Under half an item of 256 rows per SM (a single expert, the
  // shared one, at a few hundred tokens): the 128-row tile, which splits K.
  // docs/planner.md has the measurements behind each threshold.
  if (capacity.has_wgmma() && tokens_per_expert >= 12 && !wgmma_switched_off()) {
    const int64_t rows = int64_t(std::ceil(tokens_per_expert));
    const double items_of_256_rows = double(active_experts) * double(token_chunks(rows, 128, 144)) * double((n + 255) / 256);
    const bool few_items = 2 * items_of_256_rows < sm_count;
    // the preferred tile first, then the narrower ones (a tile that does not fit falls back);
    // two m64 blocks per consumer warpgroup from 128 columns on 256 rows
    struct Preferred {
      int tile;
      double from_tokens_per_expert;
      bool only_for_few_items;
    };
    static constexpr Preferred kPreferred[] = {
        {gemm_tile_index("bm128_nt128_bk128_mt1_c1_ws"), 48, true},
        {gemm_tile_index("bm256_nt144_bk128_mt2_c1_ws_ch136"), 192, false},
        {gemm_tile_index("bm256_nt144_bk128_mt2_c1_ws_ch128"), 112, false},
        {gemm_tile_index("bm256_nt128_bk128_mt2_c1_ws_cl2"), 48, false},
        {gemm_tile_index("bm256_nt128_bk128_mt2_c1_ws"), 48, false},
        {gemm_tile_index("bm256_nt64_bk256_mt1_c1_ws_e16_cl2"), 0, false},
        {gemm_tile_index("bm256_nt64_bk256_mt1_c1_ws_e16"), 0, false},
        {gemm_tile_index("bm256_nt64_bk128_mt1_c1_ws"), 0, false},
        // where no 256-row tile fits (a smaller shared-memory budget)
        {gemm_tile_index("bm128_nt128_bk128_mt1_c1_ws"), 48, false},
        {gemm_tile_index("bm128_nt64_bk128_mt1_c1_ws"), 0, false},
    };
    static_assert(std::all_of(std::begin(kPreferred), std::end(kPreferred), [](const Preferred& p) { return p.tile >= 0; }),
                  "a preferred tile is not in kGemmTiles");
    for (const Preferred& want : kPreferred) {
      if (tokens_per_expert < want.from_tokens_per_expert || (want.only_for_few_items && !few_items)) continue;
      if (few_items && kGemmTiles[want.tile].cluster_n > 1) continue;  // the tile alone splits K; a cluster tile cannot
      if (fit_gemm_tile(want.tile, n, k, capacity, 0).fits) return want.tile;
    }
  }
  const int want_nt = tokens_per_expert <= 6 ? 8 : tokens_per_expert <= 12 ? 16 : 32;
  int best = -1;
  double best_score = -1e300;
  for (int i = 0; i < kNumGemmTiles; ++i) {
    const GemmTileFit p = fit_gemm_tile(i, n, k, capacity, 0);
    if (!p.fits) continue;
    const GemmTile& t = kGemmTiles[i];
    if (t.wgmma) continue;  // below ~12 tokens per expert only the tuner picks warpgroup-MMA tiles
    const double chunks = double(t.chunks_of(int64_t(std::ceil(std::max(1.0, tokens_per_expert)))));
    const double items = double(active_experts) * chunks * double(t.n_tiles(n));
    const double resident = double(t.ctas_per_sm) * sm_count, rounds = std::ceil(items / resident);
    // Warp-specialized tiles: more than 16 math warps per SM (three CTAs of 8) pay only below
    // half a token per expert over many rounds, where the items are many and short.
    const int warps_counted = t.warp_specialized && !(tokens_per_expert < 0.5 && rounds > 2) ? 16 : 24;
    double score = (t.nt == want_nt ? 1000.0 : -std::abs(std::log2(double(t.nt) / want_nt)) * 100.0) +
                   std::min(t.ctas_per_sm * t.warps(), warps_counted) * 4.0 + std::min(p.stages, 5) + t.bk / 256.0;
    // Where they fit (sm_90), the warp-specialized mma.sync tiles beat the all-warps ones at
    // every decode size measured: their producer's tensor copies leave the issue slots to the math.
    if (t.warp_specialized) {
      score += 100.0;
      // With one or two rounds the share of resident CTAs the last round leaves idle counts
      // (GEMM2 at one token: 384 items of 128 rows fill one round of 396 CTAs where they took
      // two of 264), unless split-K will spread the items (balance below 0.5).
      const double balance = items / (rounds * resident);
      if (rounds <= 2 && balance >= kSplitBelowBalance) score -= 200.0 * (1.0 - balance);
    }
    if (t.bm < 128) score += items < 2.0 * sm_count ? 40.0 : -40.0;
    if (score > best_score) best_score = score, best = i;
  }
  return best;
}

}  // namespace fp4moe::plan
