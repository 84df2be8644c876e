// NVFP4 / MXFP4 quantization and dequantization (docs/formats.md).
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

using test::error_of;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
uint32_t ulp_distance(float a, float b) {  // a, b > 0
  return bits(a) > bits(b) ? bits(a) - bits(b) : bits(b) - bits(a);
}

// Random [rows, cols] matrix whose blocks have log-uniform magnitudes spanning
// `decades_log2` binades below `top` (so NVFP4 scales cover the e4m3 normal,
// subnormal and zero ranges), with some all-zero blocks, lone spikes, exact
// zeros and negative zeros mixed in.
std::vector<float> random_matrix(std::mt19937& rng, int64_t rows, int64_t cols, int block, float top,
                                 float span_log2) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::uniform_real_distribution<float> mag(-span_log2, 0.0f);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 19);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += block) {
      const int k = kind(rng);
      const float m = top * std::exp2(mag(rng));
      for (int i = 0; i < block; ++i) {
        float v = m * gauss(rng);
        if (k == 0) v = 0.0f;                                  // all-zero block
        if (k == 1) v = (i == 3) ? m : 0.0f;                   // lone spike
        if (k == 2 && i % 4 == 0) v = (i % 8 == 0) ? 0.0f : -0.0f;  // zeros mixed in
        x[static_cast<size_t>(r * cols + c0 + i)] = v;
      }
    }
  }
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  x[static_cast<size_t>(rows * cols / 2 + 1)] = top * (4.0f + u01(rng));  // amax, most likely
  return x;
}

// Largest |error| RNE to E2M1 can make at scaled magnitude a (in units of the
// block step), including saturation above 6.
double e2m1_error_units(double a) {
  if (a > 6.0) return a - 6.0;
  if (a <= 2.0) return 0.25;
  if (a <= 4.0) return 0.5;
  return 1.0;
}

float block_max_code_value(const Fp4Matrix& m, int64_t r, int64_t kb) {
  float q = 0.0f;
  for (int i = 0; i < m.block_size(); ++i) q = std::max(q, std::fabs(e2m1_decode(m.code(r, kb * m.block_size() + i))));
  return q;
}

bool block_equal(const Fp4Matrix& a, const Fp4Matrix& b, int64_t r, int64_t kb) {
  if (a.scales[static_cast<size_t>(r * a.scale_cols() + kb)] != b.scales[static_cast<size_t>(r * b.scale_cols() + kb)])
    return false;
  for (int i = 0; i < a.block_size(); ++i) {
    const int64_t c = kb * a.block_size() + i;
    if (a.code(r, c) != b.code(r, c)) return false;
  }
  return true;
}

// ---- shapes, errors, conventions --------------------------------------------------

TEST(FormatQuant, ToStringAndDispatch) {
  EXPECT_STREQ(to_string(Fp4Format::nvfp4), "nvfp4");
  EXPECT_STREQ(to_string(Fp4Format::mxfp4), "mxfp4");
  std::mt19937 rng(7);
  const auto x = random_matrix(rng, 4, 64, 32, 1.0f, 8.0f);
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
    const Fp4Matrix a = quantize(f, x.data(), 4, 64);
    const Fp4Matrix b = f == Fp4Format::nvfp4 ? quantize_nvfp4(x.data(), 4, 64) : quantize_mxfp4(x.data(), 4, 64);
    EXPECT_EQ(a.format, f);
    EXPECT_EQ(a.packed, b.packed);
    EXPECT_EQ(a.scales, b.scales);
    EXPECT_EQ(a.block_size(), f == Fp4Format::nvfp4 ? 16 : 32);
  }
}

TEST(FormatQuant, ColsNotAMultipleOfTheBlockIsAnError) {
  std::vector<float> x(64 * 2, 1.0f);
  std::string e = error_of([&] { quantize_nvfp4(x.data(), 2, 20); });
  EXPECT_NE(e.find("cols = 20"), std::string::npos) << e;
  EXPECT_NE(e.find("16"), std::string::npos) << e;
  e = error_of([&] { quantize_mxfp4(x.data(), 2, 48); });
  EXPECT_NE(e.find("cols = 48"), std::string::npos) << e;
  EXPECT_NE(e.find("32"), std::string::npos) << e;
  std::vector<uint16_t> xb(64 * 2, 0x3F80);
  e = error_of([&] { quantize_nvfp4_bf16(xb.data(), 2, 24); });
  EXPECT_NE(e.find("cols = 24"), std::string::npos) << e;
  EXPECT_THROW(quantize_nvfp4(x.data(), -1, 16), Error);
  EXPECT_THROW(quantize_nvfp4(nullptr, 2, 16), Error);
}

