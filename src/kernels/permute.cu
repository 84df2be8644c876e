// GPU permutation: one CTA's counting sort of the T*k (token, slot) pairs by
// expert (permute_cta.cuh; about 13 us for 16K pairs; fine for decode and
// moderate prefill, see docs/kernels.md).
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/permute_cta.cuh"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) permute_kernel(const PermuteArgs a) {
  __shared__ int count[kPermuteMaxExperts];
  __shared__ int next[kPermuteMaxExperts];
  wait_for_prior_grid();
  allow_dependent_grids();
  detail::permute_pairs<kThreads>(a, a.topk_ids, count, next);
}

}  // namespace

PermuteArgs checked_permute_args(const PermuteArgs& args) {
  PermuteArgs a = args;
  if (a.global_experts == 0) a.global_experts = a.experts;
  FP4MOE_CHECK(a.expert_begin >= 0 && a.expert_begin + a.experts <= a.global_experts,
               "permute: held experts [" << a.expert_begin << ", " << a.expert_begin + a.experts
                                         << ") are outside the model's " << a.global_experts);
  FP4MOE_CHECK(a.experts >= 1 && a.experts <= kPermuteMaxExperts,
               "permute: experts = " << a.experts << " is outside 1.." << kPermuteMaxExperts);
  FP4MOE_CHECK(a.top_k >= 1, "permute: top_k = " << a.top_k << " must be positive");
  FP4MOE_CHECK(a.tokens >= 0 && a.tokens * a.top_k < (int64_t(1) << 31), "permute: " << a.tokens << " tokens x " << a.top_k << " pairs overflow int32");
  FP4MOE_CHECK(a.shared_rows >= 0 && a.shared_rows <= a.tokens && a.tokens * a.top_k + a.shared_rows < (int64_t(1) << 31),
               "permute: shared_rows = " << a.shared_rows << " is outside 0..tokens = " << a.tokens
                                         << " (or overflows int32 with the pairs)");
  FP4MOE_CHECK(a.topk_ids && a.expert_offsets && a.permuted_pair && a.permuted_token && a.pair_pos && a.status,
               "permute: a device pointer is null");
  return a;
}

void launch_permute(const PermuteArgs& args, cudaStream_t stream) {
  const PermuteArgs a = checked_permute_args(args);
  launch_dependent(permute_kernel, 1, kThreads, 0, stream, a);
  FP4MOE_CHECK_LAUNCH("permute_kernel");
}

}  // namespace fp4moe::kernels
