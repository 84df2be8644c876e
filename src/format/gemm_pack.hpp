// The prepared weight layout of the FP4 grouped GEMM and its bit-level unpacking, shared by
// the host packer (src/format/prepare_gemm.cpp) and the GPU kernels.
//
// Layout of one projection of E experts, W_e [N, K]:
//   weights [E][N/16][K/64][32 lanes][16 bytes]   (one 16-byte load per lane)
//   scales  [E][N/16][ceil(K/128)][8 quads][8 steps][2] (one 16-byte load per lane quad)
// Lane l of a warp owning rows r0..r0+15 holds, for k16 step t of a k64 granule,
// one 32-bit word with the 8 codes of its mma.m16n8k16 A fragment:
//   reg 0: (r0+l/4,   k0+c, k0+c+1)    reg 1: (r0+l/4+8, k0+c, k0+c+1)
//   reg 2: (r0+l/4,   k0+c+8, k0+c+9)  reg 3: (r0+l/4+8, k0+c+8, k0+c+9)
// with c = 2*(l%4), k0 = 16 t. The codes sit where a few shifts and masks turn
// them into bf16 bit patterns sign<<15 | mag<<6 (the value times 2^-126, exact
// including the e2m1 subnormal 0.5), so dequantization needs no table lookup.
#pragma once
#include <cstdint>

#include "common/host_device.hpp"

namespace fp4moe::pack {

// Bit positions in the word of each code's bits {sign, m2, m1, m0},
// per A register (0..3) and half (0 = low bf16, 1 = high bf16). Chosen so the
// four patterns cost 9 integer operations: one mask, two shift-or-rotate and
// mask, and one register from two pieces (an exhaustive search over shift and
// rotate placements finds none cheaper; docs/kernels.md, "Dequantization").
struct CodeBits { int sign, m2, m1, m0; };
inline constexpr CodeBits kCodeBits[4][2] = {
    {{15, 8, 7, 6}, {31, 24, 23, 22}},    // reg 0: w & M
    {{11, 4, 3, 2}, {27, 20, 19, 18}},    // reg 1: (w << 4) & M
    {{5, 30, 29, 28}, {21, 14, 13, 12}},  // reg 2: rotl(w, 10) & M
    {{9, 26, 1, 0}, {25, 10, 17, 16}}     // reg 3: (w << 6) & M except m2, which is rotl(w, 14)
};
inline constexpr uint32_t kBf16PairMask = 0x81C081C0u;  // sign 15/31, magnitude 8:6 / 24:22
inline constexpr uint32_t kReg3ShiftMask = 0x80C080C0u;   // reg 3's bits that (w << 6) brings
inline constexpr uint32_t kReg3RotateMask = 0x01000100u;  // and its m2 bits, from rotl(w, 14)

FP4MOE_HD uint32_t rotate_left(uint32_t w, int s) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(w, w, s);  // one SHF.L.W
#else
  return (w << s) | (w >> (32 - s));
#endif
}

// The four bf16x2 patterns (value * 2^-126) of one word.
FP4MOE_HD void unpack_word(uint32_t w, uint32_t out[4]) {
  out[0] = w & kBf16PairMask;
  out[1] = (w << 4) & kBf16PairMask;
  out[2] = rotate_left(w, 10) & kBf16PairMask;
  out[3] = ((w << 6) & kReg3ShiftMask) | (rotate_left(w, 14) & kReg3RotateMask);
}

// Place a 4-bit e2m1 code at bit positions b into a word.
FP4MOE_HD constexpr uint32_t place_code_bits(uint32_t word, CodeBits b, uint8_t code) {
  word |= uint32_t((code >> 3) & 1) << b.sign;
  word |= uint32_t((code >> 2) & 1) << b.m2;
  word |= uint32_t((code >> 1) & 1) << b.m1;
  word |= uint32_t(code & 1) << b.m0;
  return word;
}
// The same for (reg, half). Host only: device code takes the positions as a
// constant expression (kCodeBits lives in host memory).
constexpr uint32_t place_code(uint32_t word, int reg, int half, uint8_t code) {
  return place_code_bits(word, kCodeBits[reg][half], code);
}

// Block scales are stored in a prepared byte "UE5M3": value 2^(e' - bias) * (1 + m/8)
// with e' the top 5 bits and m the low 3 (bias 9 for NVFP4, whose e4m3 scales,
// subnormals included, are all such values; bias 20 for MXFP4). A zero scale is
// stored as byte 0 with the block's codes cleared, which is exact.
// The kernel turns a byte into the bf16 operand s * 2^116 with one integer
// multiply-add: bits = byte * 16 + (kScaleExponentAdd(bias) << 7). Then
// pattern (v * 2^-126) * operand = v * s * 2^-10, exact and normal in bf16,
// and the fp32 accumulator is multiplied by 2^10 (kAccumulatorFactor).
inline constexpr int kScaleOperandExp2 = 116;
inline constexpr float kAccumulatorFactor = 1024.0f;
inline constexpr int kNvfp4ScaleBias = 9;
inline constexpr int kMxfp4ScaleBias = 20;
constexpr uint32_t scale_exponent_add(int bias) { return uint32_t(kScaleOperandExp2 + 127 - bias); }
// exponent_add in the exponent field of both bf16 halves (KernelParams::scale_add2)
constexpr uint32_t scale_add2(uint32_t exponent_add) { return (exponent_add << 7) | (exponent_add << 23); }
// The bf16x2 operands of two prepared bytes spread as lo | hi << 16 (the kernel
// spreads them with one byte permute): lo's operand in the low half, hi's in the high.
FP4MOE_HD uint32_t scale_operands(uint32_t spread_bytes, uint32_t exponent_add) {
  return spread_bytes * 16u + scale_add2(exponent_add);
}

inline constexpr int kLanes = 32;
inline constexpr int kWeightGranuleBytes = 512;  // 32 lanes x 16 bytes = 16 rows x 64 k
inline constexpr int kScaleGranuleBytes = 128;   // 8 quads x 8 steps x 2 rows = 16 rows x 128 k

}  // namespace fp4moe::pack
