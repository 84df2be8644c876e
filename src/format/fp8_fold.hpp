// FP4 weights as float8_e4m3fn for Hopper's FP8 tensor cores (W4A8,
// docs/fp8.md). Every e2m1 value is an e4m3 value, and so is e2m1 x 2^s for
// every code while s stays in [kFoldMinShift, kFoldMaxShift]:
//   top:    6 x 2^6 = 384 <= 448, the largest e4m3 (6 x 2^7 = 768 is not);
//   bottom: the e4m3 subnormal step is 2^-9; 0.5 x 2^-8 = 2^-9 and
//           1.5 x 2^-8 = 3 x 2^-9 are on it, 0.5 x 2^-9 is not.
// An MXFP4 block's e8m0 scale 2^e folds into its codes exactly when
// s = e - row exponent is in that range; the row exponent (one power of two
// per output row) goes to the epilogue. fold_mxfp4 picks it so the row's
// largest block lands on the top shift and counts the blocks that fall below.
#pragma once
#include <cstdint>
#include <vector>

#include "common/host_device.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {

inline constexpr int kFoldMinShift = -8;
inline constexpr int kFoldMaxShift = 6;

// e4m3 bits of e2m1(code) x 2^shift, exact (shift in [kFoldMinShift, kFoldMaxShift]).
// A value 2^p is normal from p = -6 (bits (p + 7) << 3) and subnormal below
// (m x 2^-9: 1 << (p + 9)); 1.5 x 2^p adds the mantissa's top bit, or is
// 3 << (p + 8) below -6.
FP4MOE_HD constexpr uint8_t e2m1_to_e4m3(uint8_t code, int shift) {
  const uint8_t sign = static_cast<uint8_t>((code & 8u) << 4);
  const uint8_t mag = code & 7u;
  if (mag == 0) return sign;
  // e2m1 magnitudes 0.5, 1, 1.5, 2, 3, 4, 6 = {1, 1, 1.5, 1, 1.5, 1, 1.5} x 2^{-1, 0, 0, 1, 1, 2, 2}
  const bool half_more = mag == 3 || mag == 5 || mag == 7;
  const int p = (mag == 1 ? -1 : (mag >> 1) - 1) + shift;
  if (p >= -6) return static_cast<uint8_t>(sign | ((p + 7) << 3) | (half_more ? 4 : 0));
  return static_cast<uint8_t>(sign | (half_more ? 3 << (p + 8) : 1 << (p + 9)));
}

// An MXFP4 matrix's fold into e4m3: per output row the power of two left
// for the epilogue, and what could not be folded exactly.
struct Mxfp4Fold {
  int64_t rows = 0, cols = 0;
  std::vector<int> row_exponent;  // [rows]: a weight is e4m3 x 2^row_exponent
  int64_t blocks = 0;             // rows x cols / 32
  int64_t zero_blocks = 0;        // every code 0: exact whatever the shift
  int64_t below_range_blocks = 0; // nonzero blocks more than 2^14 under their row's largest
  int max_row_span = 0;           // largest (largest - smallest exponent) of a row's nonzero blocks
  bool exact() const { return below_range_blocks == 0; }
};

// Plans the fold of `m` (MXFP4; anything else is an fp4moe::Error).
Mxfp4Fold plan_mxfp4_fold(const Fp4Matrix& m);

// e4m3 bytes [rows, cols] of the planned fold. Blocks below the range are an
// error naming their count unless `allow_flush`, where they become zeros (for
// measuring what flushing would cost, never for computing).
std::vector<uint8_t> fold_mxfp4_to_e4m3(const Fp4Matrix& m, const Mxfp4Fold& fold, bool allow_flush = false);

// NVFP4's e4m3 block scales carry a mantissa: e2m1 x scale has up to 6
// significant bits and rounds to e4m3's 4. The rounded fold, per row a power
// of two chosen so the row's largest product fits under 448 (the global scale
// stays with it for the epilogue): bytes [rows, cols], row_exponent [rows].
struct Nvfp4Fold {
  std::vector<uint8_t> bytes;
  std::vector<int> row_exponent;  // a weight is about e4m3 x 2^row_exponent x weight_scale_2
  int64_t rounded = 0;            // elements whose value changed
};
Nvfp4Fold fold_nvfp4_to_e4m3_rounded(const Fp4Matrix& m);

// NVFP4 without rounding: every e2m1 x block scale as hi + lo, both e4m3 (hi
// the rounded fold above, lo the remainder, at most 2 significant bits), so a
// GEMM runs two FP8 products per K step on the same weight bytes. `inexact`
// counts the elements whose remainder is not an e4m3 value (below e4m3's
// subnormal step at the row's exponent).
struct Nvfp4Split {
  std::vector<uint8_t> hi, lo;
  std::vector<int> row_exponent;
  int64_t inexact = 0;
};
Nvfp4Split split_nvfp4_to_e4m3(const Fp4Matrix& m);

}  // namespace fp4moe
