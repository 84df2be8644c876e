// Activations as float8_e4m3fn with fp32 scales (W4A8, docs/fp8.md): per
// row (token), or per row and `group`-wide block along K (DeepGEMM's 1x128).
// A value is e4m3 x scale with scale = amax / 448 over the row or block, so
// the largest lands on e4m3's largest; an all-zero row or block gets scale 1.
#pragma once
#include <cstdint>
#include <vector>

namespace fp4moe {

struct Fp8Rows {
  int64_t rows = 0, cols = 0;
  int64_t group = 0;             // 0: one scale per row; else one per row and group of columns
  std::vector<uint8_t> codes;    // [rows, cols] e4m3fn bits
  std::vector<float> scales;     // [rows, groups]: groups = 1 or ceil(cols / group)
  int64_t groups() const { return group == 0 ? 1 : (cols + group - 1) / group; }
  float value(int64_t r, int64_t c) const;  // e4m3 x its scale
};

// x [rows, cols] fp32; group 0 or positive. Non-finite input is an error naming its place.
Fp8Rows quantize_rows_e4m3(const float* x, int64_t rows, int64_t cols, int64_t group);

}  // namespace fp4moe
