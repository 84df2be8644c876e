// MoeLayer: owns the prepared weights and the workspace, and enqueues the
// layer's kernels. Nothing here synchronises or allocates after construction.
#include "fp4moe/layer.hpp"

#include "runtime/moe_layer_impl.hpp"

#include <algorithm>
#include <sstream>

#include "format/prepare_gemm.hpp"
#include "fp4moe/error.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/dependent_launch.hpp"
#include "kernels/routing_kernels.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"
#include "runtime/cublas_check.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/device_limits.hpp"

namespace fp4moe {
namespace {

// The experts' GEMM1 and GEMM2 weights prepared at [2 I', H'] and [H', I']
// (H' and I' padded: hidden and width), with their biases when `biased`.
ExpertPair prepare_experts(const std::vector<const ExpertWeights*>& experts, int64_t hidden, int64_t width, bool biased,
                           Activation activation) {
  // the clamped SwiGLU runs in the biased epilogue instance: zero biases where the experts have none
  const bool biased_gemm1 = biased || activation != Activation::swiglu;
  std::vector<const Fp4Matrix*> gate, up, down;
  std::vector<const std::vector<float>*> gate_bias, up_bias, down_bias;
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertWeights* e = experts[i];
    gate.push_back(&e->gate);
    up.push_back(&e->up);
    down.push_back(&e->down);
    gate_bias.push_back(&e->gate_bias);
    up_bias.push_back(&e->up_bias);
    down_bias.push_back(&e->down_bias);
    if (biased)
      FP4MOE_CHECK(int64_t(e->gate_bias.size()) == e->gate.rows && int64_t(e->up_bias.size()) == e->up.rows &&
                       int64_t(e->down_bias.size()) == e->down.rows,
                   "MoeLayer: expert " << i << " has " << e->gate_bias.size() << " gate, " << e->up_bias.size() << " up and "
                                       << e->down_bias.size() << " down biases; the model needs " << e->gate.rows << ", "
                                       << e->up.rows << " and " << e->down.rows);
  }
  ExpertPair p{PreparedProjection(prepare_gated_gemm_weights(gate, up, width, hidden)),
               PreparedProjection(prepare_gemm_weights(down, hidden, width))};
  if (biased_gemm1) p.w13.bias.upload(prepared_gated_bias(gate_bias, up_bias, 2 * width));
  if (biased) p.w2.bias.upload(prepared_bias(down_bias, hidden));
  return p;
}

int64_t granule_of(const LayerOptions& o) { return o.feature_granule ? o.feature_granule : kFeatureGranule; }

}  // namespace

void MoeLayer::Impl::init_device(const MoeConfig& c, const LayerOptions& o) {
  c.validate();
  cfg = c;
  opts = o;
  FP4MOE_CHECK(o.max_tokens >= 1, "LayerOptions::max_tokens = " << o.max_tokens << " must be at least 1");
  FP4MOE_CHECK(c.hidden % 8 == 0, "MoeLayer: hidden = " << c.hidden << " is not a multiple of 8");
  const int64_t granule = granule_of(o);
  FP4MOE_CHECK(granule == 128 || granule == 256,
               "LayerOptions::feature_granule = " << o.feature_granule << " is not 0 (256), 128 or 256");
  hidden_padded = padded_features(c.hidden, granule);
  intermediate_padded = padded_features(c.intermediate, granule);
  // (the shared expert reads the hidden states in place, at their own width)
  FP4MOE_CHECK(!c.shared_expert || (hidden_padded == c.hidden && c.shared_intermediate % kPreparedKGranule == 0),
               "MoeLayer: a shared expert needs hidden = " << c.hidden << " and shared_intermediate = "
                                                           << c.shared_intermediate << " to be multiples of "
                                                           << kPreparedKGranule);
  if (o.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(o.device));
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  const DeviceLimits limits = device_limits(dev);
  sm_count = limits.sm_count;
  budget = limits.budget;
  cudaDeviceProp prop{};
  FP4MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  tune_context.gpu = prop.name;
  tune_context.cc = prop.major * 10 + prop.minor;
  FP4MOE_CUDA_CHECK(cudaDriverGetVersion(&tune_context.driver));
  FP4MOE_CUDA_CHECK(cudaRuntimeGetVersion(&tune_context.runtime));
  tune_context.fp4moe_version = kVersion;
  if (o.use_tune_cache) {
    cache = plan::TuneCache::load(plan::TuneCache::default_path(o.tune_cache), tune_context);
    cache_notice = cache->notice();
  }
}

