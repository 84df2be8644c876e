// MoeLayer's state, shared by the layer (moe_layer.cpp) and its tuner
// (layer_tuner.cpp). Private to the library.
#pragma once
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/prepare_gemm.hpp"
#include "fp4moe/layer.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/routing_kernels.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/tune_cache.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {

struct PreparedProjection {  // one prepared projection of all experts
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> dequant_scale;
  DeviceBuffer<float> bias;  // [E][N] in the prepared row order (prepared_bias), or empty
  int scale_parts = 1;
  int64_t n = 0, k = 0, experts = 0;
  Fp4Format format = Fp4Format::nvfp4;

  explicit PreparedProjection(const PreparedExpertWeights& p)
      : weights(p.weights), scales(p.scales), dequant_scale(p.dequant_scale), scale_parts(p.scale_parts), n(p.n),
        k(p.k), experts(p.experts), format(p.format) {}
  PreparedProjection() = default;
  int64_t bytes() const { return int64_t(weights.bytes() + scales.bytes() + dequant_scale.bytes() + bias.bytes()); }
  bool biased() const { return bias.size() > 0; }  // its GEMM runs the biased epilogue instance
};

struct ExpertPair {  // GEMM1 (gate/up interleaved) and GEMM2 (down) of a set of experts
  PreparedProjection w13, w2;
};

// Prepares one projection of `experts` experts [N, K] from device tensors on
// the device (kernels/prepare_weights.cu). `what` names it in errors.
PreparedProjection prepare_on_device(const DeviceProjection& src, Fp4Format format, ScaleLayout layout, int64_t experts,
                                     int64_t n, int64_t k, bool gated, bool up_first, const char* what);

// Which tile a GEMM runs and why.
struct TileChoice {
  int tile = -1;
  int stages = 0;
  bool tuned = false;  // from the tune cache; otherwise the planner's ranking
};

// The tiles one forward of a given token count runs. Choosing them (the tune
// cache's lookup, the planner's ranking of every tile) is done once per token
// count, on first use, so that a forward's host work is a lookup and the launches.
struct ForwardPlan {
  TileChoice gemm1, gemm2, shared_gemm1, shared_gemm2;
};

// One GEMM of a forward, described once for the forward, describe() and the
// tuner: its weights, its rows in and out, its epilogue, the token counts its
// tile is chosen for, and where the forward plan keeps that choice.
struct GemmStep {
  const char* name;   // "gemm1", "gemm2", "shared gemm1", "shared gemm2" (tune rows)
  const char* title;  // describe()
  const char* stage;  // profile() stage this GEMM ends, or null
  const PreparedProjection* w;
  bool dense;         // the shared expert: every token, one "expert"
  kernels::GemmEpilogue epilogue;
  TileChoice ForwardPlan::*tile;
  const __nv_bfloat16* x;
  const int32_t* gather;  // GEMM1 of the routed experts: the permuted rows' tokens
  int64_t rows;
  const int32_t* offsets;
  __nv_bfloat16* y;
  double tokens_per_expert;
  int64_t active_experts;
};
struct GemmSteps {
  std::array<GemmStep, 4> step{};
  int count = 0;
  const GemmStep* begin() const { return step.data(); }
  const GemmStep* end() const { return step.data() + count; }
};