TEST(FormatQuant, NonFiniteInputNamesRowAndColumn) {
  std::vector<float> x(3 * 32, 1.0f);
  x[2 * 32 + 5] = std::numeric_limits<float>::quiet_NaN();
  std::string e = error_of([&] { quantize_nvfp4(x.data(), 3, 32); });
  EXPECT_NE(e.find("[2, 5]"), std::string::npos) << e;
  x[2 * 32 + 5] = 1.0f;
  x[1 * 32 + 31] = -std::numeric_limits<float>::infinity();
  e = error_of([&] { quantize_mxfp4(x.data(), 3, 32); });
  EXPECT_NE(e.find("[1, 31]"), std::string::npos) << e;
  EXPECT_NE(e.find("inf"), std::string::npos) << e;
  std::vector<uint16_t> xb(32, 0x3F80);
  xb[17] = 0x7FC0;
  e = error_of([&] { quantize_nvfp4_bf16(xb.data(), 1, 32); });
  EXPECT_NE(e.find("[0, 17]"), std::string::npos) << e;
}

TEST(FormatNvfp4Quant, TinyAmaxIsAnError) {
  std::vector<float> x(16, 0.0f);
  x[0] = 1e-38f;  // 448*6/amax overflows fp32
  const std::string e = error_of([&] { quantize_nvfp4(x.data(), 1, 16); });
  EXPECT_NE(e.find("amax"), std::string::npos) << e;
}

TEST(FormatNvfp4Quant, AllZeroMatrix) {
  for (float z : {0.0f, -0.0f}) {
    std::vector<float> x(3 * 48, z);
    const Fp4Matrix m = quantize_nvfp4(x.data(), 3, 48);
    EXPECT_EQ(m.rows, 3);
    EXPECT_EQ(m.cols, 48);
    EXPECT_EQ(m.packed, std::vector<uint8_t>(3 * 24, 0));
    EXPECT_EQ(m.scales, std::vector<uint8_t>(3 * 3, 0));
    EXPECT_EQ(m.global_scale, 1.0f);
    EXPECT_EQ(m.weight_scale_2, 1.0f);
    for (float v : dequantize(m)) EXPECT_EQ(bits(v), 0u);
  }
  const Fp4Matrix empty = quantize_nvfp4(nullptr, 0, 32);
  EXPECT_TRUE(empty.packed.empty());
  EXPECT_TRUE(dequantize(empty).empty());
}

TEST(FormatNvfp4Quant, ZeroBlocksInsideANonzeroMatrix) {
  std::vector<float> x(64, 0.0f);
  x[16] = 3.0f;
  x[40] = -0.0f;
  const Fp4Matrix m = quantize_nvfp4(x.data(), 1, 64);
  EXPECT_EQ(m.scales[0], 0);
  EXPECT_EQ(m.scales[2], 0);
  EXPECT_EQ(m.scales[3], 0);
  EXPECT_EQ(m.scales[1], 0x7E);
  for (int c : {0, 15, 32, 40, 63}) EXPECT_EQ(m.code(0, c), 0) << c;
}

