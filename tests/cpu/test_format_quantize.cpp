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

// ModelOpt's arithmetic, written out step by step (docs/formats.md); the
// committed ModelOpt vectors (test_format_modelopt_vectors.cpp) check it
// against ModelOpt's own code.
float modelopt_ws2(float amax) { return amax * (1.0f / 2688.0f); }

TEST(FormatNvfp4Quant, TinyAmaxIsAnErrorOnlyWhereWeightScale2Underflows) {
  std::vector<float> x(16, 0.0f);
  x[0] = 1e-38f;  // ws2 = 3.7e-42, an fp32 subnormal: still quantizes
  const Fp4Matrix m = quantize_nvfp4(x.data(), 1, 16);
  EXPECT_EQ(bits(m.weight_scale_2), bits(modelopt_ws2(1e-38f)));
  EXPECT_GT(m.weight_scale_2, 0.0f);
  x[0] = 1e-44f;  // amax / 2688 underflows to 0
  const std::string e = error_of([&] { quantize_nvfp4(x.data(), 1, 16); });
  EXPECT_NE(e.find("amax"), std::string::npos) << e;
  EXPECT_NE(e.find("underflows"), std::string::npos) << e;
}

TEST(FormatNvfp4Quant, AllZeroMatrixTakesModelOptsZeroAmaxRule) {
  for (float z : {0.0f, -0.0f}) {
    std::vector<float> x(3 * 48, z);
    const Fp4Matrix m = quantize_nvfp4(x.data(), 3, 48);
    EXPECT_EQ(m.rows, 3);
    EXPECT_EQ(m.cols, 48);
    EXPECT_EQ(m.packed, std::vector<uint8_t>(3 * 24, 0));
    EXPECT_EQ(m.scales, std::vector<uint8_t>(3 * 3, 0x38));  // every block scale 1.0
    EXPECT_EQ(bits(m.weight_scale_2), bits(modelopt_ws2(6.0f)));  // amax := 6
    for (float v : dequantize(m)) EXPECT_EQ(bits(v), 0u);
  }
  const Fp4Matrix empty = quantize_nvfp4(nullptr, 0, 32);
  EXPECT_TRUE(empty.packed.empty());
  EXPECT_TRUE(dequantize(empty).empty());
}

TEST(FormatNvfp4Quant, ZeroBlocksGetScaleOneAndNegativeZeroIsCodeZero) {
  std::vector<float> x(64, 0.0f);
  x[16] = 3.0f;
  x[40] = -0.0f;
  x[17] = -0.0f;
  const Fp4Matrix m = quantize_nvfp4(x.data(), 1, 64);
  EXPECT_EQ(m.scales[0], 0x38);  // s = 0 / fl(6 ws2) = 0 -> 1.0
  EXPECT_EQ(m.scales[2], 0x38);
  EXPECT_EQ(m.scales[3], 0x38);
  EXPECT_EQ(m.scales[1], 0x7E);  // s = 3 / fl(6 * ws2) ~ 448
  EXPECT_EQ(m.code(0, 16), 7);
  for (int c : {0, 15, 17, 32, 40, 63}) EXPECT_EQ(m.code(0, c), 0) << c;  // -0.0: code 0, not 8
  // a tiny negative value (not -0.0) keeps its sign: code 8
  x[20] = -1e-6f;
  EXPECT_EQ(quantize_nvfp4(x.data(), 1, 64).code(0, 20), 8);
}

TEST(FormatNvfp4Quant, StepByStep) {
  // amax 6: ws2 = 6 * fl(1/2688); block 0 (bmax 6): s = 6 / fl(6 * ws2), about
  // 448 -> e4m3 448 (0x7E); step = fl(448 * ws2), about 1. Block 1 (bmax 1.5):
  // s about 112 (0x6E), step about 0.25. Each code is e2m1 of x / step.
  std::vector<float> x(32, 0.0f);
  const float b0[6] = {6.0f, -3.0f, 0.5f, 0.25f, 0.75f, -5.0f};
  for (int i = 0; i < 6; ++i) x[size_t(i)] = b0[i];
  x[16] = 1.5f;
  x[17] = -0.3125f;
  x[18] = 0.1f;
  const Fp4Matrix m = quantize_nvfp4(x.data(), 1, 32);
  const float ws2 = modelopt_ws2(6.0f);
  EXPECT_EQ(bits(m.weight_scale_2), bits(ws2));
  EXPECT_EQ(m.scales[0], e4m3_encode(6.0f / (6.0f * ws2)));
  EXPECT_EQ(m.scales[0], 0x7E);
  EXPECT_EQ(m.scales[1], e4m3_encode(1.5f / (6.0f * ws2)));
  EXPECT_EQ(m.scales[1], 0x6E);
  const float step0 = 448.0f * ws2, step1 = 112.0f * ws2;
  for (int i = 0; i < 6; ++i) {
    const float q = b0[i] / step0;
    EXPECT_EQ(m.code(0, i), e2m1_encode(q)) << i;
  }
  EXPECT_EQ(m.code(0, 0), 7);
  EXPECT_EQ(m.code(0, 1), 13);
  EXPECT_EQ(m.code(0, 5), 14);
  EXPECT_EQ(m.code(0, 16), 7);
  EXPECT_EQ(m.code(0, 17), e2m1_encode(-0.3125f / step1));
  EXPECT_EQ(m.code(0, 18), 1);
  // Packing: element 2i in the low nibble.
  EXPECT_EQ(m.packed[0], (13 << 4) | 7);
  // Dequantization: e2m1 * fl(scale * ws2), ModelOpt's order.
  const auto d = dequantize(m);
  EXPECT_EQ(bits(d[0]), bits(6.0f * step0));
  EXPECT_EQ(bits(d[1]), bits(-3.0f * step0));
  EXPECT_EQ(bits(d[16]), bits(6.0f * step1));
  EXPECT_EQ(bits(m.dequant(0, 17)), bits(d[17]));
  EXPECT_EQ(m.scale(0, 1), 112.0f);
  EXPECT_THROW(m.dequant(0, 32), Error);
  EXPECT_THROW(m.scale(1, 0), Error);
}