struct MoeLayer::Impl {
  MoeConfig cfg;
  LayerOptions opts;
  FinalizeMode finalize = FinalizeMode::split;
  plan::SmemBudget budget;
  int sm_count = 0;
  plan::TuneContext tune_context;
  std::optional<plan::TuneCache> cache;
  std::string cache_notice;
  std::unique_ptr<ExpertPair> routed, shared;
  // H and I as the GEMMs see them (padded_features): where not multiples of the
  // K granule, padded to LayerOptions::feature_granule (gpt-oss's 2880 runs as
  // 3072), the pad being zero weights, zero biases and zero activations, so
  // that it adds nothing to the output.
  int64_t hidden_padded = 0, intermediate_padded = 0;
  int64_t expert_begin = 0;  // the model's experts held: [expert_begin, expert_begin + routed experts)
  DeviceBuffer<float> bias;
  // workspace
  DeviceBuffer<int32_t> topk_ids, offsets, permuted_pair, permuted_token, pair_pos, dense_offsets, status;
  DeviceBuffer<float> topk_weights, accumulate;
  DeviceBuffer<__nv_bfloat16> a2, y2, shared_a2, shared_y;
  // GEMM1's gathered rows in expert order [P, hidden_padded], for warp-specialized
  // tiles (sm_90) and wherever H is padded, or empty
  DeviceBuffer<__nv_bfloat16> x_permuted;
  // split-K partial sums and arrival counters (warp-specialized tiles, sm_90), zeroed once
  DeviceBuffer<uint8_t> split_k;
  // optional router: logits = hidden . router_weight^T on the device
  DeviceBuffer<__nv_bfloat16> router_weight;
  DeviceBuffer<float> router_bias, ones;  // gpt-oss's router bias [E], added by a rank-1 update with ones [max_tokens]
  DeviceBuffer<float> logits;
  DeviceBuffer<uint8_t> blas_workspace;
  cublasHandle_t blas = nullptr;
  ~Impl() {
    if (blas) cublasDestroy(blas);
  }

  // Construction steps shared by both constructors (moe_layer.cpp).
  void init_device(const MoeConfig& c, const LayerOptions& o);
  void init_router(const uint16_t* router_weight, bool on_device);
  void init_workspace();

  std::vector<std::optional<ForwardPlan>> forward_plans;  // [max_tokens + 1], filled on first use

  int64_t max_pairs() const { return opts.max_tokens * cfg.top_k; }

  kernels::GemmEpilogue gemm2_epilogue() const {
    return finalize == FinalizeMode::split ? kernels::GemmEpilogue::store : kernels::GemmEpilogue::scatter_add;
  }
  // Routed rows per expert and active experts of a forward: host estimates (no device read).
  double pairs_per_expert(int64_t tokens) const { return double(tokens * cfg.top_k) / double(cfg.num_experts); }
  int64_t active_experts(int64_t tokens) const { return std::min<int64_t>(routed->w13.experts, tokens * cfg.top_k); }

  // The GEMMs of a forward of `tokens` tokens whose hidden states are `hidden`
  // (routed rows: tokens x top_k permuted rows; the shared expert's: the tokens).
  GemmSteps gemm_steps(int64_t tokens, const __nv_bfloat16* hidden) const {
    using kernels::GemmEpilogue;
    GemmSteps s;
    const int64_t P = tokens * cfg.top_k;
    const bool split = finalize == FinalizeMode::split;
    s.step[s.count++] = {"gemm1", "GEMM1 + SwiGLU", "gemm1", &routed->w13, false, GemmEpilogue::swiglu,
                         &ForwardPlan::gemm1, hidden, permuted_token.get(), P, offsets.get(), a2.get(),
                         pairs_per_expert(tokens), active_experts(tokens)};
    s.step[s.count++] = {"gemm2", split ? "GEMM2 (split finalize)" : "GEMM2 (fused finalize)", "gemm2", &routed->w2,
                         false, gemm2_epilogue(), &ForwardPlan::gemm2, a2.get(), nullptr, P, offsets.get(),
                         split ? y2.get() : nullptr, pairs_per_expert(tokens), active_experts(tokens)};
    if (shared) {
      s.step[s.count++] = {"shared gemm1", "shared GEMM1 + SwiGLU", nullptr, &shared->w13, true, GemmEpilogue::swiglu,
                           &ForwardPlan::shared_gemm1, hidden, nullptr, tokens, dense_offsets.get(), shared_a2.get(),
                           double(tokens), 1};
      s.step[s.count++] = {"shared gemm2", "shared GEMM2", "shared", &shared->w2, true, GemmEpilogue::store,
                           &ForwardPlan::shared_gemm2, shared_a2.get(), nullptr, tokens, dense_offsets.get(),
                           shared_y.get(), double(tokens), 1};
    }
    return s;
  }

