// Shared by the GPU tests: device presence, random inputs, error metrics.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/format.hpp"
#include "plan/arch.hpp"

namespace fp4moe::test {

inline bool have_gpu(std::string* why) { return !list_devices(why).empty(); }

// Whether the first device runs fp4moe's sm_90a kernels (plan::Arch::has_wgmma).
inline bool first_device_has_wgmma() {
  const auto devs = list_devices();
  return !devs.empty() && plan::SmemBudget{0, 0, 0, devs[0].cc}.has_wgmma();
}

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

// E random [n, k] FP4 matrices: expert e has N(0, stddev(e)) values rounded to
// bf16, quantized in `format` (NVFP4 with each matrix's own amax). Made in
// parallel over (expert, chunk of rows), each chunk with its own generator, so
// the result depends on the seed alone.
inline std::vector<Fp4Matrix> random_fp4_matrices(Fp4Format format, int64_t E, int64_t n, int64_t k, uint64_t seed,
                                                  const std::function<float(int64_t)>& stddev) {
  constexpr int64_t kRowsPerChunk = 64;
  const int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<std::vector<float>> x(static_cast<size_t>(E));
  std::vector<float> chunk_amax(static_cast<size_t>(E * chunks), 0.f);
  for (auto& v : x) v.resize(static_cast<size_t>(n * k));
  detail::parallel_for(E * chunks, [&](int64_t item) {
    const int64_t e = item / chunks, c = item % chunks;
    std::mt19937_64 rng((seed * 1000 + uint64_t(e)) * 0x9E3779B97F4A7C15ull + uint64_t(c));
    std::normal_distribution<float> d(0.f, stddev(e));
    const int64_t r1 = std::min(n, (c + 1) * kRowsPerChunk);
    float& amax = chunk_amax[size_t(item)];
    for (int64_t i = c * kRowsPerChunk * k; i < r1 * k; ++i) {
      const float v = bf16_to_float(bf16_from_float(d(rng)));
      x[size_t(e)][size_t(i)] = v;
      amax = std::max(amax, std::fabs(v));
    }
  });
  std::vector<Fp4Matrix> parts(static_cast<size_t>(E * chunks));
  detail::parallel_for(E * chunks, [&](int64_t item) {
    const int64_t e = item / chunks, c = item % chunks;
    float amax = 0.f;
    for (int64_t j = 0; j < chunks; ++j) amax = std::max(amax, chunk_amax[size_t(e * chunks + j)]);
    const int64_t r0 = c * kRowsPerChunk, rows = std::min(n, r0 + kRowsPerChunk) - r0;
    const float* xc = x[size_t(e)].data() + r0 * k;
    parts[size_t(item)] = format == Fp4Format::nvfp4 ? quantize_nvfp4(xc, rows, k, amax) : quantize_mxfp4(xc, rows, k);
  });
  std::vector<Fp4Matrix> out(static_cast<size_t>(E));
  detail::parallel_for(E, [&](int64_t e) {
    Fp4Matrix& m = out[size_t(e)];
    m = std::move(parts[size_t(e * chunks)]);
    m.rows = n;
    for (int64_t c = 1; c < chunks; ++c) {
      const Fp4Matrix& p = parts[size_t(e * chunks + c)];
      m.packed.insert(m.packed.end(), p.packed.begin(), p.packed.end());
      m.scales.insert(m.scales.end(), p.scales.begin(), p.scales.end());
    }
  });
  return out;
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