// The optional router: logits = hidden . router_weight^T by cuBLAS (bf16 [E, H]).
void MoeLayer::Impl::init_router(const uint16_t* w, bool on_device) {
  const size_t count = size_t(cfg.num_experts * cfg.hidden);
  router_weight.resize(count);
  FP4MOE_CUDA_CHECK(cudaMemcpy(router_weight.get(), w, count * 2,
                               on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice));
  logits.resize(size_t(opts.max_tokens * cfg.num_experts));
  blas_workspace.resize(size_t(8) << 20);  // a fixed workspace keeps cuBLAS graph-capture safe
  FP4MOE_CUBLAS_CHECK(cublasCreate(&blas));
  FP4MOE_CUBLAS_CHECK(cublasSetWorkspace(blas, blas_workspace.get(), blas_workspace.bytes()));
}

void MoeLayer::Impl::init_workspace() {
  finalize = opts.deterministic || opts.finalize == FinalizeMode::automatic ? FinalizeMode::split : opts.finalize;
  forward_plans.resize(size_t(opts.max_tokens + 1));
  const int64_t T = opts.max_tokens, P = max_pairs(), H = cfg.hidden;
  topk_ids.resize(size_t(P));
  topk_weights.resize(size_t(P));
  offsets.resize(size_t(routed->w13.experts + 1));
  permuted_pair.resize(size_t(P));
  permuted_token.resize(size_t(P));
  pair_pos.resize(size_t(P));
  dense_offsets.resize(2);
  status.resize(1);
  status.fill_bytes(0);
  const int64_t Hp = hidden_padded;
  a2.resize(size_t(P * intermediate_padded));
  if (finalize == FinalizeMode::split) y2.resize(size_t(P * Hp));
  else accumulate.resize(size_t(T * Hp));
  // Warp-specialized tiles (sm_90) load rows in expert order, and padded rows
  // are copied with their pad: GEMM1 then reads a permuted copy of x.
  if (budget.cc == 90 || Hp != H) x_permuted.resize(size_t(P * Hp));
  if (budget.cc == 90) {
    if (opts.split_k) {
      split_k.resize(size_t(plan::kSplitKWorkspaceBytes));
      split_k.fill_bytes(0);  // the arrival counters; every launch leaves them zero
    }
  }
  if (cfg.shared_expert) {
    shared_a2.resize(size_t(T * cfg.shared_intermediate));
    shared_y.resize(size_t(T * H));
  }
}

