// A block per row (at decode sizes a handful of rows: a warp per row left the
// whole pass to one SM, its loads and divisions one after another), 8 bf16
// (16 bytes) per thread and step: the amax of the row (or of each 128
// columns, a half warp's step), the scale amax / 448, then each
// value divided by it and rounded to e4m3 (round to nearest even, saturating
// at 448: cvt.rn.satfinite, as the host's e4m3_encode). IEEE divisions
// (__fdiv_rn) so the bits equal the host's. Two neighbour lanes hold the two
// halves of a 16-byte store; the even lane takes the odd one's codes (one
// shuffle) and stores both. Non-finite input (the host refuses it): a NaN is
// ignored by the amax and stays NaN in its place; an Inf makes its row's (or
// block's) scale Inf, so its finite neighbours become 0 and it NaN.
#include <cuda_fp8.h>

#include "common/cuda_check.hpp"
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/quantize_rows_fp8.hpp"

namespace fp4moe::kernels {
namespace {

constexpr float kE4m3Largest = 448.0f;

__device__ __forceinline__ float amax8(const uint4& v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  return m;
}

// The 8 codes of 8 consecutive values, code j in byte j of a 64-bit word.
__device__ __forceinline__ uint64_t codes8(const uint4& v, float scale) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  uint64_t out = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(f.x, scale), __fdiv_rn(f.y, scale)), __NV_SATFINITE, __NV_E4M3);
    out |= uint64_t(two) << (16 * i);
  }
  return out;
}

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) quantize_rows_fp8_kernel(const uint4* __restrict__ x,
                                                                     const int32_t* __restrict__ rows, int pieces,
                                                                     int out_pieces, int group, uint8_t* __restrict__ codes,
                                                                     float* __restrict__ scales) {
  wait_for_prior_grid();
  allow_dependent_grids();
  __shared__ float warp_amax[kWarps];
  const int64_t p = blockIdx.x;  // one block per row
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint4* src = x + (rows ? int64_t(rows[p]) : p) * pieces;
  uint4* dst = reinterpret_cast<uint4*>(codes + p * int64_t(out_pieces) * 8);  // 16 codes per uint4: a piece pair
  const int groups = group ? (pieces * 8 + group - 1) / group : 1;
  float row_scale = 1.f;
  if (!group) {
    float m = 0.f;
    for (int c = threadIdx.x; c < pieces; c += kThreads) m = fmaxf(m, amax8(src[c]));
#pragma unroll
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if (lane == 0) warp_amax[warp] = m;
    __syncthreads();
    m = warp_amax[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, warp_amax[w]);
    row_scale = m > 0.f ? __fdiv_rn(m, kE4m3Largest) : 1.f;
    if (threadIdx.x == 0) scales[p] = row_scale;
  }
  // Each warp takes 32 consecutive pieces per step (256 values, two groups of
  // 128); all its lanes run every step (the shuffles)
  for (int base = warp * 32; base < out_pieces; base += kThreads) {
    const int c = base + lane;
    const uint4 v = c < pieces ? src[c] : make_uint4(0, 0, 0, 0);
    float scale = row_scale;
    if (group) {  // a half warp's 16 pieces are one group of 128
      float m = amax8(v);
#pragma unroll
      for (int o = 8; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
      scale = m > 0.f ? __fdiv_rn(m, kE4m3Largest) : 1.f;
      const int g = c / 16;
      if (lane % 16 == 0 && g < groups) scales[p * groups + g] = scale;
    }
    const uint64_t own = c < pieces ? codes8(v, scale) : 0;
    const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, own, 1);
    if (lane % 2 == 0 && c < out_pieces)
      dst[c / 2] = make_uint4(uint32_t(own), uint32_t(own >> 32), uint32_t(other), uint32_t(other >> 32));
  }
}

}  // namespace

void launch_quantize_rows_fp8(const QuantizeRowsFp8Args& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.x && a.codes && a.scales, "quantize_rows_fp8: x, codes and scales must be device pointers, got null");
  FP4MOE_CHECK(a.cols > 0 && a.cols % 16 == 0, "quantize_rows_fp8: cols = " << a.cols << " must be a positive multiple of 16");
  FP4MOE_CHECK(a.count >= 0, "quantize_rows_fp8: count = " << a.count << " is negative");
  FP4MOE_CHECK(a.group == 0 || a.group == 128, "quantize_rows_fp8: group = " << a.group << " is not 0 (per row) or 128");
  const int64_t out_cols = a.out_cols ? a.out_cols : a.cols;
  FP4MOE_CHECK(out_cols >= a.cols && out_cols % 16 == 0,
               "quantize_rows_fp8: out_cols = " << a.out_cols << " must be a multiple of 16 and at least cols = " << a.cols);
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.codes) % 16 == 0,
               "quantize_rows_fp8: x and codes must be 16-byte aligned (16 bytes per load and store)");
  if (a.count == 0) return;
  FP4MOE_CHECK(out_cols / 8 <= INT32_MAX, "quantize_rows_fp8: out_cols = " << out_cols << " is too wide");
  FP4MOE_CHECK(a.count <= INT32_MAX, "quantize_rows_fp8: count = " << a.count << " rows is more than a grid holds");
  launch_dependent(quantize_rows_fp8_kernel, static_cast<unsigned>(a.count), kThreads, 0, stream,
                   reinterpret_cast<const uint4*>(a.x), a.rows, static_cast<int>(a.cols / 8),
                   static_cast<int>(out_cols / 8), static_cast<int>(a.group), a.codes, a.scales);
  FP4MOE_CHECK_LAUNCH("quantize_rows_fp8");
}

}  // namespace fp4moe::kernels
