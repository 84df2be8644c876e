#include "format/fp8_rows.hpp"

#include <algorithm>
#include <cmath>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {

float Fp8Rows::value(int64_t r, int64_t c) const {
  const int64_t g = group == 0 ? 0 : c / group;
  return e4m3_decode(codes[size_t(r * cols + c)]) * scales[size_t(r * groups() + g)];
}

Fp8Rows quantize_rows_e4m3(const float* x, int64_t rows, int64_t cols, int64_t group) {
  FP4MOE_CHECK(rows >= 0 && cols >= 1, "quantize_rows_e4m3: shape [" << rows << ", " << cols << "]");
  FP4MOE_CHECK(group >= 0, "quantize_rows_e4m3: group " << group << " must be 0 (per row) or positive");
  Fp8Rows q;
  q.rows = rows, q.cols = cols, q.group = group;
  q.codes.resize(size_t(rows * cols));
  q.scales.resize(size_t(rows * q.groups()));
  const int64_t width = group == 0 ? cols : group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < q.groups(); ++g) {
      const int64_t c0 = g * width, c1 = std::min(cols, c0 + width);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = x[r * cols + c];
        FP4MOE_CHECK(std::isfinite(v), "quantize_rows_e4m3: x[" << r << ", " << c << "] = " << v << " is not finite");
        amax = std::max(amax, std::fabs(v));
      }
      const float scale = amax > 0 ? amax / kE4m3Max : 1.0f;
      q.scales[size_t(r * q.groups() + g)] = scale;
      for (int64_t c = c0; c < c1; ++c) q.codes[size_t(r * cols + c)] = e4m3_encode(x[r * cols + c] / scale);
    }
  return q;
}

}  // namespace fp4moe
