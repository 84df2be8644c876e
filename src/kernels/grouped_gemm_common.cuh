// What the two grouped-GEMM kernels share: their parameters, the dequantization
// of one A fragment, the device-side work schedule and the epilogue that writes
// a staged fp32 tile (store, SwiGLU or weighted scatter-add).
//   fp4_grouped_gemm.cu      every thread loads and multiplies (sm_80, sm_90a, sm_120a)
//   fp4_grouped_gemm_ws_sm90.cu     a producer warpgroup loads, consumer warpgroups multiply (sm_90a)
#pragma once
#include <cuda_bf16.h>

#include <array>
#include <cstdint>
#include <utility>

#include "format/gemm_pack.hpp"
#include "format/prepared_layout.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/grouped_gemm_params.hpp"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

// One entry per tile of plan::kGemmTiles: Pick<I>::fn is tile I's kernel in
// this file, or null where the other kernel file instantiates it.
template <template <int> class Pick, int... I>
constexpr std::array<KernelFn, sizeof...(I)> tile_kernel_table(std::integer_sequence<int, I...>) {
  return {Pick<I>::fn...};
}
template <template <int> class Pick>
constexpr auto tile_kernel_table() {
  return tile_kernel_table<Pick>(std::make_integer_sequence<int, plan::kNumGemmTiles>{});
}

// Prepared scale bytes Lo and Lo+1 of a 4-byte word (rows r and r+8 of one k16
// step) -> bf16 operands s * 2^116 in the low and high half: one byte permute and
// one multiply-add (gemm_pack.hpp); the multiplies pick a half (.H0_H0 / .H1_H1).
template <int Lo>
__device__ __forceinline__ __nv_bfloat162 scale_operands(uint32_t word, uint32_t add2) {
  const uint32_t v = pack::scale_operands(__byte_perm(word, 0u, 0x4040u | Lo | ((Lo + 1) << 8)), 0) + add2;
  return *reinterpret_cast<const __nv_bfloat162*>(&v);
}

__device__ __forceinline__ uint32_t scaled(uint32_t pattern, __nv_bfloat162 scale) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pattern), scale);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// One lane's A fragment for k16 step t of a 16-row group: the 8 codes of word
// t of its 16-byte weight load, times the block scales of step8 (its k16 step
// inside the k128 scale granule) of its two rows. mma.sync and wgmma take the
// same register fragment.
__device__ __forceinline__ void dequant_fragment(const uint4& wq, const uint4& sq, int t, int step8, uint32_t scale_add2,
                                                 uint32_t a[4]) {
  const uint32_t word = t == 0 ? wq.x : t == 1 ? wq.y : t == 2 ? wq.z : wq.w;
  const uint32_t sword = (step8 / 2) == 0 ? sq.x : (step8 / 2) == 1 ? sq.y : (step8 / 2) == 2 ? sq.z : sq.w;
  const __nv_bfloat162 sc = (step8 % 2) ? scale_operands<2>(sword, scale_add2) : scale_operands<0>(sword, scale_add2);
  const __nv_bfloat162 s_lo = __bfloat162bfloat162(__low2bfloat16(sc));
  const __nv_bfloat162 s_hi = __bfloat162bfloat162(__high2bfloat16(sc));
  uint32_t pat[4];
  pack::unpack_word(word, pat);
  a[0] = scaled(pat[0], s_lo);
  a[1] = scaled(pat[1], s_hi);
  a[2] = scaled(pat[2], s_lo);
  a[3] = scaled(pat[3], s_hi);
}

struct WorkItem {
  int expert, row0, rows, ntile;
};

