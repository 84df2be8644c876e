#include "format/fp8_fold.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "fp4moe/error.hpp"

namespace fp4moe {

namespace {

bool block_is_zero(const Fp4Matrix& m, int64_t r, int64_t kb, int g) {
  for (int64_t c = kb * g; c < (kb + 1) * g; ++c)
    if ((m.code(r, c) & 7u) != 0) return false;
  return true;
}

}  // namespace

Mxfp4Fold plan_mxfp4_fold(const Fp4Matrix& m) {
  FP4MOE_CHECK(m.format == Fp4Format::mxfp4, "plan_mxfp4_fold: the matrix is " << to_string(m.format) << ", not mxfp4");
  Mxfp4Fold f;
  f.rows = m.rows, f.cols = m.cols;
  const int g = m.block_size();
  const int64_t kbs = m.scale_cols();
  f.blocks = m.rows * kbs;
  f.row_exponent.assign(size_t(m.rows), 0);
  std::vector<int> exps(static_cast<size_t>(kbs));
  for (int64_t r = 0; r < m.rows; ++r) {
    int hi = INT_MIN, lo = INT_MAX;
    for (int64_t kb = 0; kb < kbs; ++kb) {
      const uint8_t s = m.scales[size_t(r * kbs + kb)];
      FP4MOE_CHECK(s != 0xFF, "plan_mxfp4_fold: row " << r << " block " << kb << " has the NaN scale 0xFF");
      if (block_is_zero(m, r, kb, g)) {
        exps[size_t(kb)] = INT_MIN;
        ++f.zero_blocks;
        continue;
      }
      exps[size_t(kb)] = int(s) - 127;
      hi = std::max(hi, int(s) - 127), lo = std::min(lo, int(s) - 127);
    }
    if (hi == INT_MIN) continue;  // an all-zero row: any exponent
    f.row_exponent[size_t(r)] = hi - kFoldMaxShift;
    f.max_row_span = std::max(f.max_row_span, hi - lo);
    for (int e : exps)
      if (e != INT_MIN && e - f.row_exponent[size_t(r)] < kFoldMinShift) ++f.below_range_blocks;
  }
  return f;
}

std::vector<uint8_t> fold_mxfp4_to_e4m3(const Fp4Matrix& m, const Mxfp4Fold& fold, bool allow_flush) {
  FP4MOE_CHECK(fold.rows == m.rows && fold.cols == m.cols && int64_t(fold.row_exponent.size()) == m.rows,
               "fold_mxfp4_to_e4m3: the fold is of a [" << fold.rows << ", " << fold.cols << "] matrix, not ["
                                                        << m.rows << ", " << m.cols << "]");
  FP4MOE_CHECK(fold.exact() || allow_flush, "fold_mxfp4_to_e4m3: " << fold.below_range_blocks
                                                                   << " blocks lie more than 2^14 below their row's "
                                                                      "largest and do not fold exactly");
  const int g = m.block_size();
  const int64_t kbs = m.scale_cols();
  std::vector<uint8_t> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t kb = 0; kb < kbs; ++kb) {
      const int shift = int(m.scales[size_t(r * kbs + kb)]) - 127 - fold.row_exponent[size_t(r)];
      const bool flush = shift < kFoldMinShift;
      for (int64_t c = kb * g; c < (kb + 1) * g; ++c) {
        const uint8_t code = m.code(r, c);
        out[size_t(r * m.cols + c)] = flush || (code & 7u) == 0 ? uint8_t(code & 8u ? 0x80 : 0)
                                                                : e2m1_to_e4m3(code, std::min(shift, kFoldMaxShift));
      }
    }
  return out;
}

Nvfp4Fold fold_nvfp4_to_e4m3_rounded(const Fp4Matrix& m) {
  FP4MOE_CHECK(m.format == Fp4Format::nvfp4,
               "fold_nvfp4_to_e4m3_rounded: the matrix is " << to_string(m.format) << ", not nvfp4");
  Nvfp4Fold f;
  f.bytes.resize(size_t(m.rows * m.cols));
  f.row_exponent.assign(size_t(m.rows), 0);
  const int g = m.block_size();
  const int64_t kbs = m.scale_cols();
  for (int64_t r = 0; r < m.rows; ++r) {
    float amax = 0;  // the row's largest |e2m1 x block scale|
    for (int64_t c = 0; c < m.cols; ++c)
      amax = std::max(amax, std::fabs(e2m1_decode(m.code(r, c)) * e4m3_decode(m.scales[size_t(r * kbs + c / g)])));
    // the smallest power of two that brings amax under 448 (or lifts it to 256..448)
    int e = 0;
    if (amax > 0) e = int(std::ceil(std::log2(double(amax) / double(kE4m3Max))));
    f.row_exponent[size_t(r)] = e;
    for (int64_t c = 0; c < m.cols; ++c) {
      const float v = e2m1_decode(m.code(r, c)) * e4m3_decode(m.scales[size_t(r * kbs + c / g)]);
      const float scaled = std::ldexp(v, -e);
      const uint8_t b = e4m3_encode(scaled);
      f.bytes[size_t(r * m.cols + c)] = b;
      if (e4m3_decode(b) != scaled) ++f.rounded;
    }
  }
  return f;
}

Nvfp4Split split_nvfp4_to_e4m3(const Fp4Matrix& m) {
  Nvfp4Fold f = fold_nvfp4_to_e4m3_rounded(m);
  Nvfp4Split sp;
  sp.hi = std::move(f.bytes);
  sp.row_exponent = std::move(f.row_exponent);
  sp.lo.resize(sp.hi.size());
  const int g = m.block_size();
  const int64_t kbs = m.scale_cols();
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      const size_t i = size_t(r * m.cols + c);
      const float v = std::ldexp(e2m1_decode(m.code(r, c)) * e4m3_decode(m.scales[size_t(r * kbs + c / g)]),
                                 -sp.row_exponent[size_t(r)]);
      const float rest = v - e4m3_decode(sp.hi[i]);  // exact: both are close fp32 values
      sp.lo[i] = e4m3_encode(rest);
      if (e4m3_decode(sp.lo[i]) != rest) ++sp.inexact;
    }
  return sp;
}

}  // namespace fp4moe
