// GPU router: one warp per token; the CPU reference's rule and arithmetic
// (src/reference/router_math.hpp), so the choice and the weights are bitwise
// the same. Ties: higher score first, then lower expert id. At one token the
// whole kernel is one warp's dependent chain: a lane's scores stay in
// registers, the top-k takes one redux.sync pair per chosen expert, and the k
// weights are computed in k lanes at once.
#include <cfloat>
#include <climits>

#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/routing_kernels.hpp"
#include "reference/router_math.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

namespace rm = router_math;
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxExperts = 1024;  // 32 per lane

struct Candidate {
  float v;
  int i;
};
__device__ __forceinline__ bool better(Candidate a, Candidate b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }
__device__ __forceinline__ Candidate warp_best(Candidate c) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) {
    Candidate other{__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.i, o)};
    if (better(other, c)) c = other;
  }
  return c;
}

// An unsigned key in the order of a finite score, -0.0 equal to +0.0 as the
// float compare has them, so that one redux.sync.max finds the warp's best
// score; 0 is below every score (no candidate).
__device__ __forceinline__ uint32_t score_key(float v) {
  const uint32_t u = __float_as_uint(__fadd_rn(v, 0.0f));
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// The sum of lane j's v over j = 0..k-1 in that order, in every lane (a
// fixed order, as the CPU reference sums).
__device__ __forceinline__ float ordered_sum(float v, int k) {
  float sum = 0.f;
  for (int j = 0; j < k; ++j) sum = rm::fadd(sum, __shfl_sync(0xffffffffu, v, j));
  return sum;
}

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
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) bias[i] = a.bias && lane + 32 * i < E ? __ldg(a.bias + lane + 32 * i) : 0.f;
  wait_for_prior_grid();
  allow_dependent_grids();
  if (t >= a.tokens) return;
  const float* row = a.logits + t * E;

  // Every load of the lane issued before the first is used: one L2 round trip.
  float cv[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) cv[i] = lane + 32 * i < E ? __ldg(row + lane + 32 * i) : 0.f;
  bool bad = false;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e >= E) break;
    float v = cv[i];
    if (!isfinite(v)) bad = true, v = 0.f;
    if (a.sigmoid) {
      const float sv = rm::sigmoidf_exact(v);
      cv[i] = a.bias ? rm::fadd(sv, bias[i]) : sv;
      s[e] = sv;
    } else {
      cv[i] = v;  // softmax is monotone: choose by logit
    }
    c[e] = cv[i];
  }
  bad = __any_sync(0xffffffffu, bad);
  __syncwarp();

  // Group-limited top-k: keep the topk_group groups with the best sum of their two best scores.
  const bool grouped = a.sigmoid && a.n_group > 1;
  uint32_t group_ok = 0xffffffffu;
  if (grouped) {
    const int G = E / a.n_group;
    Candidate gs{-FLT_MAX, INT_MAX};
    if (lane < a.n_group) {
      float best = -INFINITY, second = -INFINITY;
      for (int i = 0; i < G; ++i) {
        const float v = c[lane * G + i];
        if (v > best) second = best, best = v;
        else if (v > second) second = v;
      }
      gs = {G >= 2 ? rm::fadd(best, second) : best, lane};
    }
    group_ok = 0;
    for (int r = 0; r < a.topk_group; ++r) {
      const Candidate w = warp_best(gs);
      group_ok |= 1u << w.i;
      if (lane == w.i) gs = {-FLT_MAX, INT_MAX};
    }
  }

  // Top-k: each lane keeps its experts' score keys (0: none, or taken); a
  // round takes the warp's largest key, the smallest id among equal ones (the
  // reference's order), and only the lane it came from looks again.
  uint32_t keys[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    const bool live = e < E && (!grouped || ((group_ok >> (e / (E / a.n_group))) & 1));
    keys[i] = live ? score_key(cv[i]) : 0u;
  }
  uint32_t key = 0;
  int id = INT_MAX;
  auto lane_best = [&] {
    key = 0, id = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (keys[i] > key) key = keys[i], id = lane + 32 * i;  // strictly: the smaller id keeps a tie
  };
  lane_best();
  int my_id = 0;  // lane j < k: the expert of slot j
  for (int j = 0; j < k; ++j) {
    const uint32_t best = __reduce_max_sync(0xffffffffu, key);
    const int winner = int(__reduce_min_sync(0xffffffffu, key == best ? uint32_t(id) : 0xffffffffu));
    if (lane == j) my_id = winner;
    if (lane == winner % 32) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (i == winner / 32) keys[i] = 0;
      lane_best();
    }
  }

  int32_t* out_ids = a.topk_ids + t * k;
  float* out_w = a.topk_weights + t * k;
  if (bad) {
    if (lane < k) out_ids[lane] = lane, out_w[lane] = 0.f;
    if (lane == 0) atomicOr(a.status, kStatusNonFiniteLogit);
    return;
  }
  float w = 0.f;
  if (a.sigmoid) {
    const float sv = lane < k ? s[my_id] : 0.f;
    if (a.renormalize) {
      const float sum = ordered_sum(sv, k);
      w = rm::fmul(sum > 0.f ? rm::fdiv(sv, sum) : 0.f, a.routed_scaling_factor);
    } else {
      w = rm::fmul(sv, a.routed_scaling_factor);
    }
  } else {
    const float m = c[__shfl_sync(0xffffffffu, my_id, 0)];  // the largest logit
    const float ex = lane < k ? rm::expf_exact(rm::fadd(c[my_id], -m)) : 0.f;
    float sum;
    if (a.renormalize) {
      sum = ordered_sum(ex, k);
    } else {  // over every expert, in id order
      sum = 0.f;
      for (int e = 0; e < E; ++e) sum = rm::fadd(sum, rm::expf_exact(rm::fadd(c[e], -m)));
    }
    w = rm::fmul(rm::fdiv(ex, sum), a.routed_scaling_factor);
  }
  if (lane < k) out_ids[lane] = my_id, out_w[lane] = w;
}

}  // namespace