// Token chunks per expert (plan::token_chunks: `Chunk` rows, the last up to
// `MaxRows`), prefix-summed into shared memory by one warp from the device-side
// expert offsets (no host read-back). Each lane takes kPerLane consecutive
// experts, and a pass loads all its offsets before it uses any: with one load
// per 32 experts inside the scan, E = 256 cost four dependent round trips to
// L2, and the whole CTA waits for the prefix (about a sixth of a one-token
// GEMM1 in Nsight Compute's stall samples).
// Where `routed_rows` is given, it receives expert_offsets[E].
template <int Chunk, int MaxRows>
__device__ __forceinline__ void build_chunk_prefix(int32_t* prefix, const int32_t* offsets, int num_experts, int lane,
                                                   int32_t* routed_rows = nullptr) {
  constexpr int kPerLane = 8;  // a pass covers 256 experts
  if (lane == 0) prefix[0] = 0;
  int carry = 0;
  for (int base = 0; base < num_experts; base += 32 * kPerLane) {
    const int e0 = base + lane * kPerLane;
    int32_t o[kPerLane + 1];
    // (L2 loads: a warp-specialized launch may read the offsets before it waits for the previous kernel)
#pragma unroll
    for (int j = 0; j <= kPerLane; ++j) o[j] = e0 + j <= num_experts ? __ldcg(offsets + e0 + j) : 0;
#pragma unroll
    for (int j = 0; j <= kPerLane; ++j)
      if (routed_rows && e0 + j == num_experts) *routed_rows = o[j];
    int c[kPerLane], sum = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      c[j] = e0 + j < num_experts ? static_cast<int>(plan::token_chunks(o[j + 1] - o[j], Chunk, MaxRows)) : 0;
      sum += c[j];
    }
    int incl = sum;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    int run = carry + incl - sum;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      run += c[j];
      if (e0 + j < num_experts) prefix[e0 + j + 1] = run;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
}

// Work item `index` of chunks x N tiles.
//   chunk-minor: the chunks of one expert and N tile run side by side (decode:
//     one chunk per expert, every expert's same N tile at once);
//   expert-major: all of one expert's (N tile, chunk) items run together, so its
//     weights and its tokens' activations stay in L2 (prefill, many chunks).
// Its expert, N tile and chunk come from the prefix in shared memory alone;
// work_item adds the rows from the expert offsets.
struct ItemTile {
  int expert, ntile, chunk;
};
template <bool ExpertMajor>
__device__ __forceinline__ ItemTile work_item_tile(int index, const int32_t* prefix, int num_experts, int total_chunks,
                                                   int n_tiles) {
  const int key = ExpertMajor ? index / n_tiles : index % total_chunks;
  int lo = 0, hi = num_experts;  // last e with prefix[e] <= key
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (prefix[mid] <= key) lo = mid; else hi = mid;
  }
  ItemTile t;
  t.expert = lo;
  if constexpr (ExpertMajor) {
    const int chunks = prefix[lo + 1] - prefix[lo];
    const int local = index - prefix[lo] * n_tiles;
    t.chunk = local % chunks;
    t.ntile = local / chunks;
  } else {
    t.chunk = key - prefix[lo];
    t.ntile = index / total_chunks;
  }
  return t;
}
template <int Chunk, bool ExpertMajor>
__device__ __forceinline__ WorkItem work_item(int index, const int32_t* prefix, const int32_t* offsets, int num_experts,
                                              int total_chunks, int n_tiles) {
  const ItemTile t = work_item_tile<ExpertMajor>(index, prefix, num_experts, total_chunks, n_tiles);
  WorkItem w;
  w.expert = t.expert;
  w.ntile = t.ntile;
  w.row0 = __ldcg(offsets + t.expert) + t.chunk * Chunk;
  // the expert's last chunk takes the rest (up to the tile's nt rows)
  w.rows = t.chunk + 1 < prefix[t.expert + 1] - prefix[t.expert] ? Chunk : __ldcg(offsets + t.expert + 1) - w.row0;
  return w;
}

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

// Writes a staged fp32 tile of `Rows` weight rows (output features col0..) for
// the item's tokens, with `Threads` threads numbered by `tid`: whole 16-byte
// rows to y (store), silu(gate) * up (SwiGLU, gate and up interleaved every 16
// rows, pack::kGateUpInterleaveRows), or topk-weighted fp32 atomics into the token's output (scatter_add).
template <int Rows, int Threads>
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
        const float g0 = er[g + 2 * q], g1 = er[g + 2 * q + 1];
        o[q] = bf16x2_bits(g0 / (1.f + __expf(-g0)) * er[g + kG + 2 * q], g1 / (1.f + __expf(-g1)) * er[g + kG + 2 * q + 1]);
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
