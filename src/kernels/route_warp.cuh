// One token's routing by one warp, the device half of the GPU router
// (route.cu) and of the fused routing and permutation (route_permute.cu): the
// CPU reference's rule and arithmetic (src/reference/router_math.hpp), so the
// choice and the weights are bitwise the same. Ties: higher score first, then
// lower expert id. A lane's scores stay in registers, the top-k takes one
// redux.sync pair per chosen expert, and the k weights are computed in k lanes
// at once.
#pragma once
#include <cfloat>
#include <climits>
#include <type_traits>

#include "kernels/routing_kernels.hpp"
#include "reference/router_math.hpp"

namespace fp4moe::kernels::detail {

namespace rm = router_math;

// f(std::integral_constant<int, P>) for the kernel instance of P experts per
// lane that `per_lane` (route_experts_per_lane) rounds to, P = N, 2N, ... kMax.
template <int N, int kMax, class F>
void with_experts_per_lane(int per_lane, F&& f) {
  if constexpr (N < kMax) {
    if (per_lane > N) return with_experts_per_lane<2 * N, kMax>(per_lane, f);
  }
  f(std::integral_constant<int, N>{});
}
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

// A lane's choice scores cv (and, sigmoid, its scores into s; every choice
// score into c) from the token's logits `row`; whether any logit was not finite.
template <int kPerLane>
__device__ __forceinline__ bool load_scores(const RouteArgs& a, const float* row, const float (&bias)[kPerLane], int lane,
                                            float* c, float* s, float (&cv)[kPerLane]) {
  const int E = a.experts;
  // Every load of the lane issued before the first is used: one L2 round trip.
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
  return __any_sync(0xffffffffu, bad);
}

// Group-limited top-k: bit g set for the topk_group groups with the best sum
// of their two best choice scores.
__device__ __forceinline__ uint32_t kept_groups(const RouteArgs& a, const float* c, int lane) {
  const int G = a.experts / a.n_group;
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
  uint32_t kept = 0;
  for (int r = 0; r < a.topk_group; ++r) {
    const Candidate w = warp_best(gs);
    kept |= 1u << w.i;
    if (lane == w.i) gs = {-FLT_MAX, INT_MAX};
  }
  return kept;
}

// Top-k: each lane keeps its experts' score keys (0: none, or taken); a round
// takes the warp's largest key, the smallest id among equal ones (the
// reference's order), and only the lane it came from looks again. Lane j < k
// gets slot j's expert.
template <int kPerLane>
__device__ __forceinline__ int top_k_experts(const RouteArgs& a, const float (&cv)[kPerLane], bool grouped,
                                             uint32_t group_ok, int lane) {
  const int E = a.experts;
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
  int my_id = 0;
  for (int j = 0; j < a.top_k; ++j) {
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
  return my_id;
}

// Lane j < k: the weight of slot j, whose expert is my_id (sigmoid: its score,
// renormalised over the k; softmax: over the k, or over every expert).
__device__ __forceinline__ float slot_weight(const RouteArgs& a, const float* c, const float* s, int my_id, int lane) {
  const int k = a.top_k;
  if (a.sigmoid) {
    const float sv = lane < k ? s[my_id] : 0.f;
    if (!a.renormalize) return rm::fmul(sv, a.routed_scaling_factor);
    const float sum = ordered_sum(sv, k);
    return rm::fmul(sum > 0.f ? rm::fdiv(sv, sum) : 0.f, a.routed_scaling_factor);
  }
  const float m = c[__shfl_sync(0xffffffffu, my_id, 0)];  // the largest logit
  const float ex = lane < k ? rm::expf_exact(rm::fadd(c[my_id], -m)) : 0.f;
  float sum;
  if (a.renormalize) {
    sum = ordered_sum(ex, k);
  } else {  // over every expert, in id order
    sum = 0.f;
    for (int e = 0; e < a.experts; ++e) sum = rm::fadd(sum, rm::expf_exact(rm::fadd(c[e], -m)));
  }
  return rm::fmul(rm::fdiv(ex, sum), a.routed_scaling_factor);
}

// Token t's routing by this warp: lane j < k gets slot j's expert and weight
// (a token with a non-finite logit: experts 0..k-1, weight 0, and `bad`).
// c, s: this warp's 2 E floats of shared memory; bias: the lane's correction
// biases (read before the previous kernel is waited for).
struct SlotChoice {
  int expert;
  float weight;
  bool bad;
};
template <int kPerLane>
__device__ __forceinline__ SlotChoice route_token(const RouteArgs& a, int64_t t, const float (&bias)[kPerLane], int lane,
                                                  float* c, float* s) {
  float cv[kPerLane];
  const bool bad = load_scores<kPerLane>(a, a.logits + t * a.experts, bias, lane, c, s, cv);
  __syncwarp();
  const bool grouped = a.sigmoid && a.n_group > 1;
  const uint32_t group_ok = grouped ? kept_groups(a, c, lane) : 0xffffffffu;
  const int my_id = top_k_experts<kPerLane>(a, cv, grouped, group_ok, lane);
  if (bad) return {lane, 0.f, true};
  return {my_id, slot_weight(a, c, s, my_id, lane), false};
}

// The lane's correction biases.
template <int kPerLane>
__device__ __forceinline__ void load_bias(const RouteArgs& a, int lane, float (&bias)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) bias[i] = a.bias && lane + 32 * i < a.experts ? __ldg(a.bias + lane + 32 * i) : 0.f;
}

}  // namespace fp4moe::kernels::detail