  const ForwardPlan& forward_plan(int64_t tokens) {
    FP4MOE_CHECK(tokens >= 0 && tokens < int64_t(forward_plans.size()),
                 "forward plan for " << tokens << " tokens: the layer holds plans for 0.." << forward_plans.size() - 1);
    std::optional<ForwardPlan>& p = forward_plans[size_t(tokens)];
    if (!p) {
      ForwardPlan f;
      for (const GemmStep& g : gemm_steps(tokens, nullptr))
        f.*g.tile = choose_tile(*g.w, g.tokens_per_expert, g.active_experts, g.epilogue);
      p = f;
    }
    return *p;
  }
  // One step's GEMM with the plan's tile.
  void launch_step(const GemmStep& g, const ForwardPlan& plan, cudaStream_t stream, const float* routing_weights = nullptr) {
    launch_gemm(plan.*g.tile, *g.w, g.x, g.gather, g.rows, g.offsets, g.epilogue, g.y, stream, routing_weights);
  }
  // After tuning: the next forwards choose again.
  void forget_forward_plans() { forward_plans.assign(forward_plans.size(), std::nullopt); }

  // A measurement holds for the epilogue it ran with (GEMM2's depends on the
  // finalize mode) and with or without the split-K workspace.
  plan::TuneKey tune_key(const PreparedProjection& w, double tokens_per_expert, kernels::GemmEpilogue epi) const {
    const char* e = epi == kernels::GemmEpilogue::swiglu ? "swiglu"
                    : epi == kernels::GemmEpilogue::scatter_add ? "scatter_add" : "store";
    return {std::string("grouped ") + e + (w.biased() ? " biased" : "") + (split_k.size() ? " split-k" : ""),
            to_string(w.format), w.n, w.k, w.experts,
            plan::token_bucket(tokens_per_expert)};
  }

  // The tuned tile for this GEMM and bucket when the cache has one that the
  // planner still accepts here; otherwise the planner's ranking.
  TileChoice choose_tile(const PreparedProjection& w, double tokens_per_expert, int64_t active,
                         kernels::GemmEpilogue epi) const {
    TileChoice c;
    if (cache) {
      if (const auto e = cache->find(tune_key(w, tokens_per_expert, epi))) {
        for (int i = 0; i < plan::kNumGemmTiles; ++i) {
          if (plan::gemm_tile_name(i) != e->tile) continue;
          const plan::GemmTileFit p = plan::fit_gemm_tile(i, w.n, w.k, budget, 0, w.biased());
          if (p.fits) return {i, p.stages, true};
        }
      }
    }
    c.tile = plan::rank_gemm_tiles(w.n, w.k, budget, tokens_per_expert, active, sm_count, w.biased());
    FP4MOE_CHECK(c.tile >= 0, "no GEMM tile fits N = " << w.n << ", K = " << w.k << " on this GPU: "
                                                         << plan::plan_gemm_tile(0, w.n, w.k, budget, 0, w.biased()).explanation);
    c.stages = plan::fit_gemm_tile(c.tile, w.n, w.k, budget, 0, w.biased()).stages;
    return c;
  }

  // A GEMM over `rows` permuted rows, with the layer's split-K workspace.
  kernels::GroupedGemmArgs gemm_args(const PreparedProjection& w, const __nv_bfloat16* x, const int32_t* gather, int64_t rows,
                                    const int32_t* offs, kernels::GemmEpilogue epi, __nv_bfloat16* y,
                                    const float* weights = nullptr) const {
    kernels::GroupedGemmArgs a;
    a.weights = w.weights.get();
    a.scales = w.scales.get();
    a.dequant_scale = w.dequant_scale.get();
    a.scale_parts = w.scale_parts;
    a.format = w.format;
    a.num_experts = w.experts;
    a.n = w.n;
    a.k = w.k;
    a.x = x;
    a.gather = gather;
    a.permuted_rows = rows;
    a.expert_offsets = offs;
    // permute writes the offsets (the shared expert's {0, T} too), and the kernel
    // right before any GEMM is the row copy, a GEMM or a memset, never permute
    a.offsets_ready_at_launch = true;
    a.y = y;
    a.epilogue = epi;
    a.bias = w.biased() ? w.bias.get() : nullptr;
    if (epi == kernels::GemmEpilogue::swiglu && cfg.activation == Activation::clamped_swiglu) {
      a.activation = kernels::GemmActivation::clamped_swiglu;
      a.swiglu_limit = cfg.swiglu_limit;
      a.swiglu_alpha = cfg.swiglu_alpha;
    }
    if (epi == kernels::GemmEpilogue::scatter_add) {
      a.accumulate = accumulate.get();
      a.permuted_pair = permuted_pair.get();
      a.topk_weights = weights ? weights : topk_weights.get();
      a.top_k = static_cast<int>(cfg.top_k);
    }
    a.split_workspace = split_k.size() ? split_k.get() : nullptr;
    a.split_workspace_bytes = int64_t(split_k.bytes());
    return a;
  }

