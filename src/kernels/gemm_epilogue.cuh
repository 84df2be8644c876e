// The grouped GEMM's epilogue: accumulator fragments scaled into an fp32
// staging tile in shared memory (on the biased instances a pass over it then
// adds the rows' biases, and on GEMM1 computes the SwiGLU there), then written
// as whole rows: stored (bf16), SwiGLU of gate and up rows (GEMM1), or
// weighted and added into each token's fp32 sum (the fused finalize). Both
// kernels use it.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "format/prepared_layout.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/gemm_scheduler.cuh"
#include "kernels/grouped_gemm_params.hpp"

namespace fp4moe::kernels::detail {

// Accumulator fragment (rows f and f+8, token columns tok and tok+1 of an n8
// tile; mma.sync's C layout, which is also wgmma's per warp) -> the fp32
// staging tile [token][row], times the expert's dequantization scale.
__device__ __forceinline__ void stage_fragment(float* epi, int stride, int f, int tok, const float v[4], float gs) {
  epi[tok * stride + f] = v[0] * gs;
  epi[(tok + 1) * stride + f] = v[1] * gs;
  epi[tok * stride + f + 8] = v[2] * gs;
  epi[(tok + 1) * stride + f + 8] = v[3] * gs;
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

// The SwiGLU of gate g and the up value at column u of `er`: silu(g) * up.
// It reads up after the division: read first, it stays live across the
// division's slow path, and the cluster tile, at its register cap, spilled.
__device__ __forceinline__ float swiglu(float g, const float* er, int u) { return g / (1.f + __expf(-g)) * er[u]; }

// The SwiGLU of the biased instances: gpt-oss's clamped form,
// g' sigmoid(alpha g') (up' + 1), when the launch asks for it
// (p.clamped_swiglu), else silu(g) * up; `up()` is read after the division,
// as swiglu's.
template <class Up>
__device__ __forceinline__ float biased_swiglu(const KernelParams& p, float g, Up up) {
  if (p.clamped_swiglu) {
    // std::min and std::clamp's comparisons (the reference's): a NaN stays NaN, where fminf would drop it
    const float limit = p.swiglu_limit;
    g = limit < g ? limit : g;
    const float u = up();
    const float uc = u < -limit ? -limit : limit < u ? limit : u;
    return g / (1.f + __expf(-p.swiglu_alpha * g)) * (uc + 1.f);
  }
  return g / (1.f + __expf(-g)) * up();
}

// The thread's index among `Threads`, read from %tid.x where it is used: the
// compiler does not hoist a volatile read, so nothing derived from it stays
// live across the K loop (hoisted there, the bias pass's indices spilled the
// widest tiles, whose accumulators fill the register file).
template <int Threads>
__device__ __forceinline__ int thread_index_here() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t % Threads;
}

// The biased instances' pass between staging and writing: each staged value
// gets its row's bias, fl(fl(acc * gs) + bias), and where SwigluInPass (a
// tile's GemmTile::swiglu_in_bias_pass) GEMM1's SwiGLU of each gate and up
// pair is computed here too and left in the gate's place, for the write loop
// to pack. A pass of its own: the bias loads in the staging loop, and the
// clamped form in the write loop of some tiles, spilled registers there, where
// the accumulators of the passes still to stage are live.
template <int Rows, int Threads, bool SwigluInPass>
__device__ __forceinline__ void bias_staged_tile(const KernelParams& p, const WorkItem& w, float* epi, int stride,
                                                 int64_t col0) {
  const float* bias = p.bias + int64_t(w.expert) * p.n + col0;
  if (SwigluInPass && p.epilogue == int(GemmEpilogue::swiglu)) {
    constexpr int kG = pack::kGateUpInterleaveRows, kOut = Rows / 2;
#pragma unroll 1
    for (int i = thread_index_here<Threads>(); i < w.rows * kOut; i += Threads) {
      const int r = i / kOut, j = i % kOut;
      const int g = (j / kG) * 2 * kG + j % kG;  // gate row of output column j; its up row is g + kG
      float* er = epi + r * stride;
      er[g] = biased_swiglu(p, __fadd_rn(er[g], __ldg(bias + g)), [&] { return __fadd_rn(er[g + kG], __ldg(bias + g + kG)); });
    }
  } else if constexpr (Threads % Rows == 0) {
    // each thread one column, its bias loaded once, of every few rows (a loop
    // over columns too, where one is not needed, spilled the e4m3 bm128_nt128 tile)
    const int t = thread_index_here<Threads>(), c = t % Rows;
    const float b = __ldg(bias + c);
#pragma unroll 1
    for (int r = t / Rows; r < w.rows; r += Threads / Rows) epi[r * stride + c] = __fadd_rn(epi[r * stride + c], b);
  } else {
    static_assert(Rows % Threads == 0, "the threads sweep whole rows");
    const int t = thread_index_here<Threads>();
#pragma unroll 1
    for (int c = t; c < Rows; c += Threads) {
      const float b = __ldg(bias + c);
#pragma unroll 1
      for (int r = 0; r < w.rows; ++r) epi[r * stride + c] = __fadd_rn(epi[r * stride + c], b);
    }
  }
}

// Writes a staged fp32 tile of `Rows` weight rows (output features col0..)
// for the item's tokens, with `Threads` threads numbered by `tid`: whole
// 16-byte rows to y (store), the SwiGLU of gate and up (interleaved every 16
// rows, pack::kGateUpInterleaveRows), or topk-weighted fp32 atomics into the
// token's output (scatter_add). The biased instance first runs its pass over
// the tile (bias_staged_tile; docs/kernels.md states the arithmetic), then
// `sync()`: the threads that staged the tile wait for each other. Where
// BoundN (the tile takes tails), a 64-row group at or past N is neither biased
// nor written: a row count of zero, and the bias pass, which loads a column's
// bias before its rows, pointed at the last group inside N (the expert's
// biases end at N). (Rather than a return, or a test around the pass or its
// loads: each spilled registers on some of the widest biased tiles.)
template <int Rows, int Threads, EpilogueInstance Epi, bool SwigluInBiasPass, bool BoundN, class Sync>
__device__ __forceinline__ void write_staged_tile(const KernelParams& p, const WorkItem& item, float* epi, int stride,
                                                  int64_t col0, int tid, Sync sync) {
  WorkItem w = item;
  if (BoundN && col0 >= p.n) w.rows = 0;
  if constexpr (Epi == EpilogueInstance::biased) {
    bias_staged_tile<Rows, Threads, SwigluInBiasPass>(p, w, epi, stride, BoundN ? min(col0, p.n - Rows) : col0);
    sync();
  }
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
        if constexpr (Epi == EpilogueInstance::biased && SwigluInBiasPass) o[q] = bf16x2_bits(er[c], er[c + 1]);
        else if constexpr (Epi == EpilogueInstance::biased)
          o[q] = bf16x2_bits(biased_swiglu(p, er[c], [&] { return er[c + kG]; }),
                             biased_swiglu(p, er[c + 1], [&] { return er[c + kG + 1]; }));
        else o[q] = bf16x2_bits(swiglu(er[c], er, c + kG), swiglu(er[c + 1], er, c + kG + 1));
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
