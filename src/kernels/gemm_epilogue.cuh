// The grouped GEMM's epilogue: accumulator fragments scaled (and, on the
// biased instances, their rows' biases added) into an fp32 staging tile in
// shared memory, then written as whole rows: stored (bf16), SwiGLU of gate and
// up rows (GEMM1), or weighted and added into each token's fp32 sum (the
// fused finalize). Both kernels use it.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "format/prepared_layout.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/gemm_scheduler.cuh"
#include "kernels/grouped_gemm_params.hpp"

namespace fp4moe::kernels::detail {

// The biases of a thread's two fragment rows f and f+8 (biased instances;
// `row` is f's feature): loaded once per item, so that the write loops read
// none (in the loops, 16 bias loads per piece made the widest tiles spill).
template <EpilogueInstance Epi>
__device__ __forceinline__ float2 fragment_row_biases(const KernelParams& p, int expert, int64_t row) {
  if constexpr (Epi == EpilogueInstance::biased) {
    const float* b = p.bias + int64_t(expert) * p.n + row;
    return make_float2(__ldg(b), __ldg(b + 8));
  } else {
    return make_float2(0.f, 0.f);
  }
}

// Accumulator fragment (rows f and f+8, token columns tok and tok+1 of an n8
// tile; mma.sync's C layout, which is also wgmma's per warp) -> the fp32
// staging tile [token][row], times the expert's dequantization scale, plus
// (biased instances) each row's bias: fl(fl(acc * gs) + bias), never fused.
template <EpilogueInstance Epi = EpilogueInstance::plain>
__device__ __forceinline__ void stage_fragment(float* epi, int stride, int f, int tok, const float v[4], float gs,
                                               float2 bias = {}) {
  const auto out = [&](float x, float b) {
    if constexpr (Epi == EpilogueInstance::biased) return __fadd_rn(__fmul_rn(x, gs), b);
    else return x * gs;
  };
  epi[tok * stride + f] = out(v[0], bias.x);
  epi[(tok + 1) * stride + f] = out(v[1], bias.x);
  epi[tok * stride + f + 8] = out(v[2], bias.y);
  epi[(tok + 1) * stride + f + 8] = out(v[3], bias.y);
}

// The dequantization scale of weight row `row` (its 16-row group picks a part).
__device__ __forceinline__ float dequant_scale_of(const KernelParams& p, int expert, int64_t row) {
  return p.dequant_scale[expert * p.scale_parts + (row / 16) % p.scale_parts];
}

// Two floats as bf16x2 bits.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// One 16-byte global store. Written as a uint4 through a cast bf16 pointer,
// nvcc emitted four 4-byte stores here (Nsight Compute: 73% of the kernel's L2
// store sectors excessive); the vector store is spelled out.
__device__ __forceinline__ void store_16_bytes(__nv_bfloat16* dst, const uint32_t (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

// The SwiGLU of gate g and the up value at column u of `er`: silu(g) * up, or
// (biased instances, when the launch asks for it) gpt-oss's clamped form
// g' sigmoid(alpha g') (up' + 1). The plain form reads up after its division:
// read first, it stays live across the division's slow path, and the cluster
// tile, at its register cap, spilled.
template <EpilogueInstance Epi>
__device__ __forceinline__ float swiglu(const KernelParams& p, float g, const float* er, int u) {
  if (Epi == EpilogueInstance::biased && p.clamped_swiglu) {
    // std::min and std::clamp's comparisons (the reference's): a NaN stays NaN, where fminf would drop it
    const float limit = p.swiglu_limit, v = er[u];
    g = limit < g ? limit : g;
    const float up = v < -limit ? -limit : limit < v ? limit : v;
    return g / (1.f + __expf(-p.swiglu_alpha * g)) * (up + 1.f);
  }
  return g / (1.f + __expf(-g)) * er[u];
}

// Writes a staged fp32 tile of `Rows` weight rows (output features col0..)
// for the item's tokens, with `Threads` threads numbered by `tid`: whole
// 16-byte rows to y (store), the SwiGLU of gate and up (interleaved every 16
// rows, pack::kGateUpInterleaveRows), or topk-weighted fp32 atomics into the
// token's output (scatter_add). The staged values already hold the biases
// (stage_fragment; docs/kernels.md states the arithmetic).
template <int Rows, int Threads, EpilogueInstance Epi = EpilogueInstance::plain>
__device__ __forceinline__ void write_staged_tile(const KernelParams& p, const WorkItem& w, const float* epi, int stride,
                                                  int64_t col0, int tid) {
  if (p.epilogue == int(GemmEpilogue::swiglu)) {
    constexpr int kPieces = Rows / 2 / 8;  // 8 output columns per piece
    constexpr int kG = pack::kGateUpInterleaveRows;
    const int64_t ld = p.n / 2;
#pragma unroll 1
    for (int i = tid; i < w.rows * kPieces; i += Threads) {
      const int r = i / kPieces, j0 = (i % kPieces) * 8;
      const int g = (j0 / kG) * 2 * kG + j0 % kG;  // gate row of output column j0; its up row is g + kG
      const float* er = epi + r * stride;
      uint32_t o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int c = g + 2 * q;
        o[q] = bf16x2_bits(swiglu<Epi>(p, er[c], er, c + kG), swiglu<Epi>(p, er[c + 1], er, c + kG + 1));
      }
      store_16_bytes(p.y + int64_t(w.row0 + r) * ld + col0 / 2 + j0, o);
    }
  } else if (p.epilogue == int(GemmEpilogue::scatter_add)) {
    constexpr int kPieces = Rows / 4;  // 4 columns per piece
#pragma unroll 1
    for (int i = tid; i < w.rows * kPieces; i += Threads) {
      const int r = i / kPieces, c0 = (i % kPieces) * 4;
      const int32_t pair = p.permuted_pair[w.row0 + r];
      const float wt = p.topk_weights[pair];
      float* dst = p.accumulate + int64_t(pair / p.top_k) * p.n + col0 + c0;
      const float* e = epi + r * stride + c0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      // one 16-byte vector reduction (sm_90+): a quarter of the atomic operations
      atomicAdd(reinterpret_cast<float4*>(dst), make_float4(wt * e[0], wt * e[1], wt * e[2], wt * e[3]));
#else
#pragma unroll
      for (int q = 0; q < 4; ++q) atomicAdd(dst + q, wt * e[q]);
#endif
    }
  } else {
    constexpr int kPieces = Rows / 8;
#pragma unroll 1
    for (int i = tid; i < w.rows * kPieces; i += Threads) {
      const int r = i / kPieces, c0 = (i % kPieces) * 8;
      const float* er = epi + r * stride + c0;
      uint32_t o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) o[q] = bf16x2_bits(er[2 * q], er[2 * q + 1]);
      store_16_bytes(p.y + int64_t(w.row0 + r) * p.n + col0 + c0, o);
    }
  }
}

}  // namespace fp4moe::kernels::detail
