// LayerCore's construction: the prepared weights (from the host or the
// device), the router, and the workspace sized for LayerOptions::max_tokens.
// Nothing allocates after construction.
#include "runtime/layer_core.hpp"

#include <algorithm>
#include <span>
#include <cmath>

#include "common/cuda_check.hpp"
#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "plan/split_k.hpp"
#include "runtime/cublas_check.hpp"
#include "runtime/device_limits.hpp"

namespace fp4moe {
namespace {

// The experts' biases in the prepared row order, when `biased`; the clamped
// SwiGLU runs in the biased epilogue instance, so GEMM1 then gets zero biases
// where the experts have none. hidden and width: H' and I', padded.
void attach_biases(ExpertPair& p, std::span<const std::vector<float>* const> gate_bias,
                   std::span<const std::vector<float>* const> up_bias, std::span<const std::vector<float>* const> down_bias,
                   int64_t hidden, int64_t width, bool biased, Activation activation) {
  if (biased || activation != Activation::swiglu) p.w13.bias.upload(prepared_gated_bias(gate_bias, up_bias, 2 * width));
  if (biased) p.w2.bias.upload(prepared_bias(down_bias, hidden));
}

// The experts' GEMM1 and GEMM2 weights prepared at [2 I', H'] and [H', I']
// (H' and I' padded: hidden and width), with their biases when `biased`.
ExpertPair prepare_experts(const std::vector<const ExpertWeights*>& experts, int64_t hidden, int64_t width, bool biased,
                           Activation activation) {
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
  attach_biases(p, gate_bias, up_bias, down_bias, hidden, width, biased, activation);
  return p;
}

// H and I that are not multiples of 128 run as the model has them where the
// tiles take tails (sm_90: a multiple of 64 is enough), else
// padded so that the tiles divide them (LayerOptions::feature_granule).
int64_t granule_of(const LayerOptions& o, bool tails) {
  return o.feature_granule ? o.feature_granule : tails ? kPreparedKGranule : kFeatureGranule;
}

// Device biases [experts, rows] of `type`, read back as fp32, one vector per
// expert (construction reads them once); a NaN or Inf is named.
std::vector<std::vector<float>> biases_from_device(const void* p, BiasType type, int64_t experts, int64_t rows,
                                                   const char* what) {
  const size_t n = size_t(experts * rows);
  std::vector<float> v(n);
  if (type == BiasType::f32) {
    FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> b(n);
    FP4MOE_CUDA_CHECK(cudaMemcpy(b.data(), p, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) v[i] = bf16_to_float(b[i]);
  }
  std::vector<std::vector<float>> out(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    out[size_t(e)].assign(v.begin() + e * rows, v.begin() + (e + 1) * rows);
    for (int64_t r = 0; r < rows; ++r)
      FP4MOE_CHECK(std::isfinite(out[size_t(e)][size_t(r)]),
                   "MoeLayer: " << what << " of expert " << e << " row " << r << " is " << out[size_t(e)][size_t(r)]);
  }
  return out;
}

// w13's biases of one expert (2I, in w13's row order) split into gate and up.
void split_gate_up(const std::vector<float>& w13, GateUpOrder order, std::vector<float>& gate, std::vector<float>& up) {
  const int64_t I = int64_t(w13.size()) / 2;
  gate.resize(size_t(I)), up.resize(size_t(I));
  for (int64_t j = 0; j < I; ++j) {
    gate[size_t(j)] = w13[size_t(pack::w13_checkpoint_row(j, false, I, order))];
    up[size_t(j)] = w13[size_t(pack::w13_checkpoint_row(j, true, I, order))];
  }
}

}  // namespace

void LayerCore::init_device(const MoeConfig& c, const LayerOptions& o) {
  c.validate();
  cfg_ = c;
  opts_ = o;
  FP4MOE_CHECK(o.max_tokens >= 1, "LayerOptions::max_tokens = " << o.max_tokens << " must be at least 1");
  FP4MOE_CHECK(o.max_plans >= 0, "LayerOptions::max_plans = " << o.max_plans << " must be 0 (no bound) or more");
  plans_.set_capacity(size_t(o.max_plans));
  FP4MOE_CHECK(c.hidden % 8 == 0, "MoeLayer: hidden = " << c.hidden << " is not a multiple of 8");
  if (o.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(o.device));
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  device_ = device_limits(dev);
  const bool tails = device_.budget.has_wgmma();
  const int64_t granule = granule_of(o, tails);
  FP4MOE_CHECK(o.feature_granule == 0 || o.feature_granule == 64 || o.feature_granule == 128 || o.feature_granule == 256,
               "LayerOptions::feature_granule = " << o.feature_granule << " is not 0 (the device's), 64, 128 or 256");
  FP4MOE_CHECK(granule != 64 || tails, "LayerOptions::feature_granule = 64 needs tiles that take tails: sm_90 (this device is sm_"
                                           << device_.budget.cc << ")");
  finalize_ = o.deterministic || o.finalize == FinalizeMode::automatic ? FinalizeMode::split : o.finalize;
  hidden_padded_ = padded_features(c.hidden, granule);
  intermediate_padded_ = padded_features(c.intermediate, granule);
  // (the shared expert reads the hidden states in place, at their own width)
  // (K in steps of 64 only where the tiles take tails)
  const int64_t shared_granule = tails ? kPreparedKGranule : 128;
  FP4MOE_CHECK(!c.shared_expert || (hidden_padded_ == c.hidden && c.shared_intermediate % shared_granule == 0),
               "MoeLayer: a shared expert needs hidden = " << c.hidden << " and shared_intermediate = "
                                                           << c.shared_intermediate << " to be multiples of "
                                                           << shared_granule);
  cudaDeviceProp prop{};
  FP4MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  tune_context_.gpu = prop.name;
  tune_context_.cc = prop.major * 10 + prop.minor;
  FP4MOE_CUDA_CHECK(cudaDriverGetVersion(&tune_context_.driver));
  FP4MOE_CUDA_CHECK(cudaRuntimeGetVersion(&tune_context_.runtime));
  tune_context_.fp4moe_version = kVersion;
  if (o.use_tune_cache) {
    cache_ = plan::TuneCache::load(plan::TuneCache::default_path(o.tune_cache), tune_context_);
    cache_notice_ = cache_->notice();
  }
}

// The optional router: logits = hidden . router_weight^T by cuBLAS (bf16 [E, H]).
void LayerCore::init_router(const uint16_t* w, const float* bias, bool on_device) {
  const size_t count = size_t(cfg_.num_experts * cfg_.hidden);
  const cudaMemcpyKind kind = on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  router_weight_.resize(count);
  FP4MOE_CUDA_CHECK(cudaMemcpy(router_weight_.get(), w, count * 2, kind));
  if (bias) {  // added by a rank-1 update with ones [max_tokens]
    router_bias_.resize(size_t(cfg_.num_experts));
    FP4MOE_CUDA_CHECK(cudaMemcpy(router_bias_.get(), bias, router_bias_.bytes(), kind));
    ones_.upload(std::vector<float>(size_t(opts_.max_tokens), 1.f));
  }
  logits_.resize(size_t(opts_.max_tokens * cfg_.num_experts));
  blas_workspace_.resize(size_t(8) << 20);  // a fixed workspace keeps cuBLAS graph-capture safe
  blas_ = cublas_create<CublasHandle>("cublasCreate", cublasCreate);
  FP4MOE_CUBLAS_CHECK(cublasSetWorkspace(blas_.get(), blas_workspace_.get(), blas_workspace_.bytes()));
}

// The shared expert as routed expert E: one more expert in both routed
// projections (its weights after the routed ones'), one more row per token in
// the routed GEMMs, added by the split finalize with weight 1 as before. Only
// where it runs the same arithmetic as on its own: the routed experts' width
// unpadded and format, no biases (the routed instance would add them), the
// plain SwiGLU, bf16 rows, the split finalize (the fused one weighs each row).
bool LayerCore::shared_joins_routed(bool same_format, int64_t routed_count) const {
  return opts_.shared_expert_in_routed_gemms && cfg_.shared_expert && cfg_.shared_intermediate == cfg_.intermediate &&
         intermediate_padded_ == cfg_.intermediate && !cfg_.expert_bias && cfg_.activation == Activation::swiglu &&
         opts_.activations == ActivationFormat::bf16 && finalize_ == FinalizeMode::split && same_format &&
         routed_count + 1 <= plan::GemmSmemLayout::kMaxExperts;
}

void LayerCore::init_workspace() {
  const int64_t T = opts_.max_tokens, P = T * cfg_.top_k, H = cfg_.hidden, Hp = hidden_padded_;
  const int64_t rows = permuted_rows(T);  // the routed GEMMs' rows, the shared expert's among them
  topk_ids_.resize(size_t(P));
  topk_weights_.resize(size_t(P));
  offsets_.resize(size_t(routed_->w13.experts + 1));
  permuted_pair_.resize(size_t(rows));
  permuted_token_.resize(size_t(rows));
  pair_pos_.resize(size_t(P));
  dense_offsets_.resize(2);
  status_.resize(kernels::kStatusWords);
  status_.fill_bytes(0);
  a2_.resize(size_t(rows * intermediate_padded_));
  if (finalize_ == FinalizeMode::split) y2_.resize(size_t(rows * Hp));
  else accumulate_.resize(size_t(T * Hp));
  // GEMM1's row copy (GemmStepLaunch::copies_rows): wherever tiles that load
  // their rows by TMA can run, and wherever H is padded; fp8 layers' GEMM1
  // reads its FP8 row copy instead.
  if ((device_.budget.has_wgmma() || Hp != H) && opts_.activations != ActivationFormat::fp8)
    x_permuted_.resize(size_t(rows * Hp));
  if (device_.budget.has_wgmma() && opts_.split_k) {
    split_k_.resize(size_t(plan::kSplitKWorkspaceBytes));
    split_k_.fill_bytes(0);  // the arrival counters; every launch leaves them zero
  }
  if (shared_) {
    shared_a2_.resize(size_t(T * cfg_.shared_intermediate));
    shared_y_.resize(size_t(T * H));
  }
  if (opts_.activations == ActivationFormat::fp8) {
    x_e4m3_.resize(size_t(P * Hp));
    x_scales_.resize(size_t(P));
    a2_e4m3_.resize(size_t(P * intermediate_padded_));
    a2_scales_.resize(size_t(P));
  }
}

// fp8 activations: the routed experts' weights re-packed for the FP8 tiles
// (Hopper's FP8 tensor cores; MXFP4 folds into e4m3 exactly, NVFP4 rounds and
// is opted into).
void LayerCore::init_activations() {
  if (opts_.activations != ActivationFormat::fp8) return;
  FP4MOE_CHECK(device_.budget.has_wgmma(), "MoeLayer: fp8 activations run on the FP8 warpgroup-MMA tiles of sm_90; this GPU is sm_"
                                               << device_.budget.cc);
  FP4MOE_CHECK(routed_->w13.format == Fp4Format::mxfp4 || opts_.fp8_rounds_nvfp4,
               "MoeLayer: fp8 activations with " << to_string(routed_->w13.format)
                   << " weights round each weight to e4m3 (an NVFP4 block scale has a mantissa that the fold does "
                      "not carry): set LayerOptions::fp8_rounds_nvfp4 (--fp8-rounds-nvfp4) to accept it, or run "
                      "bf16 activations");
  routed_->w13.convert_to_fp8("MoeLayer w13", opts_.fp8_rounds_nvfp4);
  routed_->w2.convert_to_fp8("MoeLayer w2", opts_.fp8_rounds_nvfp4);
}

LayerCore::LayerCore(const MoeConfig& cfg, const MoeWeights& w, const LayerOptions& opts) {
  init_device(cfg, opts);
  const int64_t count = opts.expert_count < 0 ? cfg.num_experts : opts.expert_count;
  FP4MOE_CHECK(opts.expert_begin >= 0 && count >= 1 && opts.expert_begin + count <= cfg.num_experts,
               "MoeLayer: LayerOptions expert_begin = " << opts.expert_begin << ", expert_count = " << opts.expert_count
                                                        << " is not a range of the model's " << cfg.num_experts << " experts");
  FP4MOE_CHECK(int64_t(w.experts.size()) == count,
               "MoeLayer: " << w.experts.size() << " experts given; "
                            << (opts.expert_count < 0 ? "the model has num_experts = " : "LayerOptions::expert_count = ")
                            << count);
  expert_begin_ = opts.expert_begin;
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
  if (cfg.shared_expert)
    FP4MOE_CHECK(w.shared.gate.rows == cfg.shared_intermediate && w.shared.gate.cols == cfg.hidden &&
                     w.shared.up.rows == cfg.shared_intermediate && w.shared.up.cols == cfg.hidden &&
                     w.shared.down.rows == cfg.hidden && w.shared.down.cols == cfg.shared_intermediate,
                 "MoeLayer: the shared expert has gate [" << w.shared.gate.rows << ", " << w.shared.gate.cols << "], up ["
                                                          << w.shared.up.rows << ", " << w.shared.up.cols << "], down ["
                                                          << w.shared.down.rows << ", " << w.shared.down.cols
                                                          << "]; the model needs width " << cfg.shared_intermediate);
  std::vector<const ExpertWeights*> routed;
  for (const ExpertWeights& e : w.experts) routed.push_back(&e);
  routed_experts_ = count;
  const auto same_format = [&](const ExpertWeights& x) {
    const Fp4Format f = w.experts[0].gate.format;
    return x.gate.format == f && x.up.format == f && x.down.format == f;
  };
  shared_in_routed_ = shared_joins_routed(cfg.shared_expert && same_format(w.shared), count);
  if (shared_in_routed_) routed.push_back(&w.shared);  // prepared as one more expert
  routed_ = std::make_unique<ExpertPair>(prepare_experts(routed, hidden_padded_, intermediate_padded_, cfg.expert_bias, cfg.activation));
  if (cfg.shared_expert && !shared_in_routed_)
    shared_ = std::make_unique<ExpertPair>(prepare_experts({&w.shared}, hidden_padded_, cfg.shared_intermediate, false, cfg.activation));
  if (cfg.use_correction_bias) {
    FP4MOE_CHECK(int64_t(w.correction_bias.size()) == cfg.num_experts,
                 "MoeLayer: correction_bias has " << w.correction_bias.size() << " entries, expected " << cfg.num_experts);
    correction_bias_.upload(w.correction_bias);
  }
  if (!w.router_weight.empty()) {
    FP4MOE_CHECK(int64_t(w.router_weight.size()) == cfg.num_experts * cfg.hidden,
                 "MoeLayer: router_weight has " << w.router_weight.size() << " values, expected [E, H] = ["
                                                << cfg.num_experts << ", " << cfg.hidden << "]");
    FP4MOE_CHECK(w.router_bias.empty() || int64_t(w.router_bias.size()) == cfg.num_experts,
                 "MoeLayer: router_bias has " << w.router_bias.size() << " values, expected E = " << cfg.num_experts);
    init_router(w.router_weight.data(), w.router_bias.empty() ? nullptr : w.router_bias.data(), false);
  }
  init_activations();
  init_workspace();
}

LayerCore::LayerCore(const MoeConfig& cfg, const DeviceMoeWeights& w, const LayerOptions& opts) {
  init_device(cfg, opts);
  const int64_t E = cfg.num_experts, H = cfg.hidden, I = cfg.intermediate;
  const int64_t count = w.expert_count < 0 ? E : w.expert_count;
  FP4MOE_CHECK(w.expert_begin >= 0 && count >= 1 && w.expert_begin + count <= E,
               "MoeLayer: local experts [" << w.expert_begin << ", " << w.expert_begin + count
                                           << ") are not a non-empty range inside the model's " << E << " experts");
  FP4MOE_CHECK(w.has_shared == cfg.shared_expert, "MoeLayer: the model " << (cfg.shared_expert ? "has" : "has no")
                                                                          << " shared expert, the weights "
                                                                          << (w.has_shared ? "have one" : "have none"));
  FP4MOE_CHECK(cfg.expert_bias == (w.w13_bias != nullptr) && cfg.expert_bias == (w.w2_bias != nullptr),
               "MoeLayer: the model '" << cfg.name << "' " << (cfg.expert_bias ? "has" : "has no")
                                       << " expert biases; DeviceMoeWeights::w13_bias and w2_bias are "
                                       << (w.w13_bias ? "given" : "null") << " and " << (w.w2_bias ? "given" : "null"));
  FP4MOE_CHECK(!(cfg.expert_bias && cfg.shared_expert),
               "MoeLayer: expert biases with a shared expert are not supported from device weights");
  expert_begin_ = w.expert_begin;
  // each [N, K] prepared at the padded sizes (H', I'), the tensors read at the model's own
  // (room: expert slots left after them, where the shared expert joins the routed ones)
  auto pair = [&](const DeviceProjection& w13, const DeviceProjection& w2, int64_t experts, int64_t width,
                  int64_t width_padded, const char* n13, const char* n2, int64_t room) {
    auto p = std::make_unique<ExpertPair>();
    p->w13 = prepare_on_device(w13, w.format, w.scale_layout, experts, 2 * width_padded, hidden_padded_, 2 * width, H,
                               true, w.w13_order, n13, room);
    p->w2 = prepare_on_device(w2, w.format, w.scale_layout, experts, hidden_padded_, width_padded, H, width, false,
                              GateUpOrder::gate_up, n2, room);
    return p;
  };
  routed_experts_ = count;
  shared_in_routed_ = shared_joins_routed(true, count);  // (one format for every tensor)
  routed_ = pair(w.w13, w.w2, count, I, intermediate_padded_, "w13", "w2", shared_in_routed_ ? 1 : 0);
  const size_t held = static_cast<size_t>(count);
  std::vector<std::vector<float>> gate_bias(held), up_bias(held), down_bias(held);
  if (cfg.expert_bias) {
    const auto w13_bias = biases_from_device(w.w13_bias, w.bias_type, count, 2 * I, "w13_bias");
    for (int64_t e = 0; e < count; ++e) split_gate_up(w13_bias[size_t(e)], w.w13_order, gate_bias[size_t(e)], up_bias[size_t(e)]);
    down_bias = biases_from_device(w.w2_bias, w.bias_type, count, H, "w2_bias");
  }
  auto pointers = [](const std::vector<std::vector<float>>& v) {
    std::vector<const std::vector<float>*> p;
    for (const auto& x : v) p.push_back(&x);
    return p;
  };
  attach_biases(*routed_, pointers(gate_bias), pointers(up_bias), pointers(down_bias), hidden_padded_,
                intermediate_padded_, cfg.expert_bias, cfg.activation);
  if (cfg.shared_expert) {
    shared_ = pair(w.shared_w13, w.shared_w2, 1, cfg.shared_intermediate, cfg.shared_intermediate, "shared w13",
                   "shared w2", 0);
    const std::vector<std::vector<float>> none(1);
    attach_biases(*shared_, pointers(none), pointers(none), pointers(none), hidden_padded_, cfg.shared_intermediate,
                  false, cfg.activation);
    if (shared_in_routed_) {  // into the slot left after the routed experts; one expert's bytes, then freed
      place_experts(routed_->w13, count, shared_->w13, "MoeLayer: the shared expert among the routed w13");
      place_experts(routed_->w2, count, shared_->w2, "MoeLayer: the shared expert among the routed w2");
      shared_.reset();
    }
  }
  if (cfg.use_correction_bias) {
    FP4MOE_CHECK(w.correction_bias, "MoeLayer: the model uses e_score_correction_bias; none was given");
    correction_bias_.resize(size_t(E));
    FP4MOE_CUDA_CHECK(cudaMemcpy(correction_bias_.get(), w.correction_bias, size_t(E) * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  FP4MOE_CHECK(!w.router_bias || w.router_weight, "MoeLayer: DeviceMoeWeights::router_bias is given without router_weight");
  if (w.router_weight) init_router(w.router_weight, w.router_bias, true);
  init_activations();
  init_workspace();
}

LayerCore::~LayerCore() = default;

int64_t LayerCore::weight_bytes() const {
  int64_t b = routed_->w13.bytes() + routed_->w2.bytes();
  if (shared_) b += shared_->w13.bytes() + shared_->w2.bytes();
  return b;
}

std::vector<LayerCore::Intermediate> LayerCore::intermediates(int64_t tokens) const {
  FP4MOE_CHECK(tokens >= 0 && tokens <= opts_.max_tokens,
               "intermediates: tokens = " << tokens << " is outside 0..max_tokens = " << opts_.max_tokens);
  const size_t P = size_t(permuted_rows(tokens)), T = size_t(tokens);
  const size_t pairs = size_t(tokens * cfg_.top_k);
  std::vector<Intermediate> v = {{"route: topk ids", topk_ids_.get(), pairs * 4},
                                 {"route: topk weights", topk_weights_.get(), pairs * 4},
                                 {"permute: offsets", offsets_.get(), offsets_.bytes()},
                                 {"permute: rows", permuted_pair_.get(), P * 4}};
  if (x_permuted_.size()) v.push_back({"GEMM1's row copy", x_permuted_.get(), P * size_t(hidden_padded_) * 2});
  if (x_e4m3_.size()) v.push_back({"GEMM1's e4m3 rows", x_e4m3_.get(), P * size_t(hidden_padded_)});
  v.push_back({"GEMM1", a2_.get(), P * size_t(intermediate_padded_) * 2});
  if (a2_e4m3_.size()) v.push_back({"GEMM2's e4m3 rows", a2_e4m3_.get(), P * size_t(intermediate_padded_)});
  if (y2_.size()) v.push_back({"GEMM2", y2_.get(), P * size_t(hidden_padded_) * 2});
  if (shared_a2_.size()) v.push_back({"shared GEMM1", shared_a2_.get(), T * size_t(cfg_.shared_intermediate) * 2});
  if (shared_y_.size()) v.push_back({"shared GEMM2", shared_y_.get(), T * size_t(cfg_.hidden) * 2});
  return v;
}

int64_t LayerCore::workspace_bytes() const {
  return int64_t(topk_ids_.bytes() + topk_weights_.bytes() + offsets_.bytes() + permuted_pair_.bytes() +
                 permuted_token_.bytes() + x_permuted_.bytes() + split_k_.bytes() + pair_pos_.bytes() +
                 dense_offsets_.bytes() + status_.bytes() + accumulate_.bytes() + a2_.bytes() + y2_.bytes() +
                 shared_a2_.bytes() + shared_y_.bytes() + x_e4m3_.bytes() + x_scales_.bytes() + a2_e4m3_.bytes() +
                 a2_scales_.bytes());
}

}  // namespace fp4moe
