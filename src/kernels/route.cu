// GPU router: one warp per token; the CPU reference's rule and arithmetic
// (src/reference/router_math.hpp), so the choice and the weights are bitwise
// the same. Ties: higher score first, then lower expert id.
#include <cfloat>
#include <climits>

#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/routing_kernels.hpp"
#include "reference/router_math.hpp"
#include "runtime/cuda_check.hpp"

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

__global__ void __launch_bounds__(kWarpsPerBlock * 32) route_kernel(const RouteArgs a) {
  wait_for_prior_grid();
  allow_dependent_grids();
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= a.tokens) return;
  const int E = a.experts, k = a.top_k;
  float* c = smem + warp * (2 * E + 32);  // choice score
  float* s = c + E;                       // sigmoid score (the weights)
  int* ids = reinterpret_cast<int*>(s + E);  // the chosen experts, slot order
  const float* row = a.logits + t * E;

  bool bad = false;
  for (int e = lane; e < E; e += 32) {
    float l = row[e];
    if (!isfinite(l)) bad = true, l = 0.f;
    if (a.sigmoid) {
      const float sv = rm::sigmoidf_exact(l);
      s[e] = sv;
      c[e] = a.bias ? rm::fadd(sv, a.bias[e]) : sv;
    } else {
      c[e] = l;  // softmax is monotone: choose by logit
    }
  }
  bad = __any_sync(0xffffffffu, bad);
  __syncwarp();

  // Group-limited top-k: keep the topk_group groups with the best sum of their two best scores.
  uint32_t group_ok = 0xffffffffu;
  if (a.sigmoid && a.n_group > 1) {
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

  // Top-k by choice score; each lane scans its experts e = lane + 32 i.
  uint32_t taken = 0;
#pragma unroll 1
  for (int j = 0; j < k; ++j) {
    Candidate mine{-INFINITY, INT_MAX};
    for (int i = 0, e = lane; e < E; ++i, e += 32) {
      if ((taken >> i) & 1) continue;
      if (a.n_group > 1 && a.sigmoid && !((group_ok >> (e / (E / a.n_group))) & 1)) continue;
      const Candidate cand{c[e], e};
      if (better(cand, mine)) mine = cand;
    }
    const Candidate w = warp_best(mine);
    if (w.i % 32 == lane) taken |= 1u << (w.i / 32);
    if (lane == 0) ids[j] = w.i;
  }
  __syncwarp();

  if (lane == 0) {
    int32_t* out_ids = a.topk_ids + t * k;
    float* out_w = a.topk_weights + t * k;
    if (bad) {
      for (int j = 0; j < k; ++j) out_ids[j] = j, out_w[j] = 0.f;
      atomicOr(a.status, kStatusNonFiniteLogit);
      return;
    }
    float sum = 0.f;
    if (a.sigmoid) {
      if (a.renormalize) {
        for (int j = 0; j < k; ++j) sum = rm::fadd(sum, s[ids[j]]);
        for (int j = 0; j < k; ++j) {
          const float q = sum > 0.f ? rm::fdiv(s[ids[j]], sum) : 0.f;
          out_w[j] = rm::fmul(q, a.routed_scaling_factor);
        }
      } else {
        for (int j = 0; j < k; ++j) out_w[j] = rm::fmul(s[ids[j]], a.routed_scaling_factor);
      }
    } else {
      const float m = c[ids[0]];  // the largest logit
      if (a.renormalize) {
        float ex[32];
        for (int j = 0; j < k; ++j) ex[j] = rm::expf_exact(rm::fadd(c[ids[j]], -m)), sum = rm::fadd(sum, ex[j]);
        for (int j = 0; j < k; ++j) out_w[j] = rm::fmul(rm::fdiv(ex[j], sum), a.routed_scaling_factor);
      } else {
        for (int e = 0; e < E; ++e) sum = rm::fadd(sum, rm::expf_exact(rm::fadd(c[e], -m)));
        for (int j = 0; j < k; ++j)
          out_w[j] = rm::fmul(rm::fdiv(rm::expf_exact(rm::fadd(c[ids[j]], -m)), sum), a.routed_scaling_factor);
      }
    }
    for (int j = 0; j < k; ++j) out_ids[j] = ids[j];
  }
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
  const size_t smem = size_t(kWarpsPerBlock) * (2 * a.experts + 32) * sizeof(float);
  const int64_t blocks = (a.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch_dependent(route_kernel, static_cast<unsigned>(blocks), kWarpsPerBlock * 32, smem, stream, a);
  FP4MOE_CHECK_LAUNCH("route_kernel");
}

}  // namespace fp4moe::kernels