TEST(FormatNvfp4Quant, HandComputedExample) {
  // Block 0: amax 6 -> gs = 2688/6 = 448, sf = e4m3(448*6/6) = 448 (0x7E),
  // step = 448/448 = 1, so codes are e2m1(x). Block 1: blockamax 1.5 ->
  // sf = e4m3(448*1.5/6) = 112 = 1.75 * 2^6 (0x6E), step = 112/448 = 0.25.
  std::vector<float> x(32, 0.0f);
  const float b0[6] = {6.0f, -3.0f, 0.5f, 0.25f, 0.75f, -5.0f};
  for (int i = 0; i < 6; ++i) x[i] = b0[i];
  x[16] = 1.5f;
  x[17] = -0.3125f;  // -1.25 steps: tie between 1 and 1.5 -> 1 (code 8|2): -0.25
  x[18] = 0.1f;     // 0.4 steps -> 0.5 step (code 1): 0.125
  const Fp4Matrix m = quantize_nvfp4(x.data(), 1, 32);
  EXPECT_EQ(m.global_scale, 448.0f);
  EXPECT_EQ(m.weight_scale_2, 6.0f / 2688.0f);
  EXPECT_EQ(m.scales[0], 0x7E);
  EXPECT_EQ(m.scales[1], 0x6E);
  EXPECT_EQ(e4m3_decode(0x6E), 112.0f);
  const uint8_t want0[6] = {7, 13, 1, 0, 2, 14};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m.code(0, i), want0[i]) << i;
  EXPECT_EQ(m.code(0, 16), 7);
  EXPECT_EQ(m.code(0, 17), 10);
  EXPECT_EQ(m.code(0, 18), 1);
  // Packing: element 2i in the low nibble.
  EXPECT_EQ(m.packed[0], (13 << 4) | 7);
  EXPECT_EQ(m.packed[8], (10 << 4) | 7);
  const auto d = dequantize(m);
  EXPECT_EQ(d[0], 6.0f);
  EXPECT_EQ(d[1], -3.0f);
  EXPECT_EQ(d[5], -4.0f);
  EXPECT_EQ(d[16], 1.5f);
  EXPECT_EQ(d[17], -0.25f);
  EXPECT_EQ(d[18], 0.125f);
  EXPECT_EQ(m.scale(0, 1), 112.0f);
  EXPECT_EQ(m.dequant(0, 17), -0.25f);
  EXPECT_THROW(m.dequant(0, 32), Error);
  EXPECT_THROW(m.scale(1, 0), Error);
}

TEST(FormatNvfp4Quant, GlobalScaleConvention) {
  std::mt19937 rng(11);
  for (float top : {1e-12f, 3e-3f, 1.0f, 77.7f, 1e15f}) {
    const auto x = random_matrix(rng, 8, 64, 16, top, 10.0f);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const Fp4Matrix m = quantize_nvfp4(x.data(), 8, 64);
    EXPECT_EQ(bits(m.global_scale), bits(2688.0f / amax)) << top;
    EXPECT_EQ(bits(m.weight_scale_2), bits(amax / 2688.0f)) << top;
    const auto d = dequantize(m);
    float dmax = 0.0f;
    for (float v : d) dmax = std::max(dmax, std::fabs(v));
    EXPECT_EQ(bits(dmax), bits(2688.0f / m.global_scale)) << top;  // 6 * 448 / gs
  }
}

TEST(FormatNvfp4Quant, Bf16InputMatchesFloatInput) {
  std::mt19937 rng(5);
  const auto x = random_matrix(rng, 16, 128, 16, 2.0f, 20.0f);
  std::vector<uint16_t> xb(x.size());
  std::vector<float> xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = bf16_from_float(x[i]);
    xr[i] = bf16_to_float(xb[i]);
  }
  const Fp4Matrix a = quantize_nvfp4_bf16(xb.data(), 16, 128);
  const Fp4Matrix b = quantize_nvfp4(xr.data(), 16, 128);
  EXPECT_EQ(a.packed, b.packed);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(bits(a.global_scale), bits(b.global_scale));
  EXPECT_EQ(bits(a.weight_scale_2), bits(b.weight_scale_2));
}

// ---- NVFP4 round trip ---------------------------------------------------------------

// Whether requantizing a block's own dequantized values must give back its
// scale: the requantizer sees block amax q_max * sf / gs and computes
// e4m3(q_max * sf / 6) (up to fp32 rounding of gs * (1/gs)). That is sf unless
// q_max * sf / 6 lies at or outside the rounding interval of sf.
bool nvfp4_block_is_fixed_point(uint8_t sf, float q_max) {
  if (sf == 0) return true;
  const double sv = e4m3_decode(sf);
  const double t = q_max * sv / 6.0;
  const double lo = 0.5 * (sv + e4m3_decode(static_cast<uint8_t>(sf - 1)));
  const double hi = sf == 0x7E ? 1e30 : 0.5 * (sv + e4m3_decode(static_cast<uint8_t>(sf + 1)));
  return t > lo * (1 + 1e-6) && t < hi * (1 - 1e-6);
}