  // Into the layer's own routing buffers, or (a parallel layer's send buffers) into ids and weights.
  void route(cudaStream_t stream, const float* router_logits, int64_t tokens, int32_t* ids = nullptr,
             float* weights = nullptr) {
    const MoeConfig& c = cfg;
    kernels::RouteArgs r;
    r.logits = router_logits;
    r.bias = c.use_correction_bias ? bias.get() : nullptr;
    r.tokens = tokens;
    r.experts = static_cast<int>(c.num_experts);
    r.top_k = static_cast<int>(c.top_k);
    r.sigmoid = c.scoring == Scoring::sigmoid;
    r.renormalize = c.renormalize;
    r.n_group = static_cast<int>(c.n_group);
    r.topk_group = static_cast<int>(c.topk_group);
    r.routed_scaling_factor = c.routed_scaling_factor;
    r.topk_ids = ids ? ids : topk_ids.get();
    r.topk_weights = weights ? weights : topk_weights.get();
    r.status = status.get();
    kernels::launch_route(r, stream);
  }

  // dense_tokens: the shared expert's token count, when not `tokens` (a parallel layer's own rows).
  void permute(cudaStream_t stream, const int32_t* ids, int64_t tokens, int64_t dense_tokens = -1) {
    const MoeConfig& c = cfg;
    kernels::PermuteArgs pa;
    pa.topk_ids = ids;
    pa.tokens = tokens;
    pa.experts = static_cast<int>(routed->w13.experts);
    pa.expert_begin = static_cast<int>(expert_begin);
    pa.global_experts = static_cast<int>(c.num_experts);
    pa.top_k = static_cast<int>(c.top_k);
    pa.expert_offsets = offsets.get();
    pa.permuted_pair = permuted_pair.get();
    pa.permuted_token = permuted_token.get();
    pa.pair_pos = pair_pos.get();
    pa.dense_offsets = dense_offsets.get();
    pa.dense_tokens = dense_tokens;
    pa.status = status.get();
    kernels::launch_permute(pa, stream);

  }

  // One GEMM with tile c over `rows` permuted rows: x has `rows` rows in order
  // (gather null) or they are gathered from x. A tile that loads its rows in
  // expert order by TMA (warp-specialized) gets them copied into x_permuted first.
  void launch_gemm(const TileChoice& c, const PreparedProjection& w, const __nv_bfloat16* x, const int32_t* gather,
                   int64_t rows, const int32_t* offs, kernels::GemmEpilogue epi, __nv_bfloat16* y,
                   cudaStream_t stream, const float* routing_weights = nullptr) {
    kernels::GroupedGemmArgs a = gemm_args(w, x, gather, rows, offs, epi, y, routing_weights);
    // gathered hidden states narrower than K (H padded) are copied with their zero pad
    const int64_t x_cols = gather ? cfg.hidden : w.k;
    if (gather && (kernels::loads_rows_in_expert_order(c.tile) || x_cols != w.k)) {
      FP4MOE_CHECK(int64_t(x_permuted.size()) >= rows * w.k,
                   "tile " << plan::gemm_tile_name(c.tile) << " needs the rows in expert order; the layer's copy holds "
                           << x_permuted.size() / std::max<int64_t>(w.k, 1) << " rows of " << rows);
      a = kernels::copy_rows_in_expert_order(a, x_permuted.get(), stream, x_cols);
    }
    kernels::launch_fp4_grouped_gemm(a, {.tile = c.tile, .stages = c.stages}, stream);
  }
};

}  // namespace fp4moe
