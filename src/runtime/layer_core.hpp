// The MoE layer's state and its steps, private to the library: MoeLayer is
// its public face, and layers built around it (ParallelMoeLayer) call its
// steps through this interface. Construction prepares the weights and sizes
// the workspace; plans are made per shape (forward_plan.hpp) and only read by
// a forward.
#pragma once
#include <cublas_v2.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp4moe/layer.hpp"
#include "plan/arch.hpp"
#include "plan/tune_cache.hpp"
#include "runtime/cublas_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/forward_plan.hpp"
#include "runtime/prepared_projection.hpp"

namespace fp4moe {

// Events recorded between the steps of a forward (MoeLayer::profile).
class StageMarks {
 public:
  void mark(const char* stage, cudaStream_t s);
  ~StageMarks();
  const std::vector<std::pair<std::string, cudaEvent_t>>& events() const { return events_; }

 private:
  std::vector<std::pair<std::string, cudaEvent_t>> events_;
};

class LayerCore {
 public:
  // weights: ModelOpt-layout FP4 matrices on the host; or on the GPU.
  LayerCore(const MoeConfig& cfg, const MoeWeights& weights, const LayerOptions& opts);
  LayerCore(const MoeConfig& cfg, const DeviceMoeWeights& weights, const LayerOptions& opts);
  ~LayerCore();
  LayerCore(const LayerCore&) = delete;
  LayerCore& operator=(const LayerCore&) = delete;

  // The plan of a forward of `tokens` tokens, or of a composed layer's shape;
  // made on first use (thread-safe), then only read; the caller's share keeps
  // it alive across a re-tune on another thread.
  std::shared_ptr<const ForwardPlan> plan(int64_t tokens) const;
  std::shared_ptr<const ForwardPlan> plan(const PlanShape& shape) const;
  // The plans held: one per shape seen since the last tune (ForwardPlan::bytes()
  // each), at most LayerOptions::max_plans of them (the least recently used
  // dropped first); and the plans made, those made again after a drop included.
  size_t plans_held() const { return plans_.size(); }
  int64_t plans_made() const { return plans_.made(); }

  // A whole forward of plan.shape.rows tokens: route (unless the caller's
  // routing is given), permute, the GEMMs, the finalize into out or sums.
  void forward(const ForwardPlan& plan, const ForwardArgs& args, cudaStream_t stream, StageMarks* marks = nullptr);

  // The steps, for layers composed around this one (ParallelMoeLayer).
  // Route plan.shape.rows tokens into ids and weights (null: the layer's own buffers).
  void route(const ForwardPlan& plan, const float* logits, int32_t* ids, float* weights, cudaStream_t stream);
  // The routed experts over plan.shape.rows rows (hidden, ids, weights), each
  // row's pairs summed in slot order into fp32 `sums` [rows, H].
  void routed_experts(const ForwardPlan& plan, const __nv_bfloat16* hidden, const int32_t* ids, const float* weights,
                      float* sums, cudaStream_t stream);
  // The shared expert over plan.shape.rows tokens: its output [T, H] bf16, or null without one.
  const __nv_bfloat16* shared_expert(const ForwardPlan& plan, const __nv_bfloat16* hidden, cudaStream_t stream);

  // Autotuning (MoeLayer::tune): the plans are made again afterwards.
  std::vector<MoeLayer::TuneRow> tune(const std::vector<int64_t>& tokens,
                                      const std::function<void(int, int, const std::string&)>& progress);

  void check_status(cudaStream_t stream);
  int32_t* status() const { return status_.get(); }
  const int32_t* topk_ids() const { return topk_ids_.get(); }
  const float* topk_weights() const { return topk_weights_.get(); }
  const MoeConfig& config() const { return cfg_; }
  const LayerOptions& options() const { return opts_; }
  int64_t expert_begin() const { return expert_begin_; }
  int64_t expert_count() const { return routed_experts_; }
  // Whether the shared expert runs as routed expert E (LayerOptions::shared_expert_in_routed_gemms).
  bool shared_in_routed() const { return shared_in_routed_; }
  // The routed GEMMs' rows over `tokens` tokens: k per token, and the shared expert's one where it runs there.
  int64_t permuted_rows(int64_t tokens) const { return tokens * (cfg_.top_k + (shared_in_routed_ ? 1 : 0)); }
  // Their rows per expert on average: what the tiles are chosen for and tuned by.
  double rows_per_expert(int64_t tokens) const {
    return double(permuted_rows(tokens)) / double(cfg_.num_experts + (shared_in_routed_ ? 1 : 0));
  }
  FinalizeMode finalize_mode() const { return finalize_; }
  int64_t weight_bytes() const;
  int64_t workspace_bytes() const;
  // The last forward's intermediate results over `tokens` tokens, in step
  // order (bench_soak names the first that differs between two runs).
  struct Intermediate {
    const char* step;
    const void* data;
    size_t bytes;
  };
  std::vector<Intermediate> intermediates(int64_t tokens) const;
  bool has_router() const { return blas_ != nullptr; }
  // logits [T, E] = hidden . router_weight^T (+ router bias), into the layer's buffer.
  const float* router_logits(const __nv_bfloat16* hidden, int64_t tokens, cudaStream_t stream);

