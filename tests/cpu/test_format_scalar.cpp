// Scalar codecs: E2M1, float8_e4m3fn / UE4M3, UE8M0, bf16 (docs/formats.md).
#include <gtest/gtest.h>

#include "test_util.hpp"

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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

float up(float x) { return std::nextafter(x, kInf); }
float down(float x) { return std::nextafter(x, -kInf); }

// Brute-force round-to-nearest over a sorted table of non-negative values;
// a tie goes to the even index (= even code: the mantissa LSB is the code LSB).
// Above the last value: saturate.
size_t nearest_even(const std::vector<double>& table, double a) {
  if (a >= table.back()) return table.size() - 1;
  size_t best = 0;
  for (size_t i = 1; i < table.size(); ++i) {
    const double di = std::fabs(table[i] - a), db = std::fabs(table[best] - a);
    if (di < db || (di == db && (i % 2) == 0)) best = i;
  }
  return best;
}

std::vector<double> e2m1_table() {
  std::vector<double> t;
  for (uint8_t c = 0; c < 8; ++c) t.push_back(e2m1_decode(c));
  return t;
}

std::vector<double> e4m3_table() {  // bytes 0x00..0x7E
  std::vector<double> t;
  for (int b = 0; b <= 0x7E; ++b) t.push_back(e4m3_decode(static_cast<uint8_t>(b)));
  return t;
}

// ---- E2M1 ---------------------------------------------------------------------

TEST(FormatE2m1, DecodeTable) {
  const float expected[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  for (uint8_t c = 0; c < 16; ++c) {
    EXPECT_EQ(std::bit_cast<uint32_t>(e2m1_decode(c)), std::bit_cast<uint32_t>(expected[c])) << int(c);
  }
  EXPECT_TRUE(std::signbit(e2m1_decode(8)));
  EXPECT_THROW(e2m1_decode(16), Error);
}

TEST(FormatE2m1, EveryCodeRoundTrips) {
  for (uint8_t c = 0; c < 16; ++c) EXPECT_EQ(e2m1_encode(e2m1_decode(c)), c) << int(c);
}

TEST(FormatE2m1, TiesGoToEvenMantissa) {
  const std::pair<float, float> cases[] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2},
                                           {2.5f, 2},  {3.5f, 4},  {5.0f, 4}};
  for (auto [x, want] : cases) {
    EXPECT_EQ(e2m1_decode(e2m1_encode(x)), want) << x;
    EXPECT_EQ(e2m1_decode(e2m1_encode(-x)), -want) << -x;
  }
  // Every tie point between adjacent magnitudes, and either side of it.
  for (uint8_t i = 0; i < 7; ++i) {
    const float lo = e2m1_decode(i), hi = e2m1_decode(static_cast<uint8_t>(i + 1));
    const float mid = 0.5f * (lo + hi);
    const uint8_t even = (i % 2 == 0) ? i : static_cast<uint8_t>(i + 1);
    EXPECT_EQ(e2m1_encode(mid), even) << mid;
    EXPECT_EQ(e2m1_encode(-mid), even | 8) << -mid;
    EXPECT_EQ(e2m1_encode(down(mid)), i) << mid;
    EXPECT_EQ(e2m1_encode(up(mid)), i + 1) << mid;
    EXPECT_EQ(e2m1_encode(-up(mid)), (i + 1) | 8) << mid;
  }
}

TEST(FormatE2m1, SaturatesAndMapsNanToPlusSix) {
  for (float x : {6.0f, up(6.0f), 6.5f, 7.0f, 100.0f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(e2m1_encode(x), 7) << x;
    EXPECT_EQ(e2m1_encode(-x), 15) << -x;
  }
  EXPECT_EQ(e2m1_encode(kNan), 7);
  EXPECT_EQ(e2m1_encode(-kNan), 7);
}

TEST(FormatE2m1, PreservesSignOfZero) {
  EXPECT_EQ(e2m1_encode(0.0f), 0);
  EXPECT_EQ(e2m1_encode(-0.0f), 8);
  EXPECT_EQ(e2m1_encode(-0.1f), 8);
  EXPECT_EQ(e2m1_encode(-0.25f), 8);  // tie, rounds to (negative) zero
  EXPECT_EQ(e2m1_encode(-std::numeric_limits<float>::denorm_min()), 8);
  EXPECT_EQ(e2m1_encode(std::numeric_limits<float>::denorm_min()), 0);
}

TEST(FormatE2m1, MatchesBruteForceNearest) {
  const auto table = e2m1_table();
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = u(rng);
    const auto want = static_cast<uint8_t>(nearest_even(table, std::fabs(x)) | (std::signbit(x) ? 8 : 0));
    ASSERT_EQ(e2m1_encode(x), want) << x;
  }
}

