// Finalize: each token's k expert outputs weighted and summed in slot order
// (split mode, bitwise identical run to run), or the fused epilogue's fp32 sums
// converted; the shared expert's output added (its own GEMM's, or its rows among the
// routed ones: FinalizeArgs::shared_row0). 8 columns (16 bytes) per thread.
#include <cuda_bf16.h>

#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

__device__ __forceinline__ void add_bf16x8(float acc[8], uint4 v, float w) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] = __fmaf_rn(w, f.x, acc[2 * i]);
    acc[2 * i + 1] = __fmaf_rn(w, f.y, acc[2 * i + 1]);
  }
}

__global__ void finalize_kernel(const FinalizeArgs a) {
  wait_for_prior_grid();
  allow_dependent_grids();
  const int64_t groups = a.hidden / 8;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.tokens * groups) return;
  const int64_t t = idx / groups, h = (idx % groups) * 8;
  const int64_t stride = a.expert_stride;  // (the launcher sets it: hidden or more)
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (a.expert_out) {
    for (int j = 0; j < a.top_k; ++j) {
      const int64_t q = t * a.top_k + j;
      if (a.pair_pos[q] < 0) continue;  // a pair of another rank's expert, or a bad id
      const uint4 v = *reinterpret_cast<const uint4*>(a.expert_out + int64_t(a.pair_pos[q]) * stride + h);
      add_bf16x8(acc, v, a.topk_weights[q]);
    }
  } else {
    const float4* s = reinterpret_cast<const float4*>(a.accumulated + t * stride + h);
    const float4 lo = s[0], hi = s[1];
    acc[0] = lo.x, acc[1] = lo.y, acc[2] = lo.z, acc[3] = lo.w, acc[4] = hi.x, acc[5] = hi.y, acc[6] = hi.z, acc[7] = hi.w;
  }
  if (a.shared_out) add_bf16x8(acc, *reinterpret_cast<const uint4*>(a.shared_out + t * a.hidden + h), 1.f);
  if (a.shared_row0)  // the same addition, from the shared expert's row among the routed ones
    add_bf16x8(acc, *reinterpret_cast<const uint4*>(a.expert_out + (int64_t(*a.shared_row0) + t) * stride + h), 1.f);
  if (a.status) {  // a NaN/Inf stays in its token's row (no arithmetic mixes tokens); it is reported
    bool finite = true;
#pragma unroll
    for (int i = 0; i < 8; ++i) finite &= isfinite(acc[i]);
    if (!finite) {
      atomicOr(a.status, kStatusNonFiniteOutput);
      atomicMax(a.status + 1, INT32_MAX - static_cast<int32_t>(t));
    }
  }
  if (a.out_f32) {
    float4* o = reinterpret_cast<float4*>(a.out_f32 + t * a.hidden + h);
    o[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    o[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    return;
  }
  uint4 o;
  __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) ob[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  *reinterpret_cast<uint4*>(a.out + t * a.hidden + h) = o;
}

}  // namespace

void launch_finalize(const FinalizeArgs& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.hidden > 0 && a.hidden % 8 == 0, "finalize: hidden = " << a.hidden << " is not a positive multiple of 8");
  FP4MOE_CHECK((a.expert_out != nullptr) != (a.accumulated != nullptr),
               "finalize: exactly one of expert_out (split) and accumulated (fused) must be given");
  FP4MOE_CHECK((a.out != nullptr) != (a.out_f32 != nullptr), "finalize: exactly one of out and out_f32 must be given");
  FP4MOE_CHECK(a.accumulated || (a.pair_pos && a.topk_weights), "finalize: a device pointer is null");
  FP4MOE_CHECK(!a.shared_row0 || (a.expert_out && !a.shared_out),
               "finalize: shared_row0 reads the shared expert's rows from expert_out (split mode), instead of shared_out");
  FP4MOE_CHECK(a.expert_stride == 0 || (a.expert_stride >= a.hidden && a.expert_stride % 8 == 0),
               "finalize: expert_stride = " << a.expert_stride << " is neither 0 nor a multiple of 8 of at least hidden = "
                                            << a.hidden);
  if (a.tokens == 0) return;
  FinalizeArgs b = a;
  if (!b.expert_stride) b.expert_stride = b.hidden;
  const int64_t n = a.tokens * (a.hidden / 8);
  launch_dependent(finalize_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, b);
  FP4MOE_CHECK_LAUNCH("finalize_kernel");
}

}  // namespace fp4moe::kernels