TEST(FormatNvfp4Quant, ScalesBelowTheSmallestSubnormalClampWithRealCodes) {
  // Block 1's bmax is 2^-20 of amax: s = bmax / fl(6 ws2) is about 448 * 2^-20,
  // below e4m3's smallest subnormal 2^-9: clamped to 2^-9 (0x01), and its codes
  // are x / fl(2^-9 * ws2), not zeros.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[16] = std::ldexp(1.0f, -20);
  x[17] = -std::ldexp(1.0f, -22);
  const Fp4Matrix m = quantize_nvfp4(x.data(), 1, 32);
  EXPECT_EQ(m.scales[1], 0x01);
  const float step = std::ldexp(1.0f, -9) * m.weight_scale_2;
  EXPECT_EQ(m.code(0, 16), e2m1_encode(x[16] / step));
  EXPECT_EQ(m.code(0, 17), e2m1_encode(x[17] / step));
  EXPECT_NE(m.code(0, 16), 0);
}

TEST(FormatNvfp4Quant, SharedAmaxForGateAndUp) {
  std::mt19937 rng(3);
  const auto gate = random_matrix(rng, 4, 64, 16, 1.0f, 6.0f);
  const auto up = random_matrix(rng, 4, 64, 16, 20.0f, 6.0f);
  const float amax = std::max(nvfp4_amax(gate.data(), 4, 64), nvfp4_amax(up.data(), 4, 64));
  EXPECT_EQ(amax, nvfp4_amax(up.data(), 4, 64));
  const Fp4Matrix g = quantize_nvfp4(gate.data(), 4, 64, amax), u = quantize_nvfp4(up.data(), 4, 64, amax);
  EXPECT_EQ(bits(g.weight_scale_2), bits(u.weight_scale_2));
  EXPECT_EQ(bits(g.weight_scale_2), bits(modelopt_ws2(amax)));
  const Fp4Matrix own = quantize_nvfp4(up.data(), 4, 64);
  EXPECT_EQ(own.packed, u.packed);  // up's own amax is the shared one
  EXPECT_NE(quantize_nvfp4(gate.data(), 4, 64).weight_scale_2, g.weight_scale_2);
  std::string e = error_of([&] { quantize_nvfp4(up.data(), 4, 64, amax / 2); });
  EXPECT_NE(e.find("amax"), std::string::npos) << e;
  e = error_of([&] { quantize_nvfp4(up.data(), 4, 64, std::numeric_limits<float>::infinity()); });
  EXPECT_NE(e.find("amax = inf"), std::string::npos) << e;
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
  EXPECT_EQ(bits(a.weight_scale_2), bits(b.weight_scale_2));
  const Fp4Matrix c = quantize_nvfp4_bf16(xb.data(), 16, 128, 100.0f);
  EXPECT_EQ(bits(c.weight_scale_2), bits(modelopt_ws2(100.0f)));
}

// ---- NVFP4 error bounds ---------------------------------------------------------------

TEST(FormatNvfp4Quant, PerElementErrorBoundAndFrobenius) {
  std::mt19937 rng(77);
  for (float top : {1e-5f, 1.0f, 4e4f}) {
    const int64_t rows = 64, cols = 256;
    const auto x = random_matrix(rng, rows, cols, 16, top, 24.0f);
    const Fp4Matrix q = quantize_nvfp4(x.data(), rows, cols);
    const auto d = dequantize(q);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double xv = x[static_cast<size_t>(r * cols + c)];
        const double dv = d[static_cast<size_t>(r * cols + c)];
        ASSERT_EQ(dv, q.dequant(r, c));
        const double sv = q.scale(r, c / 16);
        ASSERT_GE(sv, std::ldexp(1.0, -9)) << "block scales never round to 0";
        const double step = double(float(sv) * q.weight_scale_2);
        const double a = std::fabs(xv) / step;
        if (sv >= std::ldexp(1.0, -6)) {
          EXPECT_LE(a, 6.4 * (1 + 1e-6)) << "a normal scale saturates by at most 1/15";
        }
        const double bound = e2m1_error_units(a) * step + 1e-6 * (std::fabs(xv) + 6.0 * step);
        ASSERT_LE(std::fabs(xv - dv), bound) << "x[" << r << ", " << c << "] = " << xv << " dequant " << dv << " step " << step;
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