// ---- float8_e4m3fn ----------------------------------------------------------------

TEST(FormatE4m3, DecodeKnownValues) {
  EXPECT_EQ(e4m3_decode(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(e4m3_decode(0x07), std::ldexp(7.0f, -9));   // largest subnormal
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x3C), 1.5f);
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0xFE), -448.0f);
  EXPECT_EQ(e4m3_decode(0x77), 240.0f);  // exponent 15 is an ordinary binade
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
}

TEST(FormatE4m3, EveryByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    const float v = e4m3_decode(byte);
    if (b == 0x7F || b == 0xFF) {
      EXPECT_TRUE(std::isnan(v)) << b;
      EXPECT_EQ(e4m3_encode(v), 0x7F) << b;
      continue;
    }
    EXPECT_FALSE(std::isnan(v)) << b;
    EXPECT_EQ(e4m3_encode(v), byte) << b << " -> " << v;
  }
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
}

TEST(FormatE4m3, TiesToEvenAtEveryMidpoint) {
  for (int b = 0; b < 0x7E; ++b) {
    const float lo = e4m3_decode(static_cast<uint8_t>(b)), hi = e4m3_decode(static_cast<uint8_t>(b + 1));
    const float mid = 0.5f * (lo + hi);  // exact: 5 significant bits
    ASSERT_EQ(static_cast<double>(mid), 0.5 * (static_cast<double>(lo) + hi));
    const int even = (b % 2 == 0) ? b : b + 1;
    EXPECT_EQ(e4m3_encode(mid), even) << "mid " << mid;
    EXPECT_EQ(e4m3_encode(-mid), even | 0x80) << "mid " << -mid;
    EXPECT_EQ(e4m3_encode(down(mid)), b) << mid;
    EXPECT_EQ(e4m3_encode(up(mid)), b + 1) << mid;
    EXPECT_EQ(e4m3_encode(-up(mid)), (b + 1) | 0x80) << mid;
  }
}

