// Routing and permutation in one launch, for a few tokens
// (routing_kernels.hpp, launch_route_permute): one CTA. Warp t routes token t
// (route_warp.cuh) and writes its ids and weights as the router does, and the
// ids into shared memory too, where the CTA's counting sort (permute_cta.cuh)
// reads them: the two kernels' outputs, bitwise, with one launch and one
// dependent wait fewer at decode sizes.
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/permute_cta.cuh"
#include "kernels/route_warp.cuh"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using namespace detail;
constexpr int kThreads = 1024;
static_assert(kRoutePermuteMaxTokens * 32 <= kThreads, "a warp per token");

// Shared memory: each routing warp's 2 E scores, then count and next [held
// experts], then the ids [T k].
size_t route_permute_smem(const RouteArgs& r, const PermuteArgs& p) {
  return size_t(r.tokens) * 2 * size_t(r.experts) * sizeof(float) + 2 * size_t(p.experts) * sizeof(int) +
         size_t(r.tokens * r.top_k) * sizeof(int32_t);
}

template <int kPerLane>
__global__ void __launch_bounds__(kThreads) route_permute_kernel(const RouteArgs r, const PermuteArgs p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int E = r.experts, k = r.top_k, T = static_cast<int>(r.tokens);
  int* count = reinterpret_cast<int*>(smem + size_t(T) * 2 * E);
  int* next = count + p.experts;
  int32_t* ids = next + p.experts;
  const bool routes = warp < T;
  // The bias is a weight, not the previous kernel's output: read before waiting for it.
  float bias[kPerLane];
  load_bias<kPerLane>(r, lane, bias);
  wait_for_prior_grid();
  allow_dependent_grids();
  if (routes) {
    float* c = smem + warp * (2 * E);  // choice score (grouping, softmax weights)
    const SlotChoice ch = route_token<kPerLane>(r, warp, bias, lane, c, c + E);
    if (lane < k) {
      r.topk_ids[warp * k + lane] = ch.expert, r.topk_weights[warp * k + lane] = ch.weight;
      ids[warp * k + lane] = ch.expert;
    }
    if (ch.bad && lane == 0) atomicOr(r.status, kStatusNonFiniteLogit);
  }
  __syncthreads();  // every token's ids in shared memory
  permute_pairs<kThreads>(p, ids, count, next);
}

}  // namespace

void launch_route_permute(const RouteArgs& r, const PermuteArgs& args, cudaStream_t stream) {
  check_route_args(r);
  const PermuteArgs p = checked_permute_args(args);
  FP4MOE_CHECK(r.tokens == p.tokens && r.top_k == p.top_k && r.topk_ids == p.topk_ids,
               "route_permute: the routing's tokens, top_k and ids (" << r.tokens << ", " << r.top_k
                                                                      << ") are not the permutation's (" << p.tokens
                                                                      << ", " << p.top_k << ", or another ids buffer)");
  FP4MOE_CHECK(route_permute_fits(r.tokens, r.experts, p.experts),
               "route_permute: " << r.tokens << " tokens over " << r.experts << " experts (" << p.experts
                                 << " held): one CTA takes 1.." << kRoutePermuteMaxTokens << " tokens and at most "
                                 << kRoutePermuteMaxExperts << " experts");
  const size_t smem = route_permute_smem(r, p);
  with_experts_per_lane<1, kRoutePermuteMaxExperts / 32>(route_experts_per_lane(r.experts), [&](auto per_lane) {
    launch_dependent(route_permute_kernel<decltype(per_lane)::value>, 1, kThreads, smem, stream, r, p);
  });
  FP4MOE_CHECK_LAUNCH("route_permute_kernel");
}

}  // namespace fp4moe::kernels
