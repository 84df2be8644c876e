// GPU router: one warp per token (route_warp.cuh has the warp's arithmetic,
// the CPU reference's rule, bitwise). At one token the whole kernel is one
// warp's dependent chain.
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/route_warp.cuh"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using namespace detail;
constexpr int kWarpsPerBlock = 4;

// kPerLane: experts per lane (E <= 32 kPerLane); a lane's scores live in
// registers, so the top-k rounds read no shared memory.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) route_kernel(const RouteArgs a) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  const int E = a.experts, k = a.top_k;
  float* c = smem + warp * (2 * E);  // choice score (grouping, softmax weights)
  float* s = c + E;                  // sigmoid score (the weights)
  // The bias is a weight, not the previous kernel's output: read before waiting for it.
  float bias[kPerLane];
  load_bias<kPerLane>(a, lane, bias);
  wait_for_prior_grid();
  allow_dependent_grids();
  if (t >= a.tokens) return;
  const SlotChoice r = route_token<kPerLane>(a, t, bias, lane, c, s);
  if (lane < k) a.topk_ids[t * k + lane] = r.expert, a.topk_weights[t * k + lane] = r.weight;
  if (r.bad && lane == 0) atomicOr(a.status, kStatusNonFiniteLogit);
}

}  // namespace

RouteArgs route_args(const MoeConfig& cfg, const float* correction_bias, int64_t tokens, int32_t* topk_ids,
                     float* topk_weights, int32_t* status) {
  RouteArgs r;
  r.bias = cfg.use_correction_bias ? correction_bias : nullptr;
  r.tokens = tokens;
  r.experts = static_cast<int>(cfg.num_experts);
  r.top_k = static_cast<int>(cfg.top_k);
  r.sigmoid = cfg.scoring == Scoring::sigmoid;
  r.renormalize = cfg.renormalize;
  r.n_group = static_cast<int>(cfg.n_group);
  r.topk_group = static_cast<int>(cfg.topk_group);
  r.routed_scaling_factor = cfg.routed_scaling_factor;
  r.topk_ids = topk_ids;
  r.topk_weights = topk_weights;
  r.status = status;
  return r;
}

void check_route_args(const RouteArgs& a) {
  FP4MOE_CHECK(a.experts >= 1 && a.experts <= kRouteMaxExperts,
               "route: experts = " << a.experts << " is outside 1.." << kRouteMaxExperts);
  FP4MOE_CHECK(a.top_k >= 1 && a.top_k <= 32 && a.top_k <= a.experts, "route: top_k = " << a.top_k << " is outside 1..min(32, E)");
  FP4MOE_CHECK(a.n_group >= 1 && a.n_group <= 32 && a.experts % a.n_group == 0,
               "route: n_group = " << a.n_group << " must divide E = " << a.experts << " and be at most 32");
  FP4MOE_CHECK(a.topk_group >= 1 && a.topk_group <= a.n_group, "route: topk_group = " << a.topk_group << " is outside 1..n_group");
  FP4MOE_CHECK(a.logits && a.topk_ids && a.topk_weights && a.status, "route: a device pointer is null");
}

void launch_route(const RouteArgs& a, cudaStream_t stream) {
  check_route_args(a);
  if (a.tokens == 0) return;
  const size_t smem = size_t(kWarpsPerBlock) * (2 * a.experts) * sizeof(float);
  const int64_t blocks = (a.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const unsigned grid = static_cast<unsigned>(blocks);
  with_experts_per_lane<1, kRouteMaxExperts / 32>(route_experts_per_lane(a.experts), [&](auto per_lane) {
    launch_dependent(route_kernel<decltype(per_lane)::value>, grid, kWarpsPerBlock * 32, smem, stream, a);
  });
  FP4MOE_CHECK_LAUNCH("route_kernel");
}

}  // namespace fp4moe::kernels
