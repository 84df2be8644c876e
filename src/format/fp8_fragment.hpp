// The FP8 (W4A8) prepared weight layout and the K loop's A fragment from it
// (docs/fp8.md, "The K loop"). Host and device compile it: the prepare step
// packs with these functions and the kernel unpacks with them.
//
// wgmma.m64nNk32 with 8-bit A in registers wants, per lane l of a warp's 16
// rows (c = l % 4, r = l / 4), four registers of four e4m3 bytes:
//   reg 0: row r,   k 4c..4c+3        reg 1: row r+8, k 4c..4c+3
//   reg 2: row r,   k 16+4c..16+4c+3  reg 3: row r+8, k 16+4c..16+4c+3
// (CuTe's GMMA::ALayout_64x32). The FP8 layout keeps the FP4 layout's
// granules ([E][N/16][K/64][32 lanes][16 bytes], format/gemm_pack.hpp) and
// puts in a lane's 16 bytes, per k32 step j of the granule and row half h
// (row r + 8h), one word (word 2j + h) holding the 8 codes of registers h and
// h + 2: the magnitudes of reg h's four codes as nibbles 0..3 and of reg
// h+2's as nibbles 4..7, and the signs in the nibbles' spare top bits where
// one shift puts them on bit 7 of each byte: reg h's at bits 7, 15, 23, 31,
// reg h+2's at bits 3, 11, 19, 27. Each register is then one byte permute of
// an 8-entry magnitude table plus one mask-and-or for the signs.
//
// The table is the block's e2m1 magnitudes as e4m3 times 2^s, s = the block
// exponent less its row's (the row's power of two goes to the epilogue). For
// s in [kFp8TableMinShift, kFp8TableMaxShift] every nonzero entry is a normal
// e4m3, so the shift is an add to the exponent field of each byte: one
// multiply-add per table word from the stored code u = s - kFp8TableMinShift.
#pragma once
#include <cstdint>

#include "common/host_device.hpp"
#include "format/gemm_pack.hpp"

namespace fp4moe::fp8 {

inline constexpr int kFp8TableMinShift = -5;  // 0.5 x 2^-5 = 2^-6, e4m3's smallest normal
inline constexpr int kFp8TableMaxShift = 6;   // 6 x 2^6 = 384 <= 448
inline constexpr int kFp8TableCodes = kFp8TableMaxShift - kFp8TableMinShift + 1;

// The e4m3 magnitudes of e2m1 codes 0..3 (lo) and 4..7 (hi) at shift
// s = u + kFp8TableMinShift: at u = 0 they are 0, 2^-6, 2^-5, 1.5 x 2^-5 and
// 2^-4, 1.5 x 2^-4, 2^-3, 1.5 x 2^-3 (bits 0x00 0x08 0x10 0x14, 0x18 0x1C 0x20
// 0x24); each step of u adds 1 to every nonzero exponent field (8 per byte).
FP4MOE_HD constexpr void fold_table(uint32_t u, uint32_t& lo, uint32_t& hi) {
  lo = 0x14100800u + u * 0x08080800u;
  hi = 0x24201C18u + u * 0x08080808u;
}

// The fold's arithmetic, for the host's prepare and the GPU's alike. A prepared
// MXFP4 scale byte's exponent: 2^((b >> 3) - bias), no mantissa.
FP4MOE_HD constexpr int mxfp4_block_exponent(uint8_t b) { return (b >> 3) - pack::kMxfp4ScaleBias; }
// A row's power of two, from its largest nonzero block's exponent (the
// row_largest of an all-zero row is never used: 0): that block lands on the top shift.
FP4MOE_HD constexpr int row_exponent(int row_largest, bool any_nonzero) {
  return any_nonzero ? row_largest - kFp8TableMaxShift : 0;
}
// A nonzero block's fold code u; below 0 the block lies under the table's range.
FP4MOE_HD constexpr int fold_code(int block_exponent, int row_exp) { return block_exponent - row_exp - kFp8TableMinShift; }

// __byte_perm on the host: byte i of the result is byte (s >> 4i) & 7 of
// {lo, hi} (the sign-replicating mode, selector bit 3, is never set here).
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

// Registers h and h + 2 of a k32 step from word 2j + h and its row's table.
FP4MOE_HD uint32_t low_register(uint32_t word, uint32_t lo, uint32_t hi) {
  return byte_perm(lo, hi, word & 0x7777u) | (word & 0x80808080u);
}
FP4MOE_HD uint32_t high_register(uint32_t word, uint32_t lo, uint32_t hi) {
  return byte_perm(lo, hi, (word >> 16) & 0x7777u) | ((word << 4) & 0x80808080u);
}

// Where code i (0..7: registers h's four, then h + 2's) of a word sits.
FP4MOE_HD constexpr int magnitude_bit(int i) { return 4 * i; }
FP4MOE_HD constexpr int sign_bit(int i) { return i < 4 ? 8 * i + 7 : 8 * (i - 4) + 3; }
FP4MOE_HD constexpr uint32_t place_code(uint32_t word, int i, uint8_t code) {
  return word | uint32_t(code & 7u) << magnitude_bit(i) | uint32_t((code >> 3) & 1u) << sign_bit(i);
}

// W[row, col] in the FP8 layout: the byte offset of its word inside an
// expert's weights and its code index in the word.
struct Fp8CodeSlot {
  int64_t byte;
  int index;
};
FP4MOE_HD constexpr Fp8CodeSlot fp8_code_slot(int64_t k, int64_t row, int64_t col) {
  const int64_t rr = row % 16, kin = col % 64, kj = kin % 32;
  const int lane = int((rr % 8) * 4 + (kj % 16) / 4);
  const int word = int(2 * (kin / 32) + rr / 8);
  return {((row / 16 * (k / 64) + col / 64) * pack::kLanes + lane) * 16 + word * 4, int(4 * (kj / 16) + kj % 4)};
}

}  // namespace fp4moe::fp8