 private:
  // One GEMM of a forward before its tile is chosen: what it multiplies and what it is called.
  struct GemmSpec {
    const char* name;
    const char* title;
    const char* stage;
    bool dense;
    bool reads_hidden, reads_routing_weights;
    const PreparedProjection* w;
    GemmOperands io;
    double tokens_per_expert;
    int64_t active_experts;
  };
  std::vector<GemmSpec> gemm_specs(const PlanShape& shape) const;
  plan::TuneKey tune_key(const GemmSpec& g) const;
  TileChoice choose_tile(const GemmSpec& g) const;
  GemmStepLaunch prepare(const GemmSpec& g, const TileChoice& c) const;
  ForwardPlan make_plan(const PlanShape& shape) const;
  std::string plan_notes() const;

  void init_device(const MoeConfig& c, const LayerOptions& o);
  void init_router(const uint16_t* router_weight, const float* router_bias, bool on_device);
  void init_workspace();
  bool shared_joins_routed(bool same_format, int64_t routed_count) const;
  void init_activations();
  void permute(const ForwardPlan& plan, const int32_t* ids, cudaStream_t stream);
  // Routing and permutation as one launch (plan.route_permute_fused), into the layer's buffers.
  void route_permute(const ForwardPlan& plan, const float* logits, cudaStream_t stream);
  void finalize(const ForwardPlan& plan, const float* weights, bool with_shared, __nv_bfloat16* out, float* sums,
                cudaStream_t stream);

  MoeConfig cfg_;
  LayerOptions opts_;
  FinalizeMode finalize_ = FinalizeMode::split;
  plan::DeviceLimits device_;
  plan::TuneContext tune_context_;
  std::optional<plan::TuneCache> cache_;
  std::string cache_notice_;
  std::unique_ptr<ExpertPair> routed_, shared_;
  // H and I as the GEMMs see them (padded_features): where not multiples of the
  // layer's granule (granule_of: 64 on sm_90, so gpt-oss's 2880 runs as 2880;
  // 256 elsewhere, 3072), padded to it, the pad being zero weights, zero
  // biases and zero activations, so that it adds nothing to the output.
  int64_t hidden_padded_ = 0, intermediate_padded_ = 0;
  int64_t expert_begin_ = 0;  // the model's experts held: [expert_begin, expert_begin + routed experts)
  int64_t routed_experts_ = 0;  // routed experts held (routed_ holds one more: the shared expert, when shared_in_routed_)
  bool shared_in_routed_ = false;
  DeviceBuffer<float> correction_bias_;
  // workspace
  DeviceBuffer<int32_t> topk_ids_, offsets_, permuted_pair_, permuted_token_, pair_pos_, dense_offsets_, status_;
  DeviceBuffer<float> topk_weights_, accumulate_;
  DeviceBuffer<__nv_bfloat16> a2_, y2_, shared_a2_, shared_y_;
  // GEMM1's gathered rows in expert order [P, hidden_padded] where a tile loads
  // them by TMA (sm_90) or H is padded (GemmStepLaunch::copies_rows), or empty
  DeviceBuffer<__nv_bfloat16> x_permuted_;
  // fp8 activations (LayerOptions::activations): the routed GEMMs' inputs as
  // e4m3 rows in expert order [P, K] and their scales [P], from the FP8 row copy
  DeviceBuffer<uint8_t> x_e4m3_, a2_e4m3_;
  DeviceBuffer<float> x_scales_, a2_scales_;
  // split-K partial sums and arrival counters (warp-specialized tiles, sm_90), zeroed once
  DeviceBuffer<uint8_t> split_k_;
  // optional router: logits = hidden . router_weight^T on the device
  DeviceBuffer<__nv_bfloat16> router_weight_;
  DeviceBuffer<float> router_bias_, ones_;  // gpt-oss's router bias [E], added by a rank-1 update with ones [max_tokens]
  DeviceBuffer<float> logits_;
  DeviceBuffer<uint8_t> blas_workspace_;
  CublasHandle blas_;
  mutable PlanCache plans_;
  mutable std::shared_ptr<const std::string> notes_;  // the plans' notes (make_plan)
};

}  // namespace fp4moe