TEST(FormatNvfp4Quant, RequantizingTheDequantizedMatrixIsBitIdentical) {
  std::mt19937 rng(2024);
  int64_t subnormal_fixed = 0, exceptions = 0, blocks = 0;
  for (float top : {1e-20f, 1e-6f, 0.02f, 1.0f, 300.0f, 1e9f, 1e25f}) {
    for (int rep = 0; rep < 4; ++rep) {
      const int64_t rows = 37, cols = 160;
      const auto x = random_matrix(rng, rows, cols, 16, top, 24.0f);
      const Fp4Matrix q = quantize_nvfp4(x.data(), rows, cols);
      const auto d = dequantize(q);
      const Fp4Matrix q2 = quantize_nvfp4(d.data(), rows, cols);
      ASSERT_EQ(bits(q2.global_scale), bits(q.global_scale)) << top;
      // weight_scale_2 = fl(amax / 2688) follows amax, which requantization
      // reproduces only to an ulp (fl(2688 / gs)); it is export metadata.
      ASSERT_LE(ulp_distance(q2.weight_scale_2, q.weight_scale_2), 2u) << top;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t kb = 0; kb < q.scale_cols(); ++kb) {
          ++blocks;
          const uint8_t sf = q.scales[static_cast<size_t>(r * q.scale_cols() + kb)];
          const float q_max = block_max_code_value(q, r, kb);
          if (sf >= 0x08) {
            EXPECT_EQ(q_max, 6.0f) << "a normal-scale block always uses code value 6";
          }
          if (nvfp4_block_is_fixed_point(sf, q_max)) {
            ASSERT_TRUE(block_equal(q, q2, r, kb)) << "top " << top << " row " << r << " block " << kb << " sf "
                                                   << int(sf) << " q_max " << q_max;
            if (sf >= 1 && sf <= 7) ++subnormal_fixed;
          } else {
            // The only blocks that are not fixed points (docs/formats.md):
            // sf = 2^-9 with q_max = 3 and sf = 2^-8 with q_max = 4.
            ++exceptions;
            EXPECT_TRUE((sf == 1 && q_max == 3.0f) || (sf == 2 && q_max == 4.0f))
                << "sf " << int(sf) << " q_max " << q_max;
          }
        }
      }
      // Values that round trip bit-identically dequantize identically too.
      if (q2.packed == q.packed && q2.scales == q.scales) {
        EXPECT_EQ(dequantize(q2), d);
      }
    }
  }
  EXPECT_GT(subnormal_fixed, 50) << "the inputs must exercise e4m3 subnormal scales";
  EXPECT_LT(exceptions * 20, blocks);
}

TEST(FormatNvfp4Quant, TheTwoSubnormalScaleExceptionsAreAsDocumented) {
  // gs = 1 (amax = 2688). Block 1: blockamax 6 * 1.6 * 2^-9 -> t = 1.6 * 2^-9,
  // sf = 2 * 2^-9, max code value e2m1(4.8) = 4; requantized, t = 4/3 * 2^-9 -> sf 1.
  // Block 2: t = 0.55 * 2^-9 -> sf = 2^-9, code e2m1(3.3) = 3; requantized,
  // t = 0.5 * 2^-9, a tie that (up to fp32 rounding) may go either way.
  std::vector<float> x(48, 0.0f);
  x[0] = 2688.0f;
  x[16] = 6.0f * 1.6f * std::ldexp(1.0f, -9);
  x[32] = 6.0f * 0.55f * std::ldexp(1.0f, -9);
  const Fp4Matrix q = quantize_nvfp4(x.data(), 1, 48);
  ASSERT_EQ(q.global_scale, 1.0f);
  EXPECT_EQ(q.scales[1], 2);
  EXPECT_EQ(q.code(0, 16), 6);  // value 4
  EXPECT_EQ(q.scales[2], 1);
  EXPECT_EQ(q.code(0, 32), 5);  // value 3
  const auto d = dequantize(q);
  const Fp4Matrix q2 = quantize_nvfp4(d.data(), 1, 48);
  EXPECT_EQ(q2.scales[0], q.scales[0]);
  EXPECT_EQ(q2.scales[1], 1);  // not idempotent here: 4 * 2^-8 becomes 6 * 2^-9
  EXPECT_EQ(q2.code(0, 16), 7);
}

