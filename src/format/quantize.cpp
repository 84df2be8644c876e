// NVFP4 and MXFP4 quantization of a row-major fp32 (or bf16) matrix
// (docs/formats.md). Every step is one fp32 operation written out in the
// order of the formulas, so the result is bit-exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

// Shape and value checks shared by every entry point; returns amax = max |x|.
float check_input(const char* fn, const float* x, int64_t rows, int64_t cols, int block) {
  FP4MOE_CHECK(rows >= 0, fn << ": rows = " << rows << " is negative");
  FP4MOE_CHECK(cols >= 0, fn << ": cols = " << cols << " is negative");
  FP4MOE_CHECK(cols % block == 0, fn << ": cols = " << cols << " is not a multiple of the "
                                     << (block == kNvfp4BlockSize ? "NVFP4" : "MXFP4")
                                     << " block size " << block);
  FP4MOE_CHECK(x != nullptr || rows * cols == 0, fn << ": x is null for a " << rows << " x " << cols << " matrix");
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      FP4MOE_CHECK(std::isfinite(v), fn << ": x[" << r << ", " << c << "] = " << v << " is not finite");
      amax = std::max(amax, std::fabs(v));
    }
  }
  return amax;
}

Fp4Matrix empty_matrix(Fp4Format f, int64_t rows, int64_t cols) {
  Fp4Matrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  m.packed.assign(static_cast<size_t>(rows * (cols / 2)), 0);
  m.scales.assign(static_cast<size_t>(rows * m.scale_cols()), 0);
  m.weight_scale_2 = 1.0f;
  return m;
}

void put_code(Fp4Matrix& m, int64_t r, int64_t c, uint8_t code) {
  uint8_t& b = m.packed[static_cast<size_t>(r * (m.cols / 2) + c / 2)];
  b = (c & 1) ? static_cast<uint8_t>((b & 0x0F) | (code << 4)) : static_cast<uint8_t>((b & 0xF0) | code);
}

float block_amax(const float* row, int64_t c0, int block) {
  float a = 0.0f;
  for (int i = 0; i < block; ++i) a = std::max(a, std::fabs(row[c0 + i]));
  return a;
}

// ModelOpt's NVFP4 weight export (docs/formats.md), every step one fp32
// operation in ModelOpt's order. fl(1/2688): torch on CUDA divides a tensor by
// a Python scalar as a multiply by the scalar's rounded reciprocal.
constexpr float kInv2688 = 1.0f / (kE4m3Max * kE2m1Max);
constexpr float kMinBlockScale = 0x1p-9f;  // the smallest e4m3 subnormal

Fp4Matrix nvfp4(const char* fn, const float* x, int64_t rows, int64_t cols, float amax) {
  Fp4Matrix m = empty_matrix(Fp4Format::nvfp4, rows, cols);
  // A zero amax takes ModelOpt's export rule for it (amax := maxbound, 6): ws2
  // = 6 / 2688, every block scale 1 (0x38), every code 0. ModelOpt's weight path
  // would divide 0 by 0 there and write NaN scales, which no loader accepts.
  const float ws2 = (amax == 0.0f ? kE2m1Max : amax) * kInv2688;
  FP4MOE_CHECK(ws2 > 0.0f, fn << ": amax = " << amax << " is too small: weight_scale_2 = amax / 2688 underflows to 0");
  m.weight_scale_2 = ws2;
  const float block_divisor = kE2m1Max * ws2;
  const int64_t kc = m.scale_cols();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t kb = 0; kb < kc; ++kb) {
      const int64_t c0 = kb * kNvfp4BlockSize;
      float s = block_amax(row, c0, kNvfp4BlockSize) / block_divisor;
      if (s == 0.0f) s = 1.0f;                                // an all-zero block: scale 1, codes 0
      s = std::min(std::max(s, kMinBlockScale), kE4m3Max);    // never rounds to 0 or NaN
      const uint8_t sf = e4m3_encode(s);
      m.scales[static_cast<size_t>(r * kc + kb)] = sf;
      const float step = e4m3_decode(sf) * ws2;
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        const float q = row[c0 + i] / step;
        // The sign comes from q < 0: -0.0 (and a q that is -0.0) is code 0, not 8.
        put_code(m, r, c0 + i, q < 0.0f ? e2m1_encode(q) : e2m1_encode(std::fabs(q)));
      }
    }
  }
  return m;
}

