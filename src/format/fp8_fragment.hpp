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

// NVFP4 (an opt-in, LayerOptions::fp8_rounds_nvfp4): a block scale
// (1 + m/8) 2^E has a mantissa m that no shift carries. Its fold code keeps m
// in bits 4..6 over the shift's u (bits 0..3; MXFP4's m is 0), and its table
// holds the e2m1 magnitudes times 1 + m/8 rounded to e4m3 (to nearest, ties
// to even): exact for 0.5, 1, 2 and 4 (their mantissa is m), rounded for 1.5,
// 3 and 6 where 3 (8 + m) / 16 needs a fourth bit. Its top entry, 6 x 1.875
// rounded to 11, keeps e4m3 at shift 5 (352), not 6 (704).
inline constexpr int kFp8RoundedTableMaxShift = 5;

// The e4m3 byte of 1.5 (1 + m/8) x 2^-5 rounded: q/16 x 2^-5 with q = 3 (8 + m),
// 3 mantissa bits to nearest, ties to even.
constexpr uint32_t rounded_three_halves_byte(uint32_t m) {
  const uint32_t q = 3 * (8 + m);
  // [1.5, 2) x 2^-5: exponent field 2, mantissa (q - 16) / 2; [2, 4): field 3, (q - 32) / 4
  const uint32_t field = q < 32 ? 2 : 3, step = q < 32 ? 2 : 4, rem = q - (q < 32 ? 16 : 32);
  uint32_t mant = rem / step;
  const uint32_t r = rem % step;
  if (2 * r > step || (2 * r == step && (mant & 1))) ++mant;
  return mant == 8 ? (field + 1) << 3 : field << 3 | mant;
}
// The eight bytes above, m = 0..3 and 4..7, for one byte permute.
inline constexpr uint32_t kThreeHalvesLo = rounded_three_halves_byte(0) | rounded_three_halves_byte(1) << 8 |
                                           rounded_three_halves_byte(2) << 16 | rounded_three_halves_byte(3) << 24;
inline constexpr uint32_t kThreeHalvesHi = rounded_three_halves_byte(4) | rounded_three_halves_byte(5) << 8 |
                                           rounded_three_halves_byte(6) << 16 | rounded_three_halves_byte(7) << 24;
static_assert(kThreeHalvesLo == 0x18171614u && kThreeHalvesHi == 0x1B1A1A19u);

// The table of fold code `code` (u | m << 4): at m = 0 fold_table's (u up to
// 11); with m > 0, u up to 10 (kFp8RoundedTableMaxShift: past it the top
// bytes overflow e4m3, which the prepare's row exponent never asks). The
// magnitudes at u = 0, 2^-5 times 0, 0.5, 1, 1.5 and 2, 3, 4, 6, with m:
// 0x00, 0x08|m, 0x10|m, B; 0x18|m, B + 8, 0x20|m, B + 16 (B the rounded 1.5's byte).
FP4MOE_HD constexpr void rounded_fold_table(uint32_t code, uint32_t& lo, uint32_t& hi) {
  const uint32_t u = code & 15u, m = (code >> 4) & 7u;
  const uint32_t b = m < 4 ? (kThreeHalvesLo >> (8 * m)) & 0xFFu : (kThreeHalvesHi >> (8 * (m - 4))) & 0xFFu;
  lo = 0x00100800u + m * 0x00010100u + (b << 24) + u * 0x08080800u;
  hi = 0x10200818u + m * 0x00010001u + b * 0x01000100u + u * 0x08080808u;
}

// The fold's arithmetic, for the host's prepare and the GPU's alike. A
// prepared scale byte (UE5M3, gemm_pack.hpp) is (1 + m/8) 2^E, E = (b >> 3) -
// bias (MXFP4: m = 0).
FP4MOE_HD constexpr int block_exponent(uint8_t b, int bias) { return (b >> 3) - bias; }
FP4MOE_HD constexpr int mxfp4_block_exponent(uint8_t b) { return block_exponent(b, pack::kMxfp4ScaleBias); }
FP4MOE_HD constexpr uint32_t block_mantissa(uint8_t b) { return b & 7u; }
// The table's top shift: where a row's largest block lands.
FP4MOE_HD constexpr int max_shift(bool rounded) { return rounded ? kFp8RoundedTableMaxShift : kFp8TableMaxShift; }
// A row's power of two, from its largest nonzero block's exponent (the
// row_largest of an all-zero row is never used: 0): that block lands on the top shift.
FP4MOE_HD constexpr int row_exponent(int row_largest, bool any_nonzero, bool rounded = false) {
  return any_nonzero ? row_largest - max_shift(rounded) : 0;
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