TEST(FormatE4m3, SaturatesToMax) {
  // 464 is the midpoint to the would-be next value 480: still 448.
  for (float x : {448.0f, up(448.0f), 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(e4m3_encode(x), 0x7E) << x;
    EXPECT_EQ(e4m3_encode(-x), 0xFE) << -x;
  }
}

TEST(FormatE4m3, NanAndSignedZeroAndUnderflow) {
  EXPECT_EQ(e4m3_encode(kNan), 0x7F);
  EXPECT_EQ(e4m3_encode(-kNan), 0x7F);
  EXPECT_EQ(e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
  const float half_min = std::ldexp(1.0f, -10);  // half the smallest subnormal: a tie
  EXPECT_EQ(e4m3_encode(half_min), 0x00);
  EXPECT_EQ(e4m3_encode(up(half_min)), 0x01);
  EXPECT_EQ(e4m3_encode(-half_min), 0x80);
  EXPECT_EQ(e4m3_encode(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(e4m3_encode(std::ldexp(1.5f, -9)), 0x02);  // tie 1.5 -> 2 (even)
  EXPECT_EQ(e4m3_encode(std::ldexp(7.5f, -9)), 0x08);  // tie into the smallest normal
}

TEST(FormatE4m3, MatchesBruteForceNearest) {
  const auto table = e4m3_table();
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> expo(-14.0f, 9.5f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 100000; ++i) {
    const float a = std::exp2(expo(rng));
    const float x = sign(rng) ? -a : a;
    const auto want = static_cast<uint8_t>(nearest_even(table, a) | (std::signbit(x) ? 0x80 : 0));
    ASSERT_EQ(e4m3_encode(x), want) << x;
  }
}

TEST(FormatUe4m3, MatchesE4m3ForNonNegative) {
  for (int b = 0; b <= 0x7E; ++b) {
    const float v = e4m3_decode(static_cast<uint8_t>(b));
    EXPECT_EQ(ue4m3_encode(v), b);
    if (b < 0x7E) {
      const float mid = 0.5f * (v + e4m3_decode(static_cast<uint8_t>(b + 1)));
      EXPECT_EQ(ue4m3_encode(mid), e4m3_encode(mid));
    }
  }
  EXPECT_EQ(ue4m3_encode(-0.0f), 0x00);
  EXPECT_EQ(ue4m3_encode(1000.0f), 0x7E);
  EXPECT_EQ(ue4m3_encode(kInf), 0x7E);
}

TEST(FormatUe4m3, NegativeOrNanIsAnError) {
  EXPECT_NE(error_of([] { ue4m3_encode(-2.5f); }).find("-2.5"), std::string::npos);
  EXPECT_THROW(ue4m3_encode(-std::numeric_limits<float>::denorm_min()), Error);
  EXPECT_THROW(ue4m3_encode(-kInf), Error);
  EXPECT_NE(error_of([] { ue4m3_encode(kNan); }).find("nan"), std::string::npos);
}

// ---- UE8M0 --------------------------------------------------------------------

TEST(FormatE8m0, EveryByteDecodesAndRoundTrips) {
  for (int b = 0; b < 255; ++b) {
    const float v = ue8m0_decode(static_cast<uint8_t>(b));
    EXPECT_EQ(v, std::ldexp(1.0f, b - 127)) << b;
    EXPECT_GT(v, 0.0f) << b;
    EXPECT_EQ(ue8m0_encode_ceil(v), b) << b;
  }
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xFF)));
  EXPECT_EQ(ue8m0_decode(127), 1.0f);
}

TEST(FormatE8m0, EncodeRoundsUpToAPowerOfTwo) {
  EXPECT_EQ(ue8m0_encode_ceil(1.0f), 127);
  EXPECT_EQ(ue8m0_encode_ceil(up(1.0f)), 128);
  EXPECT_EQ(ue8m0_encode_ceil(down(1.0f)), 127);
  EXPECT_EQ(ue8m0_encode_ceil(0.75f), 127);
  EXPECT_EQ(ue8m0_encode_ceil(0.5f), 126);
  EXPECT_EQ(ue8m0_encode_ceil(3.0f), 129);
  EXPECT_EQ(ue8m0_encode_ceil(4.0f), 129);
  EXPECT_EQ(ue8m0_encode_ceil(up(4.0f)), 130);
  EXPECT_EQ(ue8m0_encode_ceil(7.0f / 6.0f), 128);
  // Clamped to [2^-127, 2^127].
  EXPECT_EQ(ue8m0_encode_ceil(std::ldexp(1.0f, -130)), 0);
  EXPECT_EQ(ue8m0_encode_ceil(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(ue8m0_encode_ceil(std::ldexp(1.0f, -126)), 1);
  EXPECT_EQ(ue8m0_encode_ceil(std::ldexp(1.0f, 127)), 254);
  EXPECT_EQ(ue8m0_encode_ceil(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(ue8m0_encode_ceil(kInf), 254);
}

TEST(FormatE8m0, NonPositiveOrNanIsAnError) {
  EXPECT_NE(error_of([] { ue8m0_encode_ceil(0.0f); }).find("x = 0"), std::string::npos);
  EXPECT_NE(error_of([] { ue8m0_encode_ceil(-3.0f); }).find("-3"), std::string::npos);
  EXPECT_THROW(ue8m0_encode_ceil(-0.0f), Error);
  EXPECT_THROW(ue8m0_encode_ceil(kNan), Error);
}

// ---- bf16 ---------------------------------------------------------------------

TEST(FormatBf16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bf16_to_float(bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (std::isnan(f)) {
      const uint16_t r = bf16_from_float(f);
      EXPECT_TRUE(std::isnan(bf16_to_float(r))) << b;
      EXPECT_EQ(r & 0x8000, bits & 0x8000) << b;
      EXPECT_NE(r & 0x0040, 0) << b;  // quiet
    } else {
      EXPECT_EQ(bf16_from_float(f), bits) << b;
    }
  }
}

TEST(FormatBf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even (1.0)
  EXPECT_EQ(bf16_from_float(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (1 + 2^-6)
  EXPECT_EQ(bf16_from_float(up(1.0f + std::ldexp(1.0f, -8))), 0x3F81);
  EXPECT_EQ(bf16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(bf16_from_float(kInf), 0x7F80);
  EXPECT_EQ(bf16_from_float(-kInf), 0xFF80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7F80);  // above bf16 max + half ulp
  // A signalling NaN whose payload lies only in the dropped bits stays NaN.
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(std::bit_cast<float>(0xFF800001u)))));
}

}  // namespace
}  // namespace fp4moe