TEST(FormatNvfp4Quant, GlobalScaleSurvivesRequantizationForAnyAmax) {
  // The global scale is a fixed point of quantize(dequantize(.)) because the
  // amax element dequantizes to fl(2688 / gs) and fl(2688 / fl(2688 / gs)) == gs.
  std::mt19937 rng(4242);
  std::uniform_real_distribution<float> expo(-100.0f, 100.0f);
  std::vector<float> x(16, 0.0f);
  for (int i = 0; i < 20000; ++i) {
    x[static_cast<size_t>(i % 16)] = 0.0f;
    x[static_cast<size_t>((i + 1) % 16)] = (i % 2 ? -1.0f : 1.0f) * std::exp2(expo(rng));
    const Fp4Matrix q = quantize_nvfp4(x.data(), 1, 16);
    const auto d = dequantize(q);
    const Fp4Matrix q2 = quantize_nvfp4(d.data(), 1, 16);
    ASSERT_EQ(bits(q2.global_scale), bits(q.global_scale)) << "amax " << x[static_cast<size_t>((i + 1) % 16)];
    ASSERT_LE(ulp_distance(q2.weight_scale_2, q.weight_scale_2), 2u);
    ASSERT_EQ(q2.packed, q.packed);
    ASSERT_EQ(q2.scales, q.scales);
  }
}

// ---- NVFP4 error bounds ---------------------------------------------------------------

TEST(FormatNvfp4Quant, PerElementErrorBoundAndFrobenius) {
  std::mt19937 rng(77);
  for (float top : {1e-5f, 1.0f, 4e4f}) {
    const int64_t rows = 64, cols = 256;
    const auto x = random_matrix(rng, rows, cols, 16, top, 24.0f);
    const Fp4Matrix q = quantize_nvfp4(x.data(), rows, cols);
    const auto d = dequantize(q);
    const double gs = q.global_scale;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double xv = x[static_cast<size_t>(r * cols + c)];
        const double dv = d[static_cast<size_t>(r * cols + c)];
        ASSERT_EQ(dv, q.dequant(r, c));
        const double sv = q.scale(r, c / 16);
        const double err = std::fabs(xv - dv);
        if (sv == 0.0) {
          // t = gs * blockamax / 6 rounded to e4m3 zero: t <= 2^-10.
          EXPECT_EQ(dv, 0.0);
          EXPECT_LE(std::fabs(xv), 6.0 * std::ldexp(1.0, -10) / gs * (1 + 1e-6));
          continue;
        }
        const double step = sv / gs;
        const double a = std::fabs(xv) / step;
        if (sv >= std::ldexp(1.0, -6)) {
          EXPECT_LE(a, 6.4 * (1 + 1e-6)) << "normal scale saturates at most 1/15";
        }
        const double bound = e2m1_error_units(a) * step + 1e-6 * (std::fabs(xv) + 6.0 * step);
        ASSERT_LE(err, bound) << "x[" << r << ", " << c << "] = " << xv << " dequant " << dv << " step " << step;
      }
    }
  }
  // Dense Gaussian matrix: relative Frobenius error of a good 4-bit code.
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(128 * 512);
  for (auto& v : x) v = gauss(rng);
  const auto d = dequantize(quantize_nvfp4(x.data(), 128, 512));
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - d[i]) * (double(x[i]) - d[i]);
    den += double(x[i]) * x[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.12);
}

// ---- MXFP4 ---------------------------------------------------------------------------

TEST(FormatMxfp4Quant, HandComputedExample) {
  std::vector<float> x(96, 0.0f);
  x[0] = 6.0f;   // block 0: scale = 2^ceil(log2(1)) = 1 (byte 127)
  x[1] = -2.5f;  // tie -> 2
  x[32] = 7.0f;  // block 1: 7/6 -> scale 2 (byte 128): 3.5 -> tie -> 4 (value 8)
  x[33] = 1.0f;  // 0.5 (value 1)
  // block 2: all zero -> byte 0x00, codes 0
  const Fp4Matrix m = quantize_mxfp4(x.data(), 1, 96);
  EXPECT_EQ(m.global_scale, 1.0f);
  EXPECT_EQ(m.weight_scale_2, 1.0f);
  EXPECT_EQ(m.scales, (std::vector<uint8_t>{127, 128, 0}));
  EXPECT_EQ(m.code(0, 0), 7);
  EXPECT_EQ(m.code(0, 1), 12);
  EXPECT_EQ(m.code(0, 32), 6);
  EXPECT_EQ(m.code(0, 33), 1);
  for (int c = 64; c < 96; ++c) EXPECT_EQ(m.code(0, c), 0);
  const auto d = dequantize(m);
  EXPECT_EQ(d[1], -2.0f);
  EXPECT_EQ(d[32], 8.0f);
  EXPECT_EQ(d[33], 1.0f);
  EXPECT_EQ(m.scale(0, 2), std::ldexp(1.0f, -127));
  EXPECT_EQ(d[64], 0.0f);
}

