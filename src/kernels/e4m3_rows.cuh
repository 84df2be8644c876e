// The FP8 activation arithmetic on the device, said once for the row copy
// (quantize_rows_fp8.cu) and GEMM1's epilogue (ws_chunk_quantize.cuh): the
// amax of bf16 values, the scale amax / 448 (1 for an all-zero row), each
// value divided by it (IEEE division, __fdiv_rn) and rounded to e4m3 (round
// to nearest even, saturating at 448: cvt.rn.satfinite), so that every code
// equals the host's quantize_rows_e4m3. A NaN is ignored by the amax (fmaxf)
// and stays NaN in its place; an Inf makes its row's scale Inf.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace fp4moe::kernels::detail {

inline constexpr float kE4m3Largest = 448.0f;

// The amax of 8 bf16 values (one 16-byte piece).
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

__device__ __forceinline__ float e4m3_scale_of_amax(float amax) {
  return amax > 0.f ? __fdiv_rn(amax, kE4m3Largest) : 1.f;
}

// The 8 codes of a piece, code j in byte j of a 64-bit word.
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

// One warp quantizes one row: `pieces` pieces of 8 bf16 at src (read from L2:
// other CTAs may just have written them) to `out_pieces` pieces of 8 codes at
// dst (zeros past the row), its scale to *scale. A lane stores its own 8
// bytes (a warp's stores are still 256 contiguous bytes): it runs inside a
// GEMM's consumer, at its register cap, where a pairing shuffle cost spills.
__device__ __forceinline__ void quantize_row_e4m3_by_warp(const uint4* src, int pieces, int out_pieces, uint2* dst,
                                                         float* scale, int lane) {
  float m = 0.f;
#pragma unroll 1
  for (int c = lane; c < pieces; c += 32) m = fmaxf(m, amax8(__ldcg(src + c)));
#pragma unroll
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  const float s = e4m3_scale_of_amax(m);
  if (lane == 0) *scale = s;
#pragma unroll 1
  for (int c = lane; c < out_pieces; c += 32) {
    const uint64_t codes = c < pieces ? codes8(__ldcg(src + c), s) : 0;
    dst[c] = make_uint2(uint32_t(codes), uint32_t(codes >> 32));
  }
}

}  // namespace fp4moe::kernels::detail
