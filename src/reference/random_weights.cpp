// Deterministic random MoE weights. Every matrix has its own mt19937_64
// stream derived from (seed, expert, projection), and values are built from
// raw 64-bit draws with plain arithmetic, so the weights are the same for a
// given seed on every platform and for any thread count.
#include <array>
#include <cmath>
#include <random>

#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"
#include "reference/detail.hpp"

namespace fp4moe {

namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::mt19937_64 stream(uint64_t seed, uint64_t item, uint64_t part) {
  return std::mt19937_64(splitmix64(splitmix64(splitmix64(seed) ^ item) ^ part));
}

// Uniform in (0, 1) from the top 53 bits.
double uniform(std::mt19937_64& g) { return (static_cast<double>(g() >> 11) + 0.5) * 0x1p-53; }

// Approximately standard normal: the centred sum of four 16-bit uniforms
// (Irwin-Hall), scaled to unit variance.
double normalish(std::mt19937_64& g) {
  const uint64_t b = g();
  double s = 0.0;
  for (int i = 0; i < 4; ++i) s += (static_cast<double>((b >> (16 * i)) & 0xFFFF) + 0.5) * 0x1p-16;
  return (s - 2.0) * std::sqrt(3.0);
}

// [rows, cols] with std ~ 1/sqrt(cols); each row's magnitude is scaled by a
// factor in [0.5, 2) so block scales differ from row to row.
Fp4Matrix random_matrix(Fp4Format format, int64_t rows, int64_t cols, std::mt19937_64 g) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  const double base = 1.0 / std::sqrt(static_cast<double>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double sd = base * (0.5 + 1.5 * uniform(g));
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = static_cast<float>(sd * normalish(g));
  }
  return quantize(format, v.data(), rows, cols);
}

}  // namespace

// Full-size models: draw the FP4 codes and block scales directly (what
// quantizing N(0, sd) gives, approximately), about 20x faster than quantizing
// floats. Codes follow the magnitudes of a quantized Gaussian whose block max
// maps to 6; block scales spread over [0.5, 2) x the row's scale.
Fp4Matrix detail::random_matrix_direct(Fp4Format format, int64_t rows, int64_t cols, std::mt19937_64 g) {
  Fp4Matrix m;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  m.packed.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * m.scale_cols()));
  // One random byte per code: 7 bits pick the magnitude by P(magnitude code 0..7)
  // of a standard normal block scaled so its max is ~6, the top bit the sign.
  static const std::array<uint8_t, 256> kCode = [] {
    static constexpr uint32_t kCdf[8] = {9830, 26214, 39321, 49152, 55705, 61603, 64880, 65536};
    std::array<uint8_t, 256> t{};
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t u = (b & 0x7F) << 9;
      uint8_t mag = 0;
      while (mag < 7 && u >= kCdf[mag]) ++mag;
      t[b] = static_cast<uint8_t>(mag | ((b & 0x80) ? 8 : 0));
    }
    return t;
  }();
  for (size_t i = 0; i < m.packed.size(); i += 4) {
    const uint64_t b = g();
    for (int j = 0; j < 4 && i + size_t(j) < m.packed.size(); ++j)
      m.packed[i + size_t(j)] = static_cast<uint8_t>(kCode[(b >> (16 * j)) & 0xFF] | kCode[(b >> (16 * j + 8)) & 0xFF] << 4);
  }
  // values ~ code * block scale (/ gs): rms(code) ~ 1.7 and rms(scale) ~ 1.3,
  // so dividing by ~2.5 sqrt(cols) gives std ~ 1/sqrt(cols) as random_matrix does.
  const double norm = 2.5 * std::sqrt(static_cast<double>(cols));
  if (format == Fp4Format::nvfp4) {
    for (auto& sc : m.scales) sc = e4m3_encode(static_cast<float>(0.5 + 1.5 * uniform(g)));
    m.weight_scale_2 = static_cast<float>(1.0 / norm);
  } else {
    // MXFP4 has no global scale: the division goes into the power-of-two block
    // scales, whole exponents (exact, so the rounding up is that of [0.5, 2)).
    const int shift = static_cast<int>(std::lround(std::log2(norm)));
    for (auto& sc : m.scales) sc = ue8m0_encode_ceil(static_cast<float>(std::ldexp(0.5 + 1.5 * uniform(g), -shift)));
  }
  return m;
}

namespace {

ExpertWeights random_expert(Fp4Format format, int64_t H, int64_t I, uint64_t seed, uint64_t item, bool direct,
                            bool biased) {
  const auto make = direct ? detail::random_matrix_direct : random_matrix;
  ExpertWeights w;
  w.gate = make(format, I, H, stream(seed, item, 1));
  w.up = make(format, I, H, stream(seed, item, 2));
  w.down = make(format, H, I, stream(seed, item, 3));
  if (biased) {  // bf16 values (as checkpoints hold them), of the order of the projections' outputs
    std::mt19937_64 g = stream(seed, item, 4);
    auto fill = [&](std::vector<float>& b, int64_t n) {
      b.resize(static_cast<size_t>(n));
      for (float& v : b) v = bf16_to_float(bf16_from_float(static_cast<float>(2.0 * uniform(g) - 1.0)));
    };
    fill(w.gate_bias, I);
    fill(w.up_bias, I);
    fill(w.down_bias, H);
  }
  return w;
}

}  // namespace

MoeWeights random_moe_weights(const MoeConfig& cfg, Fp4Format format, uint64_t seed) {
  cfg.validate();
  FP4MOE_CHECK(format == Fp4Format::nvfp4 || format == Fp4Format::mxfp4,
               "random_moe_weights: format = " << static_cast<int>(format) << " is not nvfp4 or mxfp4");
  const int64_t E = cfg.num_experts;
  MoeWeights w;
  w.experts.resize(static_cast<size_t>(E));
  w.has_shared = cfg.shared_expert;
  // Quantizing ~10^10 floats for a full-size model takes minutes: draw FP4 directly there.
  const bool direct = E * cfg.hidden * cfg.intermediate > (int64_t(1) << 28);
  detail::parallel_for(E + (cfg.shared_expert ? 1 : 0), [&](int64_t e) {
    if (e == E)
      w.shared = random_expert(format, cfg.hidden, cfg.shared_intermediate, seed, static_cast<uint64_t>(E) + 1000, direct,
                               cfg.expert_bias);
    else
      w.experts[static_cast<size_t>(e)] =
          random_expert(format, cfg.hidden, cfg.intermediate, seed, static_cast<uint64_t>(e), direct, cfg.expert_bias);
  });
  if (cfg.use_correction_bias) {
    // Small biases, comparable to the spread of sigmoid scores near 0.5, so
    // they do change some choices.
    std::mt19937_64 g = stream(seed, 0xB1A5, 0);
    w.correction_bias.resize(static_cast<size_t>(E));
    for (float& b : w.correction_bias) b = static_cast<float>(0.1 * (2.0 * uniform(g) - 1.0));
  }
  return w;
}

std::vector<float> gaussian_logits(int64_t tokens, int64_t experts, uint64_t seed, float stddev) {
  FP4MOE_CHECK(tokens >= 0 && experts >= 1 && stddev > 0,
               "gaussian_logits: [" << tokens << ", " << experts << "] with stddev " << stddev);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> logits(size_t(tokens * experts));
  for (float& v : logits) v = d(rng);
  return logits;
}

}  // namespace fp4moe