TEST(FormatMxfp4Quant, AllZeroMatrixAndTinyBlocks) {
  std::vector<float> x(2 * 64, 0.0f);
  Fp4Matrix m = quantize_mxfp4(x.data(), 2, 64);
  EXPECT_EQ(m.scales, std::vector<uint8_t>(4, 0));
  EXPECT_EQ(m.packed, std::vector<uint8_t>(64, 0));
  // A block of fp32 subnormals whose amax / 6 underflows: smallest scale.
  x[0] = std::numeric_limits<float>::denorm_min();
  x[40] = std::ldexp(1.0f, -127);
  m = quantize_mxfp4(x.data(), 2, 64);
  EXPECT_EQ(m.scales[0], 0);
  EXPECT_EQ(m.scales[1], 0);
  EXPECT_EQ(m.code(0, 40), 2);  // 2^-127 / 2^-127 = 1
  EXPECT_EQ(dequantize(m)[40], std::ldexp(1.0f, -127));
}

TEST(FormatMxfp4Quant, ErrorBoundAndRequantization) {
  std::mt19937 rng(31337);
  for (float top : {1e-30f, 1e-3f, 1.0f, 5e3f, 1e30f}) {
    const int64_t rows = 24, cols = 256;
    const auto x = random_matrix(rng, rows, cols, 32, top, 30.0f);
    const Fp4Matrix q = quantize_mxfp4(x.data(), rows, cols);
    const auto d = dequantize(q);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double xv = x[static_cast<size_t>(r * cols + c)];
        const double s = q.scale(r, c / 32);
        const double a = std::fabs(xv) / s;
        ASSERT_LE(a, 6.0) << "a rounded-up power-of-two scale never saturates";
        ASSERT_LE(std::fabs(xv - d[static_cast<size_t>(r * cols + c)]), e2m1_error_units(a) * s);
      }
    }
    // Requantization: the values are a fixed point; the encoding is too,
    // except a block whose largest code value is 3 (scaled amax in (3, 3.5)),
    // which requantizes to half the scale and doubled codes (same values).
    const Fp4Matrix q2 = quantize_mxfp4(d.data(), rows, cols);
    const auto d2 = dequantize(q2);
    for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(bits(std::fabs(d2[i])), bits(std::fabs(d[i]))) << i;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t kb = 0; kb < q.scale_cols(); ++kb) {
        const float q_max = block_max_code_value(q, r, kb);
        const uint8_t s = q.scales[static_cast<size_t>(r * q.scale_cols() + kb)];
        if (q_max == 3.0f && s > 0) {
          EXPECT_EQ(q2.scales[static_cast<size_t>(r * q.scale_cols() + kb)], s - 1);
        } else if (q_max > 0.0f) {
          EXPECT_TRUE(block_equal(q, q2, r, kb)) << "top " << top << " row " << r << " block " << kb;
        }
      }
    }
  }
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(128 * 512);
  for (auto& v : x) v = gauss(rng);
  const auto d = dequantize(quantize_mxfp4(x.data(), 128, 512));
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - d[i]) * (double(x[i]) - d[i]);
    den += double(x[i]) * x[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.15);
}

TEST(FormatQuant, DequantizeRejectsInconsistentMatrices) {
  std::vector<float> x(64, 1.0f);
  Fp4Matrix m = quantize_nvfp4(x.data(), 2, 32);
  m.packed.pop_back();
  EXPECT_NE(error_of([&] { dequantize(m); }).find("packed has 31 bytes"), std::string::npos);
  m = quantize_nvfp4(x.data(), 2, 32);
  m.scales.push_back(0);
  EXPECT_THROW(dequantize(m), Error);
}

}  // namespace
}  // namespace fp4moe
