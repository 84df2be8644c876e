// FP4 weights as e4m3 and activations as e4m3 with scales (W4A8, docs/fp8.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <random>
#include <vector>

#include "format/fp8_fold.hpp"
#include "format/fp8_fragment.hpp"
#include "format/prepare_gemm.hpp"
#include "format/fp8_rows.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "test_util.hpp"

namespace fp4moe {
namespace {

using test::error_of;

std::vector<float> gaussian(int64_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

TEST(Fp8Fold, EveryCodeAtEveryShiftInRangeIsExact) {
  for (int s = kFoldMinShift; s <= kFoldMaxShift; ++s)
    for (uint8_t c = 0; c < 16; ++c) {
      const float want = std::ldexp(e2m1_decode(c), s);
      const uint8_t b = e2m1_to_e4m3(c, s);
      EXPECT_EQ(e4m3_decode(b), want) << "code " << int(c) << " shift " << s;
      EXPECT_EQ(b, e4m3_encode(want)) << "code " << int(c) << " shift " << s;  // and it is the encoder's answer
      EXPECT_EQ(std::signbit(e4m3_decode(b)), bool(c & 8)) << "code " << int(c);
    }
}

TEST(Fp8Fold, TheRangeIsTight) {
  // one shift further either way some code is no e4m3 value
  EXPECT_NE(e4m3_decode(e4m3_encode(std::ldexp(6.f, kFoldMaxShift + 1))), std::ldexp(6.f, kFoldMaxShift + 1));
  EXPECT_NE(e4m3_decode(e4m3_encode(std::ldexp(0.5f, kFoldMinShift - 1))), std::ldexp(0.5f, kFoldMinShift - 1));
}

TEST(Fp8Fold, ByteTableHoldsTheEightMagnitudes) {
  for (int s = kFoldMinShift; s <= kFoldMaxShift; ++s) {
    uint32_t lo = 0, hi = 0;
    e4m3_fold_table(s, lo, hi);
    for (int c = 0; c < 8; ++c)
      EXPECT_EQ((c < 4 ? lo >> (8 * c) : hi >> (8 * (c - 4))) & 0xFF, e2m1_to_e4m3(uint8_t(c), s)) << c << " " << s;
  }
}

TEST(Fp8Fold, Mxfp4FoldsExactlyWithARowExponent) {
  const int64_t rows = 48, cols = 2880;  // gpt-oss's width: 90 blocks of 32
  std::vector<float> x = gaussian(rows * cols, 1);
  for (int64_t r = 0; r < rows; ++r)  // rows of very different magnitudes
    for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] *= std::ldexp(1.f, int(r % 24) - 12);
  const Fp4Matrix m = quantize_mxfp4(x.data(), rows, cols);
  const Mxfp4Fold f = plan_mxfp4_fold(m);
  ASSERT_TRUE(f.exact()) << f.below_range_blocks;
  EXPECT_EQ(f.blocks, rows * cols / 32);
  EXPECT_GT(f.max_row_span, 0);
  const std::vector<uint8_t> b = fold_mxfp4_to_e4m3(m, f);
  const std::vector<float> want = dequantize(m);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(std::ldexp(e4m3_decode(b[size_t(r * cols + c)]), f.row_exponent[size_t(r)]), want[size_t(r * cols + c)])
          << r << ", " << c;
}

TEST(Fp8Fold, Mxfp4BlocksFarBelowTheirRowAreCountedNotFolded) {
  Fp4Matrix m;
  m.format = Fp4Format::mxfp4, m.rows = 2, m.cols = 96;
  m.packed.assign(size_t(2 * 48), 0x21);          // codes 1 (0.5) and 2 (1.0) everywhere
  m.scales = {127, 127 - 15, 127 - 14,             // row 0: 2^0, 2^-15 (2^15 below: out), 2^-14 (in)
              127 + 40, 127 + 40, 127 + 40};       // row 1: large, all alike
  for (int c = 0; c < 32; ++c) m.packed[size_t(48 + 16 + c / 2)] = 0;  // row 1's middle block: all zero
  const Mxfp4Fold f = plan_mxfp4_fold(m);
  EXPECT_EQ(f.below_range_blocks, 1);
  EXPECT_EQ(f.zero_blocks, 1);
  EXPECT_EQ(f.row_exponent[0], -kFoldMaxShift);
  EXPECT_EQ(f.row_exponent[1], 40 - kFoldMaxShift);
  EXPECT_EQ(f.max_row_span, 15);
  EXPECT_NE(error_of([&] { (void)fold_mxfp4_to_e4m3(m, f); }).find("1 blocks lie more than 2^14 below"),
            std::string::npos);
  const std::vector<uint8_t> flushed = fold_mxfp4_to_e4m3(m, f, /*allow_flush=*/true);
  for (int c = 32; c < 64; ++c) EXPECT_EQ(flushed[size_t(c)], 0) << c;
  EXPECT_EQ(e4m3_decode(flushed[64]), std::ldexp(0.5f, -14 + kFoldMaxShift));  // 2^-14 x 0.5 at row exponent -6
  EXPECT_NE(error_of([&] { (void)plan_mxfp4_fold(quantize_nvfp4(gaussian(32, 2).data(), 1, 32)); }).find("not mxfp4"),
            std::string::npos);
}

TEST(Fp8Fold, Nvfp4RoundedFoldStaysWithinE4m3Rounding) {
  const int64_t rows = 32, cols = 2048;
  const std::vector<float> x = gaussian(rows * cols, 3, 0.02f);
  const Fp4Matrix m = quantize_nvfp4(x.data(), rows, cols);
  const Nvfp4Fold f = fold_nvfp4_to_e4m3_rounded(m);
  EXPECT_GT(f.rounded, 0) << "e2m1 x e4m3 has up to 6 significant bits: some must round";
  const int g = m.block_size();
  for (int64_t r = 0; r < rows; ++r) {
    float row_max = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float exact = e2m1_decode(m.code(r, c)) * e4m3_decode(m.scales[size_t(r * (cols / g) + c / g)]);
      const float got = std::ldexp(e4m3_decode(f.bytes[size_t(r * cols + c)]), f.row_exponent[size_t(r)]);
      row_max = std::max(row_max, std::fabs(e4m3_decode(f.bytes[size_t(r * cols + c)])));
      // half an e4m3 ulp (2^-4 relative) for normals, or the subnormal step
      EXPECT_LE(std::fabs(got - exact), std::max(std::fabs(exact) / 16.f, std::ldexp(1.f, -10 + f.row_exponent[size_t(r)])))
          << r << ", " << c;
    }
    EXPECT_LE(row_max, kE4m3Max);
    EXPECT_GT(row_max, kE4m3Max / 2) << "the row exponent lifts the row's largest near the top";
  }
}

TEST(Fp8Fold, Nvfp4SplitIntoTwoE4m3IsExact) {
  const int64_t rows = 32, cols = 2048;
  const std::vector<float> x = gaussian(rows * cols, 5, 0.02f);
  const Fp4Matrix m = quantize_nvfp4(x.data(), rows, cols);
  const Nvfp4Split sp = split_nvfp4_to_e4m3(m);
  EXPECT_EQ(sp.inexact, 0);
  const int g = m.block_size();
  int64_t with_lo = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const float exact = e2m1_decode(m.code(r, c)) * e4m3_decode(m.scales[size_t(r * (cols / g) + c / g)]);
      ASSERT_EQ(std::ldexp(e4m3_decode(sp.hi[i]) + e4m3_decode(sp.lo[i]), sp.row_exponent[size_t(r)]), exact) << r << ", " << c;
      with_lo += (sp.lo[i] & 0x7F) != 0;
    }
  EXPECT_GT(with_lo, 0);
}

