// Shared by the GPU tests: device presence, random inputs, error metrics.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/device.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe::test {

inline bool have_gpu(std::string* why) { return !list_devices(why).empty(); }

#define FP4MOE_REQUIRE_GPU()                                                          \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!::fp4moe::test::have_gpu(&why_)) GTEST_SKIP() << "no CUDA device (" << why_ << "): GPU test skipped"; \
  } while (0)

// bf16 bits of N(0, 1) values and the same values as fp32 (exact).
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
inline Bf16Matrix random_bf16(int64_t count, uint64_t seed, float stddev = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  Bf16Matrix m;
  m.bits.resize(static_cast<size_t>(count));
  m.values.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    m.bits[size_t(i)] = bf16_from_float(d(rng));
    m.values[size_t(i)] = bf16_to_float(m.bits[size_t(i)]);
  }
  return m;
}

// ||got - ref|| / ||ref|| over `count` values; NaN in got counts as unwritten (infinite error).
inline double rel_frobenius(const float* got, const float* ref, size_t count, int64_t* nan_count) {
  double num = 0, den = 0;
  int64_t nans = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::isnan(got[i])) { ++nans; continue; }
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  if (nan_count) *nan_count = nans;
  if (nans) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double rel_frobenius(const std::vector<float>& got, const std::vector<float>& ref, int64_t* nan_count) {
  return rel_frobenius(got.data(), ref.data(), ref.size(), nan_count);
}

}  // namespace fp4moe::test
