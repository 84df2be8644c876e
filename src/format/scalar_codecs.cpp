// Scalar codecs: E2M1, float8_e4m3fn (and its unsigned scale use), UE8M0, bf16.
// Every encoder rounds to nearest, ties to even, from the exact fp32 input
// (docs/formats.md). No floating-point environment is consulted: rounding is
// done explicitly on exactly-scaled values.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

constexpr float kE2m1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Round a non-negative, exactly representable m to the nearest integer, ties
// to even. m < 2^23 here, so m - floor(m) is exact.
float round_half_even(float m) {
  const float r = std::floor(m);
  const float frac = m - r;
  if (frac > 0.5f) return r + 1.0f;
  if (frac < 0.5f) return r;
  return std::fmod(r, 2.0f) == 0.0f ? r : r + 1.0f;
}

// |x| -> e4m3 magnitude bits 0x00..0x7E (x finite or +inf, not NaN).
uint8_t e4m3_magnitude(float a) {
  if (a >= kE4m3Max) return 0x7E;  // 448 and above (incl. +inf) saturate
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  const int e = e2 - 1;      // a in [2^e, 2^(e+1))
  if (a == 0.0f || e < -6) {
    // Subnormal: value = m * 2^-9, m in 0..7; m == 8 rolls into the smallest
    // normal (bits 0x08), which is the correct encoding.
    return static_cast<uint8_t>(round_half_even(std::ldexp(a, 9)));
  }
  // Normal: a * 2^(3-e) in [8, 16) is the significand with 3 fraction bits.
  // A carry to 16 increments the exponent field, again the correct encoding.
  const float r = round_half_even(std::ldexp(a, 3 - e));
  return static_cast<uint8_t>(((e + 7) << 3) + static_cast<int>(r) - 8);
}

}  // namespace

float e2m1_decode(uint8_t code) {
  FP4MOE_CHECK(code < 16, "e2m1_decode: code = " << static_cast<int>(code) << " is not in 0..15");
  const float v = kE2m1Values[code & 7];
  return (code & 8) ? -v : v;
}

uint8_t e2m1_encode(float x) {
  if (std::isnan(x)) return 7;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  if (a >= kE2m1Max) return static_cast<uint8_t>(sign | 7);
  uint8_t i = 0;
  while (a >= kE2m1Values[i + 1]) ++i;  // values[i] <= a < values[i+1]
  const float mid = 0.5f * (kE2m1Values[i] + kE2m1Values[i + 1]);  // exact
  uint8_t c = i;
  if (a > mid || (a == mid && (i & 1))) c = static_cast<uint8_t>(i + 1);  // tie -> even code
  return static_cast<uint8_t>(sign | c);
}

float e4m3_decode(uint8_t bits) {
  const bool neg = (bits & 0x80) != 0;
  const int exp = (bits >> 3) & 0xF;
  const int man = bits & 0x7;
  float v;
  if (exp == 0xF && man == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);
  } else {
    v = std::ldexp(static_cast<float>(8 + man), exp - 10);
  }
  return neg ? -v : v;
}

uint8_t e4m3_encode(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  return static_cast<uint8_t>(sign | e4m3_magnitude(std::fabs(x)));
}

uint8_t ue4m3_encode(float x) {
  FP4MOE_CHECK(!std::isnan(x), "ue4m3_encode: x = " << x << " is not a valid scale");
  if (x == 0.0f) return 0x00;  // +0 and -0
  FP4MOE_CHECK(x > 0.0f, "ue4m3_encode: x = " << x << " is negative; a UE4M3 scale has no sign");
  return e4m3_magnitude(x);
}

float ue8m0_decode(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);  // 2^-127 is an fp32 subnormal
}

uint8_t ue8m0_encode_ceil(float x) {
  FP4MOE_CHECK(!std::isnan(x) && x > 0.0f,
               "ue8m0_encode_ceil: x = " << x << " is not a positive number");
  int e = 127;
  if (!std::isinf(x)) {
    int e2 = 0;
    const float f = std::frexp(x, &e2);  // x = f * 2^e2, f in [0.5, 1)
    e = (f == 0.5f) ? e2 - 1 : e2;       // exact power of two stays, else round up
  }
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return static_cast<uint8_t>(e + 127);
}

uint16_t bf16_from_float(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep sign, quiet
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);    // overflow rounds to +-inf (IEEE RNE)
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace fp4moe