TEST(Fp8Fragment, KPermutationIsABijectionOfEach16) {
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(fp8_k_at(fp8_k_position(k)), k);
    EXPECT_GE(fp8_k_position(k), 0);
    EXPECT_LT(fp8_k_position(k), 16);
  }
}

// Every byte of every FP8 A register made from the prepared words is the e4m3
// of the weight the permuted activation at that position meets.
TEST(Fp8Fragment, RegistersFromPreparedWordsMeetThePermutedActivations) {
  const int64_t n = 32, k = 256;
  const std::vector<float> x = gaussian(n * k, 6);
  const Fp4Matrix m = quantize_mxfp4(x.data(), n, k);
  const PreparedExpertWeights p = prepare_gemm_weights(std::span<const Fp4Matrix>(&m, 1));
  const int shift = 3;
  uint32_t lo = 0, hi = 0;
  e4m3_fold_table(shift, lo, hi);
  for (int64_t rg = 0; rg < n / 16; ++rg)
    for (int64_t kk = 0; kk < k / 64; ++kk)
      for (int lane = 0; lane < 32; ++lane)
        for (int t = 0; t < 4; ++t) {
          uint32_t word;
          std::memcpy(&word, p.weights.data() + ((rg * (k / 64) + kk) * 32 + lane) * 16 + 4 * t, 4);
          const uint32_t regs[2] = {fp8_a_register<0>(word, lo, hi), fp8_a_register<1>(word, lo, hi)};
          // the k32 step's registers 0/1 (t even) or 2/3 (t odd): hardware k = 4c + v (+16)
          const int c = lane % 4;
          for (int half = 0; half < 2; ++half)
            for (int v = 0; v < 4; ++v) {
              const int64_t row = rg * 16 + lane / 4 + 8 * half;
              const int k_hw = 4 * c + v + 16 * (t % 2);                 // where the MMA reads it
              const int64_t k32 = kk * 64 + 32 * (t / 2);
              const int64_t col = k32 + 16 * (k_hw / 16) + fp8_k_at(k_hw % 16);  // the activation stored there
              const uint8_t byte = uint8_t(regs[half] >> (8 * v));
              ASSERT_EQ(byte, e2m1_to_e4m3(m.code(row, col), shift))
                  << "row " << row << " col " << col << " lane " << lane << " word " << t << " byte " << v;
            }
        }
}

