// A forward as planned: the plan's launches queued with the forward's own
// pointers bound. Nothing here plans, allocates or synchronises.
#include <cuda_runtime.h>

#include "common/cuda_check.hpp"
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/cublas_check.hpp"
#include "runtime/layer_core.hpp"

namespace fp4moe {

void StageMarks::mark(const char* stage, cudaStream_t s) {
  cudaEvent_t e;
  FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
  events_.emplace_back(stage, e);
  FP4MOE_CUDA_CHECK(cudaEventRecord(e, s));
}

StageMarks::~StageMarks() {
  for (auto& [name, e] : events_) cudaEventDestroy(e);
}

void LayerCore::route(const ForwardPlan& plan, const float* logits, int32_t* ids, float* weights, cudaStream_t stream) {
  kernels::RouteArgs r = plan.route;
  r.logits = logits;
  if (ids) r.topk_ids = ids;
  if (weights) r.topk_weights = weights;
  kernels::launch_route(r, stream);
}

void LayerCore::permute(const ForwardPlan& plan, const int32_t* ids, cudaStream_t stream) {
  kernels::PermuteArgs p = plan.permute;
  p.topk_ids = ids;
  kernels::launch_permute(p, stream);
}

void LayerCore::route_permute(const ForwardPlan& plan, const float* logits, cudaStream_t stream) {
  kernels::RouteArgs r = plan.route;
  r.logits = logits;
  kernels::PermuteArgs p = plan.permute;
  p.topk_ids = r.topk_ids;
  kernels::launch_route_permute(r, p, stream);
}

void LayerCore::finalize(const ForwardPlan& plan, const float* weights, bool with_shared, __nv_bfloat16* out,
                         float* sums, cudaStream_t stream) {
  kernels::FinalizeArgs f = plan.finalize;
  f.topk_weights = weights;
  // (expert parallel, the routed part alone: its rows are gathered tokens, not the
  // caller's, so a row that is not finite is not reported by its index here)
  if (!with_shared) f.shared_out = nullptr, f.status = nullptr;
  f.out = sums ? nullptr : out;
  f.out_f32 = sums;
  kernels::launch_finalize(f, stream);
}

void LayerCore::forward(const ForwardPlan& plan, const ForwardArgs& in, cudaStream_t stream, StageMarks* marks) {
  auto mark = [&](const char* stage) {
    if (marks) marks->mark(stage, stream);
  };
  const bool routed = in.topk_ids != nullptr;
  const int32_t* ids = routed ? in.topk_ids : topk_ids_.get();
  const float* weights = routed ? in.topk_weights : topk_weights_.get();
  if (!routed && plan.route_permute_fused) {
    route_permute(plan, in.router_logits, stream);
    mark("route");  // (the one launch: "permute" below takes nothing)
  } else {
    if (!routed) route(plan, in.router_logits, nullptr, nullptr, stream);
    mark("route");
    permute(plan, ids, stream);
  }
  mark("permute");
  for (const GemmStepPlan& g : plan.gemms()) {
    // the fused finalize's epilogue adds into fp32 sums that start at zero
    if (g.reads_routing_weights && plan.accumulate_bytes && !kernels::launches_skipped())
      FP4MOE_CUDA_CHECK(cudaMemsetAsync(plan.accumulate, 0, plan.accumulate_bytes, stream));
    enqueue_planned_gemm(g, in.hidden, weights, stream);
    if (g.stage) mark(g.stage);
  }
  finalize(plan, weights, true, in.out, in.sums, stream);
  mark("finalize");
}

void LayerCore::routed_experts(const ForwardPlan& plan, const __nv_bfloat16* hidden, const int32_t* ids,
                               const float* weights, float* sums, cudaStream_t stream) {
  FP4MOE_CHECK(finalize_ == FinalizeMode::split, "routed_experts: the layer's finalize must be split (its fp32 sums)");
  FP4MOE_CHECK(!shared_in_routed_, "routed_experts: the layer runs its shared expert among the routed ones "
                                   "(LayerOptions::shared_expert_in_routed_gemms must be false here)");
  permute(plan, ids, stream);
  for (const GemmStepPlan& g : plan.gemms())
    if (!g.dense) enqueue_planned_gemm(g, hidden, weights, stream);
  finalize(plan, weights, false, nullptr, sums, stream);
}

const __nv_bfloat16* LayerCore::shared_expert(const ForwardPlan& plan, const __nv_bfloat16* hidden, cudaStream_t stream) {
  if (!shared_) return nullptr;
  for (const GemmStepPlan& g : plan.gemms())
    if (g.dense) enqueue_planned_gemm(g, hidden, nullptr, stream);
  return shared_y_.get();
}

const float* LayerCore::router_logits(const __nv_bfloat16* hidden, int64_t tokens, cudaStream_t stream) {
  FP4MOE_CHECK(blas_, "forward_from_hidden: the layer was built without a router_weight");
  // Column-major view: logits^T [E, T] = W [E, H] . hidden^T [H, T].
  const float alpha = 1.f, beta = 0.f;
  const int E = static_cast<int>(cfg_.num_experts), H = static_cast<int>(cfg_.hidden);
  FP4MOE_CUBLAS_CHECK(cublasSetStream(blas_.get(), stream));
  FP4MOE_CUBLAS_CHECK(cublasGemmEx(blas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, E, static_cast<int>(tokens), H, &alpha,
                                   router_weight_.get(), CUDA_R_16BF, H, hidden, CUDA_R_16BF, H, &beta, logits_.get(),
                                   CUDA_R_32F, E, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (router_bias_.size()) {  // logits^T += bias [E, 1] . ones [1, T], in exact fp32 (no TF32)
    const float one = 1.f;
    FP4MOE_CUBLAS_CHECK(cublasGemmEx(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, E, static_cast<int>(tokens), 1, &one,
                                     router_bias_.get(), CUDA_R_32F, E, ones_.get(), CUDA_R_32F, 1, &one, logits_.get(),
                                     CUDA_R_32F, E, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  }
  return logits_.get();
}

// On the caller's stream only: a server's other threads keep their streams
// running (a device-wide synchronisation, or the legacy stream's implicit one,
// would wait for all their work).
void LayerCore::check_status(cudaStream_t stream) {
  int32_t words[kernels::kStatusWords] = {};
  FP4MOE_CUDA_CHECK(cudaMemcpyAsync(words, status_.get(), sizeof(words), cudaMemcpyDeviceToHost, stream));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(status_.get(), 0, sizeof(words), stream));
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t s = words[0];
  FP4MOE_CHECK(!(s & kernels::kStatusNonFiniteLogit), "forward: a router logit was NaN or Inf (that token got zero weights)");
  FP4MOE_CHECK(!(s & kernels::kStatusBadExpertId), "forward: an expert id was outside [0, " << cfg_.num_experts
                                                    << ") (those pairs contributed nothing)");
  FP4MOE_CHECK(!(s & kernels::kStatusNonFiniteOutput),
               "forward: the output of token " << INT32_MAX - words[1]
                                                << " holds NaN or Inf (a NaN or Inf hidden state, or an overflow; "
                                                   "the other tokens' rows are computed as usual)");
  FP4MOE_CHECK(!(s & kernels::kStatusCapacityOverflow),
               "forward: a token found no free row in the expert-parallel all-to-all's capacity "
               "(ParallelOptions::alltoall_capacity); its pairs on that rank contributed nothing");
}

}  // namespace fp4moe
