// Making a layer's forward plans: the GEMMs of a shape, each one's tile (the
// tune cache's, else the planner's ranking) and its prepared launch, the
// routing, permutation and finalize arguments; and printing a plan.
#include "runtime/forward_plan.hpp"

#include <algorithm>
#include <sstream>

#include "fp4moe/error.hpp"
#include "plan/gemm_plan.hpp"
#include "runtime/layer_core.hpp"

namespace fp4moe {

void enqueue_planned_gemm(const GemmStepPlan& step, const __nv_bfloat16* hidden, const float* routing_weights,
                          cudaStream_t stream) {
  if (!step.reads_hidden && !step.reads_routing_weights) return enqueue_gemm_step(step.launch, stream);
  GemmStepLaunch bound = step.launch;
  if (step.reads_hidden) bind_gemm_input(bound, hidden);
  if (step.reads_routing_weights) bound.gemm.params.topk_weights = routing_weights;
  enqueue_gemm_step(bound, stream);
}

int ForwardPlan::launches(bool layer_routes) const {
  int n = layer_routes && !route_permute_fused ? 2 : 1;  // routing, permutation
  for (const GemmStepPlan& g : gemms()) n += 1 + (g.launch.copies_rows || g.launch.quantizes_rows ? 1 : 0);
  return n + (accumulate_bytes ? 1 : 0) + 1;  // the fused finalize's zeroing; the finalize
}

std::string ForwardPlan::describe() const {
  std::ostringstream os;
  if (notes) os << *notes;
  if (route_permute_fused)
    os << "routing and permutation: one launch (one CTA, " << shape.rows << " tokens; when the layer routes)\n";
  for (const GemmStepPlan& g : gemms()) {
    const kernels::PreparedGemm& k = g.launch.gemm;
    os << g.title << ": N " << k.params.n << " K " << k.params.k << ", tile " << plan::gemm_tile_name(g.choice.tile) << " ("
       << (g.choice.tuned ? "tuned" : "planner default") << "), " << k.stages << " stages, " << k.smem_bytes
       << " bytes of shared memory, " << k.grid << " CTAs";
    if (g.launch.copies_rows) os << ", rows copied in expert order first";
    if (g.launch.quantizes_rows) os << ", rows quantized to e4m3 (a scale per row) in expert order first";
    if (k.k_split.splits > 1) os << ", K split " << k.k_split.splits << " ways (" << k.k_split.explanation() << ")";
    if (k.k_split.balanced_split) os << ", K stages balanced over the CTAs (" << k.k_split.explanation() << ")";
    os << "\n";
  }
  os << "launches: " << launches(true) << " a forward (" << launches(false) << " with the caller's routing)\n";
  return os.str();
}

std::shared_ptr<const ForwardPlan> LayerCore::plan(int64_t tokens) const {
  FP4MOE_CHECK(tokens >= 1 && tokens <= opts_.max_tokens,
               "forward plan for " << tokens << " tokens: the layer plans 1..max_tokens = " << opts_.max_tokens);
  return plan(PlanShape::of_tokens(tokens));
}

std::shared_ptr<const ForwardPlan> LayerCore::plan(const PlanShape& shape) const {
  return plans_.get(shape, [this](const PlanShape& s) { return make_plan(s); });
}

// A measurement holds for the epilogue it ran with (GEMM2's depends on the
// finalize mode) and with or without the split-K workspace.
plan::TuneKey LayerCore::tune_key(const GemmSpec& g) const {
  const kernels::GemmEpilogue epi = g.io.epilogue;
  const char* e = epi == kernels::GemmEpilogue::swiglu ? "swiglu"
                  : epi == kernels::GemmEpilogue::scatter_add ? "scatter_add" : "store";
  return {std::string("grouped ") + e + (g.w->biased() ? " biased" : "") + (split_k_.size() ? " split-k" : "") +
              (split_k_.size() && opts_.balanced_split ? " balanced" : "") +
              (g.w->activations == plan::ActivationType::e4m3 ? " e4m3" : ""),
          to_string(g.w->format), g.w->n, g.w->k, g.w->experts, plan::token_bucket(g.tokens_per_expert)};
}

// The tuned tile for this GEMM and bucket when the cache has one that the
// planner still accepts here; otherwise the planner's ranking.
TileChoice LayerCore::choose_tile(const GemmSpec& g) const {
  const PreparedProjection& w = *g.w;
  const plan::SmemBudget& budget = device_.budget;
  if (cache_) {
    if (const auto e = cache_->find(tune_key(g))) {
      for (int i = 0; i < plan::kNumGemmTiles; ++i) {
        if (plan::gemm_tile_name(i) != e->tile) continue;
        const plan::GemmTileFit p = plan::fit_gemm_tile(i, w.n, w.k, budget, 0, w.activations);
        if (p.fits) return {i, p.stages, true};
      }
    }
  }
  TileChoice c;
  c.tile = plan::rank_gemm_tiles(w.n, w.k, budget, g.tokens_per_expert, g.active_experts, device_.sm_count,
                                 w.activations);
  if (c.tile < 0) {  // the first tile of the GEMM's activation type says why
    int first = 0;
    while (first + 1 < plan::kNumGemmTiles && plan::kGemmTiles[first].activations != w.activations) ++first;
    throw Error("no " + std::string(plan::activation_type_name(w.activations)) + " GEMM tile fits N = " +
                std::to_string(w.n) + ", K = " + std::to_string(w.k) + " on this GPU: " +
                plan::plan_gemm_tile(first, w.n, w.k, budget, 0, w.activations).explanation);
  }
  c.stages = plan::fit_gemm_tile(c.tile, w.n, w.k, budget, 0, w.activations).stages;
  return c;
}

GemmStepLaunch LayerCore::prepare(const GemmSpec& g, const TileChoice& c) const {
  return prepare_gemm_step(g.w->view(), g.io, {.tile = c.tile, .stages = c.stages, .balance_k = opts_.balanced_split}, device_);
}

// The GEMMs of a forward of `shape`: the routed experts over rows x top_k
// permuted rows, the shared expert over its own tokens. Inputs bound at
// launch (the hidden states) are planned on a stand-in of the same shape.
std::vector<LayerCore::GemmSpec> LayerCore::gemm_specs(const PlanShape& s) const {
  using kernels::GemmEpilogue;
  // (the shared expert among the routed experts: one more row per token, one more active expert)
  const int64_t P = permuted_rows(s.rows);
  const bool split = finalize_ == FinalizeMode::split;
  const double per_expert = rows_per_expert(s.tile_tokens);
  const int64_t active = std::min<int64_t>(routed_experts_, s.tile_tokens * cfg_.top_k) + (shared_in_routed_ ? 1 : 0);
  const __nv_bfloat16* hidden_stand_in = a2_.get();
  GemmOperands common;
  common.offsets_ready_at_launch = true;  // written by the permutation, never by the kernel right before a GEMM
  common.split_workspace = split_k_.size() ? split_k_.get() : nullptr;
  common.split_workspace_bytes = int64_t(split_k_.bytes());
  if (cfg_.activation == Activation::clamped_swiglu) {
    common.activation = kernels::GemmActivation::clamped_swiglu;
    common.swiglu_limit = cfg_.swiglu_limit;
    common.swiglu_alpha = cfg_.swiglu_alpha;
  }
  auto operands = [&](const __nv_bfloat16* x, const int32_t* gather, int64_t rows, const int32_t* offsets,
                      GemmEpilogue epi, __nv_bfloat16* y) {
    GemmOperands io = common;
    io.x = x;
    io.gather = gather;
    io.rows = rows;
    io.offsets = offsets;
    io.epilogue = epi;
    io.y = y;
    if (epi != GemmEpilogue::swiglu) io.activation = kernels::GemmActivation::silu;
    return io;
  };
  std::vector<GemmSpec> g;
  GemmOperands io1 = operands(hidden_stand_in, permuted_token_.get(), P, offsets_.get(), GemmEpilogue::swiglu, a2_.get());
  io1.x_cols = cfg_.hidden;  // hidden states narrower than a padded K are copied with their zero pad
  io1.row_copy = x_permuted_.size() ? x_permuted_.get() : nullptr;
  io1.row_copy_e4m3 = x_e4m3_.size() ? x_e4m3_.get() : nullptr;
  io1.row_scales = x_scales_.size() ? x_scales_.get() : nullptr;
  g.push_back({"gemm1", "GEMM1 + SwiGLU", "gemm1", false, true, false, &routed_->w13, io1, per_expert, active});
  GemmOperands io2 = operands(a2_.get(), nullptr, P, offsets_.get(), split ? GemmEpilogue::store : GemmEpilogue::scatter_add,
                              split ? y2_.get() : nullptr);
  io2.accumulate = accumulate_.get();
  io2.permuted_pair = permuted_pair_.get();
  io2.topk_weights = topk_weights_.get();
  io2.top_k = static_cast<int>(cfg_.top_k);
  io2.row_copy_e4m3 = a2_e4m3_.size() ? a2_e4m3_.get() : nullptr;
  io2.row_scales = a2_scales_.size() ? a2_scales_.get() : nullptr;
  g.push_back({"gemm2", split ? "GEMM2 (split finalize)" : "GEMM2 (fused finalize)", "gemm2", false, false, !split,
               &routed_->w2, io2, per_expert, active});
  if (shared_) {
    const int64_t T = s.dense_rows;
    g.push_back({"shared gemm1", "shared GEMM1 + SwiGLU", nullptr, true, true, false, &shared_->w13,
                 operands(hidden_stand_in, nullptr, T, dense_offsets_.get(), GemmEpilogue::swiglu, shared_a2_.get()),
                 double(T), 1});
    g.push_back({"shared gemm2", "shared GEMM2", "shared", true, false, false, &shared_->w2,
                 operands(shared_a2_.get(), nullptr, T, dense_offsets_.get(), GemmEpilogue::store, shared_y_.get()),
                 double(T), 1});
  }
  return g;
}

std::string LayerCore::plan_notes() const {
  std::ostringstream os;
  if (!cache_notice_.empty()) os << cache_notice_ << "\n";
  if (cache_ && cache_->size()) os << "tuned tiles from " << cache_->path() << "\n";
  if (hidden_padded_ != cfg_.hidden || intermediate_padded_ != cfg_.intermediate)
    os << "H " << cfg_.hidden << " and I " << cfg_.intermediate << " run as " << hidden_padded_ << " and "
       << intermediate_padded_ << " (padded with zero weights)\n";
  if (opts_.activations == ActivationFormat::fp8)
    os << "activations: the routed experts' GEMMs read e4m3 rows with a scale per row (W4A8, the FP8 row copy before "
          "each)"
       << (shared_ ? "; the shared expert's stay bf16" : "") << "\n";
  if (shared_in_routed_)
    os << "the shared expert runs as routed expert " << routed_experts_
       << " (every token one row after the routed rows, added with weight 1)\n";
  if (cfg_.expert_bias || cfg_.activation != Activation::swiglu)
    os << "epilogues: the biased instance (expert biases"
       << (cfg_.activation == Activation::clamped_swiglu ? ", the clamped SwiGLU" : "") << ")\n";
  return os.str();
}

ForwardPlan LayerCore::make_plan(const PlanShape& s) const {
  FP4MOE_CHECK(s.rows >= 1 && permuted_rows(s.rows) <= int64_t(permuted_pair_.size()) && s.tile_tokens >= 0 &&
                   s.dense_rows >= 0 && s.dense_rows <= opts_.max_tokens &&
                   (!shared_in_routed_ || s.dense_rows == s.rows),
               "forward plan: " << s.rows << " rows (tiles for " << s.tile_tokens << " tokens, shared expert over "
                                << s.dense_rows << ") do not fit the layer's workspace of max_tokens = "
                                << opts_.max_tokens);
  ForwardPlan p;
  p.shape = s;
  // one copy of the notes for all of the layer's plans while they read the same
  // (make_plan runs under the plan cache's lock, so notes_ is never raced)
  std::string notes = plan_notes();
  if (!notes_ || *notes_ != notes) notes_ = std::make_shared<const std::string>(std::move(notes));
  p.notes = notes_;
  p.route = kernels::route_args(cfg_, correction_bias_.get(), s.rows, topk_ids_.get(), topk_weights_.get(), status_.get());
  kernels::PermuteArgs& pa = p.permute;
  pa.tokens = s.rows;
  pa.experts = static_cast<int>(routed_experts_);
  pa.shared_rows = shared_in_routed_ ? s.dense_rows : 0;
  pa.expert_begin = static_cast<int>(expert_begin_);
  pa.global_experts = static_cast<int>(cfg_.num_experts);
  pa.top_k = static_cast<int>(cfg_.top_k);
  pa.expert_offsets = offsets_.get();
  pa.permuted_pair = permuted_pair_.get();
  pa.permuted_token = permuted_token_.get();
  pa.pair_pos = pair_pos_.get();
  pa.dense_offsets = dense_offsets_.get();
  pa.dense_tokens = s.dense_rows;
  pa.status = status_.get();
  p.route_permute_fused = kernels::route_permute_fits(s.rows, p.route.experts, pa.experts);
  const std::vector<GemmSpec> specs = gemm_specs(s);
  p.gemm_steps.reserve(specs.size());
  for (const GemmSpec& g : specs) {
    GemmStepPlan& st = p.gemm_steps.emplace_back();
    st.name = g.name;
    st.title = g.title;
    st.stage = g.stage;
    st.dense = g.dense;
    st.reads_hidden = g.reads_hidden;
    st.reads_routing_weights = g.reads_routing_weights;
    st.choice = choose_tile(g);
    st.launch = prepare(g, st.choice);
  }
  if (finalize_ != FinalizeMode::split) {
    p.accumulate = accumulate_.get();
    p.accumulate_bytes = size_t(s.rows * hidden_padded_) * sizeof(float);
  }
  kernels::FinalizeArgs& f = p.finalize;
  f.expert_out = finalize_ == FinalizeMode::split ? y2_.get() : nullptr;
  f.accumulated = finalize_ == FinalizeMode::split ? nullptr : accumulate_.get();
  f.pair_pos = pair_pos_.get();
  f.shared_out = shared_ ? shared_y_.get() : nullptr;
  f.shared_row0 = shared_in_routed_ ? offsets_.get() + routed_experts_ : nullptr;
  f.tokens = s.rows;
  f.hidden = cfg_.hidden;
  f.expert_stride = hidden_padded_;
  f.top_k = static_cast<int>(cfg_.top_k);
  f.status = status_.get();
  return p;
}

}  // namespace fp4moe