TEST(Fp8Rows, MmaOrderPermutesEach16) {
  const std::vector<float> x = gaussian(2 * 64, 7);
  const Fp8Rows q = quantize_rows_e4m3(x.data(), 2, 64, 0);
  const std::vector<uint8_t> o = fp8_rows_in_mma_order(q);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t p = 0; p < 64; ++p)
      EXPECT_EQ(o[size_t(r * 64 + p)], q.codes[size_t(r * 64 + p / 16 * 16 + fp8_k_at(int(p % 16)))]);
  Fp8Rows odd = quantize_rows_e4m3(x.data(), 1, 40, 0);
  EXPECT_NE(error_of([&] { (void)fp8_rows_in_mma_order(odd); }).find("40 columns"), std::string::npos);
}

TEST(Fp8Rows, PerRowAndPerGroupScales) {
  const int64_t rows = 5, cols = 2880;
  std::vector<float> x = gaussian(rows * cols, 4);
  x[size_t(1 * cols + 7)] = 300.f;  // an outlier: per row it costs the whole row resolution
  for (int64_t c = 0; c < cols; ++c) x[size_t(4 * cols + c)] = 0.f;  // an all-zero row
  for (int64_t group : {int64_t(0), int64_t(128)}) {
    const Fp8Rows q = quantize_rows_e4m3(x.data(), rows, cols, group);
    EXPECT_EQ(q.groups(), group == 0 ? 1 : 23) << "2880 = 22 x 128 + 64";
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float v = x[size_t(r * cols + c)], got = q.value(r, c);
        const float scale = q.scales[size_t(r * q.groups() + (group ? c / group : 0))];
        // e4m3 rounds to 3 fraction bits: within 2^-4 relative, or half the subnormal step 2^-10 x scale
        ASSERT_LE(std::fabs(got - v), std::max(std::fabs(v) / 16.f, std::ldexp(scale, -10))) << r << ", " << c;
      }
    EXPECT_EQ(q.value(1, 7), 300.f) << "a row's largest is its block's largest e4m3, exactly";
    EXPECT_EQ(q.scales[size_t(4 * q.groups())], 1.f) << "an all-zero row";
  }
  std::vector<float> bad = x;
  bad[size_t(2 * cols + 9)] = std::nanf("");
  EXPECT_NE(error_of([&] { (void)quantize_rows_e4m3(bad.data(), rows, cols, 128); }).find("x[2, 9] = nan"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)quantize_rows_e4m3(x.data(), rows, cols, -1); }).find("group -1"), std::string::npos);
}

}  // namespace
}  // namespace fp4moe
