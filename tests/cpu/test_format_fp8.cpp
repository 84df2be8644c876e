// FP4 weights as e4m3 and activations as e4m3 with scales (W4A8, docs/fp8.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <random>
#include <vector>

#include "format/fp8_fold.hpp"
#include "format/fp8_fragment.hpp"
#include "format/prepare_fp8.hpp"
#include "format/prepared_layout.hpp"
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

// The kernel's table arithmetic against the exact encoder: every code at every shift it covers.
TEST(Fp8Fragment, FoldTableIsTheExactE4m3OfEveryCodeAtEveryShift) {
  for (uint32_t u = 0; u < uint32_t(fp8::kFp8TableCodes); ++u) {
    uint32_t lo = 0, hi = 0;
    fp8::fold_table(u, lo, hi);
    const int shift = int(u) + fp8::kFp8TableMinShift;
    for (int c = 0; c < 8; ++c)
      EXPECT_EQ(uint8_t((c < 4 ? lo : hi) >> (8 * (c % 4))), e2m1_to_e4m3(uint8_t(c), shift)) << "u " << u << " code " << c;
  }
}

// NVFP4's rounded tables against the exact encoder: every code of every scale
// mantissa at every shift they cover is e4m3's nearest (ties to even) to
// |e2m1| (1 + m/8) 2^s, and at m = 0 they are the exact fold_table.
TEST(Fp8Fragment, RoundedTableIsTheNearestE4m3OfEveryProduct) {
  int rounded = 0;
  for (uint32_t m = 0; m < 8; ++m)
    for (int s = fp8::kFp8TableMinShift; s <= fp8::kFp8RoundedTableMaxShift; ++s) {
      const uint32_t u = uint32_t(s - fp8::kFp8TableMinShift);
      uint32_t lo = 0, hi = 0;
      fp8::rounded_fold_table(u | m << 4, lo, hi);
      for (int c = 0; c < 8; ++c) {
        const float exact = std::ldexp(e2m1_decode(uint8_t(c)) * (1.f + float(m) / 8.f), s);
        const uint8_t got = uint8_t((c < 4 ? lo : hi) >> (8 * (c % 4)));
        EXPECT_EQ(got, e4m3_encode(exact)) << "m " << m << " shift " << s << " code " << c;
        EXPECT_LT(e4m3_decode(got), 448.f);
        rounded += e4m3_decode(got) != exact;
      }
      if (m == 0) {
        uint32_t elo = 0, ehi = 0;
        fp8::fold_table(u, elo, ehi);
        EXPECT_EQ(lo, elo) << "shift " << s;
        EXPECT_EQ(hi, ehi) << "shift " << s;
      }
    }
  // 1.5, 3 and 6 times (1 + m/8) need a fourth bit for m = 1 and m >= 3 (but not 4)
  EXPECT_EQ(rounded, 3 * 5 * (fp8::kFp8RoundedTableMaxShift - fp8::kFp8TableMinShift + 1));
}

// NVFP4 weights fold only when opted in, and then each byte of the FP8
// layout, times its row's scale, is the kernel table's rounded weight
// (fp8_folded_weight, the CPU reference's) times the global scale; about a
// fifth of the weights change. K = 448 ends in half a scale granule.
TEST(Fp8Fragment, Nvfp4WeightsFoldRoundedWhenOptedIn) {
  const int64_t n = 32, k = 448;
  const Fp4Matrix m = quantize_nvfp4(gaussian(n * k, 12).data(), n, k);
  const PreparedExpertWeights p = prepare_gemm_weights(std::span<const Fp4Matrix>(&m, 1));
  const std::string e = error_of([&] { (void)prepare_fp8_gemm_weights(p); });
  EXPECT_NE(e.find("the weights are nvfp4"), std::string::npos) << e;
  EXPECT_NE(e.find("fp8_rounds_nvfp4"), std::string::npos) << e;
  const PreparedFp8Weights f = prepare_fp8_gemm_weights(p, /*round_nvfp4=*/true);
  int64_t changed = 0;
  for (int64_t row = 0; row < n; ++row)
    for (int64_t col = 0; col < k; ++col) {
      const double got = double(e4m3_decode(prepared_fp8_code(f, 0, row, col))) * double(f.row_scale[size_t(row)]);
      const double want = fp8_folded_weight(m.code(row, col), m.scale(row, col / m.block_size())) * double(m.weight_scale_2);
      ASSERT_EQ(got, want) << "row " << row << " col " << col;
      changed += want != double(e2m1_decode(m.code(row, col))) * double(m.scale(row, col / m.block_size())) * double(m.weight_scale_2);
    }
  EXPECT_GT(changed, n * k / 10);
  EXPECT_LT(changed, n * k / 3);
}