MoeLayer::MoeLayer(const MoeConfig& cfg, const MoeWeights& w, const LayerOptions& opts) : impl_(new Impl) {
  Impl& m = *impl_;
  m.init_device(cfg, opts);
  const int64_t count = opts.expert_count < 0 ? cfg.num_experts : opts.expert_count;
  FP4MOE_CHECK(opts.expert_begin >= 0 && count >= 1 && opts.expert_begin + count <= cfg.num_experts,
               "MoeLayer: LayerOptions expert_begin = " << opts.expert_begin << ", expert_count = " << opts.expert_count
                                                        << " is not a range of the model's " << cfg.num_experts << " experts");
  FP4MOE_CHECK(int64_t(w.experts.size()) == count,
               "MoeLayer: " << w.experts.size() << " experts given; "
                            << (opts.expert_count < 0 ? "the model has num_experts = " : "LayerOptions::expert_count = ")
                            << count);
  m.expert_begin = opts.expert_begin;
  FP4MOE_CHECK(w.has_shared == cfg.shared_expert, "MoeLayer: the model " << (cfg.shared_expert ? "has" : "has no")
                                                                          << " shared expert, the weights "
                                                                          << (w.has_shared ? "have one" : "have none"));
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const ExpertWeights& x = w.experts[e];
    FP4MOE_CHECK(x.gate.rows == cfg.intermediate && x.gate.cols == cfg.hidden && x.up.rows == cfg.intermediate &&
                     x.up.cols == cfg.hidden && x.down.rows == cfg.hidden && x.down.cols == cfg.intermediate,
                 "MoeLayer: expert " << e << " has gate [" << x.gate.rows << ", " << x.gate.cols << "], up [" << x.up.rows
                                     << ", " << x.up.cols << "], down [" << x.down.rows << ", " << x.down.cols
                                     << "]; the model needs [" << cfg.intermediate << ", " << cfg.hidden << "] and ["
                                     << cfg.hidden << ", " << cfg.intermediate << "]");
  }
  std::vector<const ExpertWeights*> routed;
  for (const ExpertWeights& e : w.experts) routed.push_back(&e);
  m.routed = std::make_unique<ExpertPair>(prepare_experts(routed, m.hidden_padded, m.intermediate_padded, cfg.expert_bias, cfg.activation));
  if (cfg.shared_expert) {
    FP4MOE_CHECK(w.shared.gate.rows == cfg.shared_intermediate && w.shared.gate.cols == cfg.hidden &&
                     w.shared.down.rows == cfg.hidden && w.shared.down.cols == cfg.shared_intermediate,
                 "MoeLayer: the shared expert has gate [" << w.shared.gate.rows << ", " << w.shared.gate.cols << "], down ["
                                                          << w.shared.down.rows << ", " << w.shared.down.cols
                                                          << "]; the model needs width " << cfg.shared_intermediate);
    m.shared = std::make_unique<ExpertPair>(prepare_experts({&w.shared}, m.hidden_padded, cfg.shared_intermediate, false, cfg.activation));
  }
  if (cfg.use_correction_bias) {
    FP4MOE_CHECK(int64_t(w.correction_bias.size()) == cfg.num_experts,
                 "MoeLayer: correction_bias has " << w.correction_bias.size() << " entries, expected " << cfg.num_experts);
    m.bias.upload(w.correction_bias);
  }
  if (!w.router_weight.empty()) {
    FP4MOE_CHECK(int64_t(w.router_weight.size()) == cfg.num_experts * cfg.hidden,
                 "MoeLayer: router_weight has " << w.router_weight.size() << " values, expected [E, H] = ["
                                                << cfg.num_experts << ", " << cfg.hidden << "]");
    m.init_router(w.router_weight.data(), false);
    if (!w.router_bias.empty()) {
      FP4MOE_CHECK(int64_t(w.router_bias.size()) == cfg.num_experts,
                   "MoeLayer: router_bias has " << w.router_bias.size() << " values, expected E = " << cfg.num_experts);
      m.router_bias.upload(w.router_bias);
      m.ones.upload(std::vector<float>(size_t(opts.max_tokens), 1.f));
    }
  }
  m.init_workspace();
}

