// FP4 weights to MMA operands in registers: one lane's A fragment of a
// 16-row group for one k16 step (bf16), from its 16-byte weight and scale
// pieces of the prepared layout (format/gemm_pack.hpp), which both kernels'
// mainloops use; or for one k32 step (e4m3) from the FP8 layout
// (format/fp8_fragment.hpp), which the FP8 tiles' mainloop uses.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "format/fp8_fragment.hpp"
#include "format/gemm_pack.hpp"

namespace fp4moe::kernels::detail {

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

// One lane's e4m3 A fragment for k32 step j (0, 1) of a 64-k granule: words
// 2j (row r) and 2j + 1 (row r + 8) of its weight piece, each through its
// row's fold table, whose codes are bytes 0 and 1 of the scale piece's word
// for the step's first k16 step (step8, even, in the k128 scale granule).
// With rounded tables (NVFP4, fp8::rounded_fold_table: a block is one k16
// step) registers 2 and 3, the step's second k16 half, take theirs from bytes
// 2 and 3. (A kernel instance of its own: a branch here spilled registers.)
template <bool Rounded>
__device__ __forceinline__ void fp8_fragment(const uint4& wq, const uint4& sq, int j, int step8, uint32_t a[4]) {
  const uint32_t w_r = j == 0 ? wq.x : wq.z, w_r8 = j == 0 ? wq.y : wq.w;
  const uint32_t sword = (step8 / 2) == 0 ? sq.x : (step8 / 2) == 1 ? sq.y : (step8 / 2) == 2 ? sq.z : sq.w;
  uint32_t lo, hi;
  if constexpr (Rounded) {
    fp8::rounded_fold_table(sword & 0xFFu, lo, hi);
    a[0] = fp8::low_register(w_r, lo, hi);
    fp8::rounded_fold_table((sword >> 16) & 0xFFu, lo, hi);
    a[2] = fp8::high_register(w_r, lo, hi);
    fp8::rounded_fold_table((sword >> 8) & 0xFFu, lo, hi);
    a[1] = fp8::low_register(w_r8, lo, hi);
    fp8::rounded_fold_table(sword >> 24, lo, hi);
    a[3] = fp8::high_register(w_r8, lo, hi);
    return;
  }
  fp8::fold_table(sword & 0xFFu, lo, hi);
  a[0] = fp8::low_register(w_r, lo, hi);
  a[2] = fp8::high_register(w_r, lo, hi);
  fp8::fold_table((sword >> 8) & 0xFFu, lo, hi);
  a[1] = fp8::low_register(w_r8, lo, hi);
  a[3] = fp8::high_register(w_r8, lo, hi);
}

// The 16-byte weight and scale pieces of `lane` for 64-k granule kk of the
// 16-row group rg of a stage of bk = BK: weights [rg][BK/64][512 bytes], scales
// [rg][BK/128][128 bytes] (a scale granule covers two weight granules).
template <int BK>
__device__ __forceinline__ void load_granule(const uint8_t* weights, const uint8_t* scales, int rg, int kk, int lane,
                                             uint4& wq, uint4& sq) {
  wq = *reinterpret_cast<const uint4*>(weights + (rg * (BK / 64) + kk) * pack::kWeightGranuleBytes + lane * 16);
  sq = *reinterpret_cast<const uint4*>(scales + (rg * (BK / 128) + kk / 2) * pack::kScaleGranuleBytes + (lane / 4) * 16);
}

}  // namespace fp4moe::kernels::detail