// Every byte of every FP8 A register a lane builds from the FP8 layout is the
// e4m3 of the weight wgmma's A layout puts there (reg 0: row r, k 4c..4c+3;
// reg 1: row r+8; regs 2, 3: k + 16), times 2^-row_exponent; the row scales
// give the weights back exactly. K = 448 ends in half a scale granule: its
// unused half stays zero.
TEST(Fp8Fragment, RegistersHoldTheFoldedWeightsInWgmmaOrder) {
  for (const int64_t k : {int64_t(384), int64_t(448)}) {
    const int64_t n = 48;
    std::vector<float> x = gaussian(n * k, 6);
    for (int64_t c = 0; c < k; ++c) x[size_t(5 * k + c)] *= c < 64 ? 300.f : 1.f;  // a row spanning about 9 octaves
    for (int64_t c = 64; c < 96; ++c) x[size_t(7 * k + c)] = 0.f;                 // an all-zero block
    const Fp4Matrix m = quantize_mxfp4(x.data(), n, k);
    const PreparedExpertWeights p = prepare_gemm_weights(std::span<const Fp4Matrix>(&m, 1));
    const PreparedFp8Weights f = prepare_fp8_gemm_weights(p);
    EXPECT_GE(f.max_row_span, 8);
    for (int64_t rg = 0; rg < n / 16; ++rg)
      for (int64_t kk = 0; kk < k / 64; ++kk)
        for (int lane = 0; lane < 32; ++lane) {
          const int c = lane % 4;
          for (int j = 0; j < 2; ++j)
            for (int h = 0; h < 2; ++h) {
              const int64_t row = rg * 16 + lane / 4 + 8 * h, k32 = kk * 64 + 32 * j;
              uint32_t word;
              std::memcpy(&word, f.weights.data() + ((rg * (k / 64) + kk) * 32 + lane) * 16 + 4 * (2 * j + h), 4);
              const uint8_t u = f.scales[size_t(pack::scale_offset(k, row, k32))];
              uint32_t lo, hi;
              fp8::fold_table(u, lo, hi);
              const uint32_t regs[2] = {fp8::low_register(word, lo, hi), fp8::high_register(word, lo, hi)};
              for (int g = 0; g < 2; ++g)
                for (int v = 0; v < 4; ++v) {
                  const int64_t col = k32 + 16 * g + 4 * c + v;
                  const double value = std::ldexp(double(e4m3_decode(uint8_t(regs[g] >> (8 * v)))), 0) *
                                       double(f.row_scale[size_t(row)]);
                  ASSERT_EQ(value, double(m.dequant(row, col))) << "row " << row << " col " << col << " lane " << lane;
                  ASSERT_EQ(prepared_fp8_code(f, 0, row, col), uint8_t(regs[g] >> (8 * v)));
                }
            }
        }
    ASSERT_EQ(f.scales.size(), size_t(pack::scale_bytes(n, k)));
    for (int64_t row = 0; row < n; ++row)
      for (int64_t col = k; col < pack::scale_granules(k) * 128; col += 16)
        ASSERT_EQ(f.scales[size_t(pack::scale_offset(k, row, col))], 0) << "K " << k << " row " << row << " col " << col;
  }
}

TEST(Fp8Fragment, WeightsTheFoldCannotHoldAreRefusedByName) {
  const int64_t n = 16, k = 128;
  std::vector<float> x = gaussian(n * k, 8);
  for (int64_t c = 32; c < k; ++c) x[size_t(3 * k + c)] *= 1e-5f;  // row 3: blocks 1..3 2^16 under block 0
  const Fp4Matrix m = quantize_mxfp4(x.data(), n, k);
  const PreparedExpertWeights p = prepare_gemm_weights(std::span<const Fp4Matrix>(&m, 1));
  const std::string e = error_of([&] { (void)prepare_fp8_gemm_weights(p); });
  EXPECT_NE(e.find("expert 0 has 3 nonzero mxfp4 blocks (the first in row 3)"), std::string::npos) << e;
  // a block whose first 16 columns are zero is counted at its second half
  for (int64_t c = 32; c < 48; ++c) x[size_t(3 * k + c)] = 0.f;
  const Fp4Matrix half = quantize_mxfp4(x.data(), n, k);
  const std::string eh = error_of([&] { (void)prepare_fp8_gemm_weights(prepare_gemm_weights(std::span<const Fp4Matrix>(&half, 1))); });
  EXPECT_NE(eh.find("expert 0 has 3 nonzero mxfp4 blocks (the first in row 3)"), std::string::npos) << eh;
  std::vector<float> y = gaussian(n * k, 9);
  const Fp4Matrix nv = quantize_nvfp4(y.data(), n, k);
  const std::string e2 = error_of([&] { (void)prepare_fp8_gemm_weights(prepare_gemm_weights(std::span<const Fp4Matrix>(&nv, 1))); });
  EXPECT_NE(e2.find("the weights are nvfp4"), std::string::npos) << e2;
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
