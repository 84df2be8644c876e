// The 128x4 swizzled block-scale layout of CUTLASS / TensorRT-LLM (the offset
// arithmetic is in format/prepared_layout.hpp). Padding bytes are zero.
#include <cstdint>
#include <vector>

#include "fp4moe/error.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

using pack::round_up;

void check_shape(const char* fn, const void* p, int64_t rows, int64_t scale_cols) {
  FP4MOE_CHECK(rows >= 0, fn << ": rows = " << rows << " is negative");
  FP4MOE_CHECK(scale_cols >= 0, fn << ": scale_cols = " << scale_cols << " is negative");
  FP4MOE_CHECK(p != nullptr || rows * scale_cols == 0,
               fn << ": input is null for " << rows << " x " << scale_cols << " scales");
}

}  // namespace

size_t swizzled_scale_bytes(int64_t rows, int64_t scale_cols) {
  check_shape("swizzled_scale_bytes", "", rows, scale_cols);
  return static_cast<size_t>(pack::swizzled_bytes(rows, scale_cols));
}

size_t swizzled_scale_offset(int64_t m, int64_t kb, int64_t scale_cols) {
  FP4MOE_CHECK(scale_cols >= 0, "swizzled_scale_offset: scale_cols = " << scale_cols << " is negative");
  FP4MOE_CHECK(m >= 0, "swizzled_scale_offset: m = " << m << " is negative");
  FP4MOE_CHECK(kb >= 0 && kb < round_up(scale_cols, 4),
               "swizzled_scale_offset: kb = " << kb << " is outside the padded scale columns 0.."
                                              << round_up(scale_cols, 4) - 1);
  return static_cast<size_t>(pack::swizzled_offset(m, kb, scale_cols));
}

std::vector<uint8_t> swizzle_scales_128x4(const uint8_t* row_major, int64_t rows, int64_t scale_cols) {
  check_shape("swizzle_scales_128x4", row_major, rows, scale_cols);
  std::vector<uint8_t> out(swizzled_scale_bytes(rows, scale_cols), 0);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t kb = 0; kb < scale_cols; ++kb)
      out[swizzled_scale_offset(m, kb, scale_cols)] = row_major[m * scale_cols + kb];
  return out;
}

std::vector<uint8_t> unswizzle_scales_128x4(const uint8_t* swizzled, int64_t rows, int64_t scale_cols) {
  check_shape("unswizzle_scales_128x4", swizzled, rows, scale_cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * scale_cols));
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t kb = 0; kb < scale_cols; ++kb)
      out[static_cast<size_t>(m * scale_cols + kb)] = swizzled[swizzled_scale_offset(m, kb, scale_cols)];
  return out;
}

}  // namespace fp4moe
