// The FP8 warpgroup MMA's A fragment from the prepared FP4 layout, unchanged
// (docs/fp8.md, "The K loop"). wgmma.m64nNk32 with 8-bit A in registers wants,
// per lane l of a warp's 16 rows (c = l % 4, r = l / 4):
//   reg 0: row r,   k 4c..4c+3        reg 1: row r+8, k 4c..4c+3
//   reg 2: row r,   k 16+4c..16+4c+3  reg 3: row r+8, k 16+4c..16+4c+3
// (CuTe's GMMA::ALayout_64x32). The prepared word of a k16 step holds, for the
// same lane, k {2c, 2c+1, 2c+8, 2c+9} of rows r and r+8 (gemm_pack.hpp). The
// sum over K does not care which k sits where as long as both operands agree:
// the FP8 fragment takes the prepared codes as they are, and the activations
// are stored with each 16-wide group of K permuted to match, position
// p = 4c + 2a + b holding k = 2c + 8a + b. Registers 0 and 1 come from the
// k32 step's first prepared word, 2 and 3 from its second.
#pragma once
#include <cstdint>

#include "common/host_device.hpp"
#include "format/gemm_pack.hpp"

namespace fp4moe {

// Within a 16-wide group of K: the position an activation of k is stored at,
// and the k a position holds.
FP4MOE_HD constexpr int fp8_k_position(int k) { return 4 * ((k % 8) / 2) + 2 * (k / 8) + k % 2; }
FP4MOE_HD constexpr int fp8_k_at(int p) { return 2 * (p / 4) + 8 * ((p % 4) / 2) + p % 2; }

// __byte_perm on the host: byte i of the result is byte (s >> 4i) & 7 of
// {lo, hi} (the sign-replicating mode, selector bit 3, is not used).
FP4MOE_HD uint32_t byte_perm(uint32_t lo, uint32_t hi, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(lo, hi, s);
#else
  const uint64_t both = uint64_t(lo) | uint64_t(hi) << 32;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((both >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// Bits {sign, m2, m1, m0} of the code at (reg, half) of a prepared word, as a 4-bit value.
template <int Reg, int Half>
FP4MOE_HD constexpr uint32_t prepared_code_of(uint32_t word) {
  constexpr pack::CodeBits b = pack::kCodeBits[Reg][Half];
  return ((word >> b.sign) & 1u) << 3 | ((word >> b.m2) & 1u) << 2 | ((word >> b.m1) & 1u) << 1 | ((word >> b.m0) & 1u);
}

// One FP8 A register: the e4m3 bytes of the four codes of row r (RowHalf 0)
// or r+8 (RowHalf 1) in a prepared word, byte v holding k = 2c + (v & 1) + 8 (v >> 1),
// through the magnitude table of the block's shift (e4m3_fold_table): one
// byte permute for the magnitudes, the signs moved to bit 7 of each byte.
template <int RowHalf>
FP4MOE_HD uint32_t fp8_a_register(uint32_t word, uint32_t tab_lo, uint32_t tab_hi) {
  const uint32_t c0 = prepared_code_of<RowHalf, 0>(word), c1 = prepared_code_of<RowHalf, 1>(word);
  const uint32_t c2 = prepared_code_of<RowHalf + 2, 0>(word), c3 = prepared_code_of<RowHalf + 2, 1>(word);
  const uint32_t codes = c0 | c1 << 4 | c2 << 8 | c3 << 12;
  const uint32_t mags = byte_perm(tab_lo, tab_hi, codes & 0x7777u);
  const uint32_t signs = (c0 >> 3) << 7 | (c1 >> 3) << 15 | (c2 >> 3) << 23 | (c3 >> 3) << 31;
  return mags | signs;
}

}  // namespace fp4moe