MoeLayer::MoeLayer(const MoeConfig& cfg, const DeviceMoeWeights& w, const LayerOptions& opts) : impl_(new Impl) {
  Impl& m = *impl_;
  m.init_device(cfg, opts);
  const int64_t E = cfg.num_experts, H = cfg.hidden, I = cfg.intermediate;
  FP4MOE_CHECK(!cfg.expert_bias && m.hidden_padded == H && m.intermediate_padded == I,
               "MoeLayer from device weights: model '" << cfg.name << "' has "
                   << (cfg.expert_bias ? "expert biases, which DeviceMoeWeights does not hold"
                                       : "H or I not a multiple of " + std::to_string(granule_of(m.opts)) +
                                             ", which the device prepare does not pad")
                   << "; build it from host weights (MoeWeights)");
  const int64_t count = w.expert_count < 0 ? E : w.expert_count;
  FP4MOE_CHECK(w.expert_begin >= 0 && count >= 1 && w.expert_begin + count <= E,
               "MoeLayer: local experts [" << w.expert_begin << ", " << w.expert_begin + count
                                           << ") are not a non-empty range inside the model's " << E << " experts");
  FP4MOE_CHECK(w.has_shared == cfg.shared_expert, "MoeLayer: the model " << (cfg.shared_expert ? "has" : "has no")
                                                                          << " shared expert, the weights "
                                                                          << (w.has_shared ? "have one" : "have none"));
  m.expert_begin = w.expert_begin;
  const bool up_first = w.w13_order == GateUpOrder::up_gate;
  auto pair = [&](const DeviceProjection& w13, const DeviceProjection& w2, int64_t experts, int64_t width,
                  const char* n13, const char* n2) {
    auto p = std::make_unique<ExpertPair>();
    p->w13 = prepare_on_device(w13, w.format, w.scale_layout, experts, 2 * width, H, true, up_first, n13);
    p->w2 = prepare_on_device(w2, w.format, w.scale_layout, experts, H, width, false, false, n2);
    return p;
  };
  m.routed = pair(w.w13, w.w2, count, I, "w13", "w2");
  if (cfg.shared_expert) m.shared = pair(w.shared_w13, w.shared_w2, 1, cfg.shared_intermediate, "shared w13", "shared w2");
  if (cfg.use_correction_bias) {
    FP4MOE_CHECK(w.correction_bias, "MoeLayer: the model uses e_score_correction_bias; none was given");
    m.bias.resize(size_t(E));
    FP4MOE_CUDA_CHECK(cudaMemcpy(m.bias.get(), w.correction_bias, size_t(E) * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  if (w.router_weight) m.init_router(w.router_weight, true);
  m.init_workspace();
}

MoeLayer::~MoeLayer() = default;

// Events recorded between the stages of one forward (profile() only).
struct MoeLayer::Marks {
  std::vector<std::pair<std::string, cudaEvent_t>> events;
  void mark(const char* stage, cudaStream_t s) {
    cudaEvent_t e;
    FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
    FP4MOE_CUDA_CHECK(cudaEventRecord(e, s));
    events.emplace_back(stage, e);
  }
  ~Marks() {
    for (auto& [name, e] : events) cudaEventDestroy(e);
  }
};

void MoeLayer::forward(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits, int64_t tokens,
                       __nv_bfloat16* out) {
  run(stream, hidden, router_logits, nullptr, tokens, out, nullptr, nullptr);
}

void MoeLayer::forward_routed(cudaStream_t stream, const __nv_bfloat16* hidden, const int32_t* topk_ids,
                              const float* topk_weights, int64_t tokens, __nv_bfloat16* out) {
  FP4MOE_CHECK(topk_ids && topk_weights, "forward_routed: topk_ids and topk_weights must be device pointers, got null");
  const Routed r{topk_ids, topk_weights};
  run(stream, hidden, nullptr, &r, tokens, out, nullptr, nullptr);
}

bool MoeLayer::has_router_weight() const { return impl_->blas != nullptr; }

void MoeLayer::forward_from_hidden(cudaStream_t stream, const __nv_bfloat16* hidden, int64_t tokens, __nv_bfloat16* out) {
  Impl& m = *impl_;
  FP4MOE_CHECK(m.blas, "forward_from_hidden: the layer was built without a router_weight");
  FP4MOE_CHECK(tokens >= 0 && tokens <= m.opts.max_tokens,
               "forward_from_hidden: tokens = " << tokens << " is outside 0..max_tokens = " << m.opts.max_tokens);
  FP4MOE_CHECK(hidden && out, "forward_from_hidden: hidden and out must be device pointers, got null");
  if (tokens == 0) return;
  // Column-major view: logits^T [E, T] = W [E, H] . hidden^T [H, T].
  const float alpha = 1.f, beta = 0.f;
  const int E = static_cast<int>(m.cfg.num_experts), H = static_cast<int>(m.cfg.hidden);
  FP4MOE_CUBLAS_CHECK(cublasSetStream(m.blas, stream));
  FP4MOE_CUBLAS_CHECK(cublasGemmEx(m.blas, CUBLAS_OP_T, CUBLAS_OP_N, E, static_cast<int>(tokens), H, &alpha,
                                   m.router_weight.get(), CUDA_R_16BF, H, hidden, CUDA_R_16BF, H, &beta, m.logits.get(),
                                   CUDA_R_32F, E, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (m.router_bias.size()) {  // logits^T += bias [E, 1] . ones [1, T], in exact fp32 (no TF32)
    const float one = 1.f;
    FP4MOE_CUBLAS_CHECK(cublasGemmEx(m.blas, CUBLAS_OP_N, CUBLAS_OP_N, E, static_cast<int>(tokens), 1, &one,
                                     m.router_bias.get(), CUDA_R_32F, E, m.ones.get(), CUDA_R_32F, 1, &one, m.logits.get(),
                                     CUDA_R_32F, E, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  }
  run(stream, hidden, m.logits.get(), nullptr, tokens, out, nullptr, nullptr);
}

std::vector<MoeLayer::StageTime> MoeLayer::profile(cudaStream_t stream, const __nv_bfloat16* hidden,
                                                   const float* router_logits, int64_t tokens, __nv_bfloat16* out,
                                                   int reps) {
  FP4MOE_CHECK(reps >= 1, "profile: reps = " << reps << " must be positive");
  for (int i = 0; i < 3; ++i) run(stream, hidden, router_logits, nullptr, tokens, out, nullptr, nullptr);
  std::vector<std::string> names;
  std::vector<std::vector<double>> times;
  for (int r = 0; r < reps; ++r) {
    Marks marks;
    marks.mark("start", stream);
    run(stream, hidden, router_logits, nullptr, tokens, out, nullptr, &marks);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (names.empty()) {
      for (size_t i = 1; i < marks.events.size(); ++i) names.push_back(marks.events[i].first);
      times.resize(names.size());
    }
    for (size_t i = 1; i < marks.events.size(); ++i) {
      float ms = 0;
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, marks.events[i - 1].second, marks.events[i].second));
      times[i - 1].push_back(ms);
    }
  }
  std::vector<StageTime> out_times;
  for (size_t i = 0; i < names.size(); ++i) {
    std::sort(times[i].begin(), times[i].end());
    out_times.push_back({names[i], times[i][times[i].size() / 2], times[i].front(), times[i].back()});
  }
  return out_times;
}

void MoeLayer::run(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits, const Routed* routed,
                   int64_t tokens, __nv_bfloat16* out, float* sums, Marks* marks) {
  Impl& m = *impl_;
  auto mark = [&](const char* stage) {
    if (marks) marks->mark(stage, stream);
  };
  const MoeConfig& c = m.cfg;
  FP4MOE_CHECK(tokens >= 0 && tokens <= m.opts.max_tokens,
               "forward: tokens = " << tokens << " is outside 0..max_tokens = " << m.opts.max_tokens);
  FP4MOE_CHECK(hidden && (router_logits || routed) && (out || sums),
               "forward: hidden, router_logits and out must be device pointers, got null");
  if (tokens == 0) return;
  const int32_t* ids = routed ? routed->ids : m.topk_ids.get();
  const float* weights = routed ? routed->weights : m.topk_weights.get();

  if (!routed) m.route(stream, router_logits, tokens);
  mark("route");
  m.permute(stream, ids, tokens);
  mark("permute");
  const ForwardPlan& plan = m.forward_plan(tokens);
  for (const GemmStep& g : m.gemm_steps(tokens, hidden)) {
    // the fused finalize's epilogue adds into fp32 sums that start at zero
    if (g.epilogue == kernels::GemmEpilogue::scatter_add && !kernels::launches_skipped())
      FP4MOE_CUDA_CHECK(cudaMemsetAsync(m.accumulate.get(), 0, size_t(tokens * m.hidden_padded) * sizeof(float), stream));
    m.launch_step(g, plan, stream, weights);
    if (g.stage) mark(g.stage);
  }
  kernels::FinalizeArgs f;
  f.expert_out = m.finalize == FinalizeMode::split ? m.y2.get() : nullptr;
  f.accumulated = m.finalize == FinalizeMode::split ? nullptr : m.accumulate.get();
  f.pair_pos = m.pair_pos.get();
  f.topk_weights = weights;
  f.shared_out = m.shared ? m.shared_y.get() : nullptr;
  f.tokens = tokens;
  f.hidden = c.hidden;
  f.expert_stride = m.hidden_padded;
  f.top_k = static_cast<int>(c.top_k);
  f.out = sums ? nullptr : out;
  f.out_f32 = sums;
  kernels::launch_finalize(f, stream);
  mark("finalize");
}

void MoeLayer::check_status(cudaStream_t stream) {
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  int32_t s = 0;
  FP4MOE_CUDA_CHECK(cudaMemcpy(&s, impl_->status.get(), sizeof(s), cudaMemcpyDeviceToHost));
  impl_->status.fill_bytes(0);
  FP4MOE_CHECK(!(s & kernels::kStatusNonFiniteLogit), "forward: a router logit was NaN or Inf (that token got zero weights)");
  FP4MOE_CHECK(!(s & kernels::kStatusBadExpertId), "forward: an expert id was outside [0, " << impl_->cfg.num_experts
                                                    << ") (those pairs contributed nothing)");
  FP4MOE_CHECK(!(s & kernels::kStatusCapacityOverflow),
               "forward: a token found no free row in the expert-parallel all-to-all's capacity "
               "(ParallelOptions::alltoall_capacity); its pairs on that rank contributed nothing");
}

const int32_t* MoeLayer::topk_ids() const { return impl_->topk_ids.get(); }
const float* MoeLayer::topk_weights() const { return impl_->topk_weights.get(); }
const MoeConfig& MoeLayer::config() const { return impl_->cfg; }
FinalizeMode MoeLayer::finalize_mode() const { return impl_->finalize; }
int64_t MoeLayer::expert_begin() const { return impl_->expert_begin; }
int64_t MoeLayer::expert_count() const { return impl_->routed->w13.experts; }

int64_t MoeLayer::weight_bytes() const {
  int64_t b = impl_->routed->w13.bytes() + impl_->routed->w2.bytes();
  if (impl_->shared) b += impl_->shared->w13.bytes() + impl_->shared->w2.bytes();
  return b;
}

int64_t MoeLayer::workspace_bytes() const {
  const Impl& m = *impl_;
  return int64_t(m.topk_ids.bytes() + m.topk_weights.bytes() + m.offsets.bytes() + m.permuted_pair.bytes() +
                 m.permuted_token.bytes() + m.x_permuted.bytes() + m.split_k.bytes() + m.pair_pos.bytes() + m.dense_offsets.bytes() + m.status.bytes() +
                 m.accumulate.bytes() + m.a2.bytes() + m.y2.bytes() + m.shared_a2.bytes() + m.shared_y.bytes());
}

std::string MoeLayer::describe(int64_t tokens) const {
  const Impl& m = *impl_;
  std::ostringstream os;
  if (!m.cache_notice.empty()) os << m.cache_notice << "\n";
  if (m.hidden_padded != m.cfg.hidden || m.intermediate_padded != m.cfg.intermediate)
    os << "H " << m.cfg.hidden << " and I " << m.cfg.intermediate << " run as " << m.hidden_padded << " and "
       << m.intermediate_padded << " (padded with zero weights to a multiple of " << granule_of(m.opts) << ")\n";
  if (m.cfg.expert_bias || m.cfg.activation != Activation::swiglu)
    os << "epilogues: the biased instance (expert biases"
       << (m.cfg.activation == Activation::clamped_swiglu ? ", the clamped SwiGLU" : "") << ")\n";
  for (const GemmStep& g : m.gemm_steps(tokens, nullptr)) {
    const TileChoice c = m.choose_tile(*g.w, g.tokens_per_expert, g.active_experts, g.epilogue);
    const plan::SmemPlan p = plan::plan_gemm_tile(c.tile, g.w->n, g.w->k, m.budget, 0, g.w->biased());
    os << g.title << ": N " << g.w->n << " K " << g.w->k << ", tile " << p.config << " ("
       << (c.tuned ? "tuned, from " + m.cache->path() : std::string("planner default")) << "), " << p.stages
       << " stages, " << p.smem_bytes << " bytes of shared memory";
    const kernels::GroupedGemmArgs a = m.gemm_args(*g.w, nullptr, nullptr, g.rows, nullptr, g.epilogue, nullptr);
    const plan::SplitKPlan sk = kernels::gemm_launch_k_splits(a, {.tile = c.tile, .stages = c.stages});
    if (sk.splits > 1) os << ", K split " << sk.splits << " ways (" << sk.explanation() << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace fp4moe
