// MoeLayer: the public face of LayerCore (src/runtime/layer_core.hpp). A
// forward checks its arguments, finds the plan of its token count and queues it.
#include "fp4moe/layer.hpp"

#include <algorithm>
#include <string>

#include "common/cuda_check.hpp"
#include "fp4moe/error.hpp"
#include "runtime/layer_core.hpp"

namespace fp4moe {

namespace {

// A layer that does not fit the device says which layer; the buffers it had
// allocated are freed as the exception leaves the constructor (all RAII).
template <class Weights>
std::unique_ptr<LayerCore> make_core(const MoeConfig& cfg, const Weights& weights, const LayerOptions& opts) {
  try {
    return std::make_unique<LayerCore>(cfg, weights, opts);
  } catch (const OutOfDeviceMemory& e) {
    throw OutOfDeviceMemory("MoeLayer '" + cfg.name + "' (max_tokens = " + std::to_string(opts.max_tokens) + "): " + e.what() +
                "; what it had allocated is freed");
  }
}

}  // namespace

MoeLayer::MoeLayer(const MoeConfig& cfg, const MoeWeights& weights, const LayerOptions& opts)
    : core_(make_core(cfg, weights, opts)) {}
MoeLayer::MoeLayer(const MoeConfig& cfg, const DeviceMoeWeights& weights, const LayerOptions& opts)
    : core_(make_core(cfg, weights, opts)) {}
MoeLayer::~MoeLayer() = default;

void MoeLayer::run(cudaStream_t stream, const ForwardArgs& args, int64_t tokens, StageMarks* marks) {
  LayerCore& c = *core_;
  FP4MOE_CHECK(tokens >= 0 && tokens <= c.options().max_tokens,
               "forward: tokens = " << tokens << " is outside 0..max_tokens = " << c.options().max_tokens);
  FP4MOE_CHECK(args.hidden && (args.router_logits || args.topk_ids) && (args.out || args.sums),
               "forward: hidden, router_logits and out must be device pointers, got null");
  if (tokens == 0) return;
  c.forward(*c.plan(tokens), args, stream, marks);
}

void MoeLayer::forward(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits, int64_t tokens,
                       __nv_bfloat16* out) {
  run(stream, {.hidden = hidden, .router_logits = router_logits, .out = out}, tokens, nullptr);
}

void MoeLayer::forward_routed(cudaStream_t stream, const __nv_bfloat16* hidden, const int32_t* topk_ids,
                              const float* topk_weights, int64_t tokens, __nv_bfloat16* out) {
  FP4MOE_CHECK(topk_ids && topk_weights, "forward_routed: topk_ids and topk_weights must be device pointers, got null");
  run(stream, {.hidden = hidden, .topk_ids = topk_ids, .topk_weights = topk_weights, .out = out}, tokens, nullptr);
}

bool MoeLayer::has_router_weight() const { return core_->has_router(); }

void MoeLayer::forward_from_hidden(cudaStream_t stream, const __nv_bfloat16* hidden, int64_t tokens, __nv_bfloat16* out) {
  LayerCore& c = *core_;
  FP4MOE_CHECK(c.has_router(), "forward_from_hidden: the layer was built without a router_weight");
  FP4MOE_CHECK(tokens >= 0 && tokens <= c.options().max_tokens,
               "forward_from_hidden: tokens = " << tokens << " is outside 0..max_tokens = " << c.options().max_tokens);
  FP4MOE_CHECK(hidden && out, "forward_from_hidden: hidden and out must be device pointers, got null");
  if (tokens == 0) return;
  run(stream, {.hidden = hidden, .router_logits = c.router_logits(hidden, tokens, stream), .out = out}, tokens, nullptr);
}

std::vector<MoeLayer::StageTime> MoeLayer::profile(cudaStream_t stream, const __nv_bfloat16* hidden,
                                                   const float* router_logits, int64_t tokens, __nv_bfloat16* out,
                                                   int reps) {
  FP4MOE_CHECK(reps >= 1, "profile: reps = " << reps << " must be positive");
  for (int i = 0; i < 3; ++i) forward(stream, hidden, router_logits, tokens, out);
  std::vector<std::string> names;
  std::vector<std::vector<double>> times;
  for (int r = 0; r < reps; ++r) {
    StageMarks marks;
    marks.mark("start", stream);
    run(stream, {.hidden = hidden, .router_logits = router_logits, .out = out}, tokens, &marks);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (names.empty()) {
      for (size_t i = 1; i < marks.events().size(); ++i) names.push_back(marks.events()[i].first);
      times.resize(names.size());
    }
    for (size_t i = 1; i < marks.events().size(); ++i) {
      float ms = 0;
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, marks.events()[i - 1].second, marks.events()[i].second));
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

void MoeLayer::check_status(cudaStream_t stream) { core_->check_status(stream); }
const int32_t* MoeLayer::topk_ids() const { return core_->topk_ids(); }
const float* MoeLayer::topk_weights() const { return core_->topk_weights(); }
const MoeConfig& MoeLayer::config() const { return core_->config(); }
FinalizeMode MoeLayer::finalize_mode() const { return core_->finalize_mode(); }
int64_t MoeLayer::expert_begin() const { return core_->expert_begin(); }
int64_t MoeLayer::expert_count() const { return core_->expert_count(); }
int64_t MoeLayer::weight_bytes() const { return core_->weight_bytes(); }
int64_t MoeLayer::workspace_bytes() const { return core_->workspace_bytes(); }

std::string MoeLayer::describe(int64_t tokens) const { return core_->plan(tokens)->describe(); }

std::vector<MoeLayer::TuneRow> MoeLayer::tune(const std::vector<int64_t>& tokens,
                                              const std::function<void(int, int, const std::string&)>& progress) {
  return core_->tune(tokens, progress);
}

}  // namespace fp4moe