void launch_route(const RouteArgs& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.experts >= 1 && a.experts <= kMaxExperts, "route: experts = " << a.experts << " is outside 1.." << kMaxExperts);
  FP4MOE_CHECK(a.top_k >= 1 && a.top_k <= 32 && a.top_k <= a.experts, "route: top_k = " << a.top_k << " is outside 1..min(32, E)");
  FP4MOE_CHECK(a.n_group >= 1 && a.n_group <= 32 && a.experts % a.n_group == 0,
               "route: n_group = " << a.n_group << " must divide E = " << a.experts << " and be at most 32");
  FP4MOE_CHECK(a.topk_group >= 1 && a.topk_group <= a.n_group, "route: topk_group = " << a.topk_group << " is outside 1..n_group");
  FP4MOE_CHECK(a.logits && a.topk_ids && a.topk_weights && a.status, "route: a device pointer is null");
  if (a.tokens == 0) return;
  const size_t smem = size_t(kWarpsPerBlock) * (2 * a.experts) * sizeof(float);
  const int64_t blocks = (a.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const unsigned grid = static_cast<unsigned>(blocks);
  const int per_lane = (a.experts + 31) / 32;
  if (per_lane <= 1) launch_dependent(route_kernel<1>, grid, kWarpsPerBlock * 32, smem, stream, a);
  else if (per_lane <= 2) launch_dependent(route_kernel<2>, grid, kWarpsPerBlock * 32, smem, stream, a);
  else if (per_lane <= 4) launch_dependent(route_kernel<4>, grid, kWarpsPerBlock * 32, smem, stream, a);
  else if (per_lane <= 8) launch_dependent(route_kernel<8>, grid, kWarpsPerBlock * 32, smem, stream, a);
  else if (per_lane <= 16) launch_dependent(route_kernel<16>, grid, kWarpsPerBlock * 32, smem, stream, a);
  else launch_dependent(route_kernel<32>, grid, kWarpsPerBlock * 32, smem, stream, a);
  FP4MOE_CHECK_LAUNCH("route_kernel");
}

}  // namespace fp4moe::kernels