Fp4Matrix mxfp4(const char* fn, const float* x, int64_t rows, int64_t cols) {
  check_input(fn, x, rows, cols, kMxfp4BlockSize);
  Fp4Matrix m = empty_matrix(Fp4Format::mxfp4, rows, cols);
  const int64_t kc = m.scale_cols();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t kb = 0; kb < kc; ++kb) {
      const int64_t c0 = kb * kMxfp4BlockSize;
      const float bmax = block_amax(row, c0, kMxfp4BlockSize);
      if (bmax == 0.0f) continue;  // zero block: scale byte 0x00 (2^-127), codes 0
      const float target = bmax / kE2m1Max;
      // bmax / 6 can underflow to 0 for a block of fp32 subnormals: smallest scale.
      const uint8_t sb = target > 0.0f ? ue8m0_encode_ceil(target) : uint8_t{0};
      m.scales[static_cast<size_t>(r * kc + kb)] = sb;
      const float s = ue8m0_decode(sb);
      for (int i = 0; i < kMxfp4BlockSize; ++i) put_code(m, r, c0 + i, e2m1_encode(row[c0 + i] / s));
    }
  }
  return m;
}

}  // namespace

Fp4Matrix quantize_nvfp4(const float* x, int64_t rows, int64_t cols) {
  const char* fn = "quantize_nvfp4";
  return nvfp4(fn, x, rows, cols, check_input(fn, x, rows, cols, kNvfp4BlockSize));
}

Fp4Matrix quantize_nvfp4(const float* x, int64_t rows, int64_t cols, float amax) {
  const char* fn = "quantize_nvfp4";
  const float own = check_input(fn, x, rows, cols, kNvfp4BlockSize);
  FP4MOE_CHECK(std::isfinite(amax) && amax >= own,
               fn << ": amax = " << amax << " is not a finite value at least the matrix's own max |x| = " << own);
  return nvfp4(fn, x, rows, cols, amax);
}

float nvfp4_amax(const float* x, int64_t rows, int64_t cols) {
  return check_input("quantize_nvfp4", x, rows, cols, kNvfp4BlockSize);
}

namespace {
std::vector<float> widened(const char* fn, const uint16_t* x, int64_t rows, int64_t cols) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, fn << ": rows = " << rows << ", cols = " << cols << " must be non-negative");
  FP4MOE_CHECK(x != nullptr || rows * cols == 0, fn << ": x is null for a " << rows << " x " << cols << " matrix");
  std::vector<float> f(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_float(x[i]);
  return f;
}
}  // namespace

// bf16 widens to fp32 exactly, and ModelOpt divides a bf16 weight by fp32
// scales in fp32: the same codes as the fp32 path.
Fp4Matrix quantize_nvfp4_bf16(const uint16_t* x, int64_t rows, int64_t cols) {
  const std::vector<float> f = widened("quantize_nvfp4_bf16", x, rows, cols);
  return quantize_nvfp4(f.data(), rows, cols);
}

Fp4Matrix quantize_nvfp4_bf16(const uint16_t* x, int64_t rows, int64_t cols, float amax) {
  const std::vector<float> f = widened("quantize_nvfp4_bf16", x, rows, cols);
  return quantize_nvfp4(f.data(), rows, cols, amax);
}

Fp4Matrix quantize_mxfp4(const float* x, int64_t rows, int64_t cols) {
  return mxfp4("quantize_mxfp4", x, rows, cols);
}

Fp4Matrix quantize(Fp4Format f, const float* x, int64_t rows, int64_t cols) {
  switch (f) {
    case Fp4Format::nvfp4: return quantize_nvfp4(x, rows, cols);
    case Fp4Format::mxfp4: return quantize_mxfp4(x, rows, cols);
  }
  FP4MOE_CHECK(false, "quantize: format = " << static_cast<int>(f) << " is not a known Fp4Format");
  return {};
}

}  // namespace fp4moe
