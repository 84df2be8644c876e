// One expert's MLP and the grouped-GEMM oracle, on exactly dequantized
// weights with double accumulation.
#include <algorithm>
#include <cmath>

#include "format/fp8_rows.hpp"
#include "format/prepare_fp8.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"
#include "reference/detail.hpp"

namespace fp4moe {
namespace detail {

void check_matrix(const Fp4Matrix& m, int64_t rows, int64_t cols, const std::string& what) {
  FP4MOE_CHECK(m.format == Fp4Format::nvfp4 || m.format == Fp4Format::mxfp4,
               what << ": format = " << static_cast<int>(m.format) << " is not nvfp4 or mxfp4");
  FP4MOE_CHECK(m.rows == rows && m.cols == cols, what << ": shape [" << m.rows << ", " << m.cols
                                                      << "], expected [" << rows << ", " << cols << "]");
  FP4MOE_CHECK(m.cols % m.block_size() == 0, what << ": cols = " << m.cols << " is not a multiple of the "
                                                  << to_string(m.format) << " block size " << m.block_size());
  FP4MOE_CHECK(static_cast<int64_t>(m.packed.size()) == m.rows * (m.cols / 2),
               what << ": packed has " << m.packed.size() << " bytes, expected rows * cols / 2 = "
                    << m.rows * (m.cols / 2));
  FP4MOE_CHECK(static_cast<int64_t>(m.scales.size()) == m.rows * m.scale_cols(),
               what << ": scales has " << m.scales.size() << " bytes, expected rows * cols / "
                    << m.block_size() << " = " << m.rows * m.scale_cols());
}

namespace {

// m's values as the FP8 fold gives them, times its global scale.
std::vector<float> dequantize_fp8_folded(const Fp4Matrix& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c)
      v[size_t(r * m.cols + c)] =
          float(fp8_folded_weight(m.code(r, c), m.scale(r, c / m.block_size())) * double(m.weight_scale_2));
  return v;
}

}  // namespace

DenseExpert dequantize_expert(const ExpertWeights& w, const MoeConfig& cfg, int64_t intermediate, bool fp8_fold) {
  DenseExpert d;
  d.hidden = cfg.hidden;
  d.intermediate = intermediate;
  const auto values = [&](const Fp4Matrix& m) {
    return fp8_fold && m.format == Fp4Format::nvfp4 ? dequantize_fp8_folded(m) : dequantize(m);
  };
  d.gate = values(w.gate);
  d.up = values(w.up);
  d.down = values(w.down);
  d.gate_bias = w.gate_bias;
  d.up_bias = w.up_bias;
  d.down_bias = w.down_bias;
  d.activation = cfg.activation;
  d.limit = cfg.swiglu_limit;
  d.alpha = cfg.swiglu_alpha;
  return d;
}

void quantize_row_e4m3_in_place(double* v, int64_t n, bool round_to_bf16_first) {
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    row[size_t(i)] = round_to_bf16_first ? bf16_to_float(bf16_from_float(float(v[i]))) : float(v[i]);
  const Fp8Rows q = quantize_rows_e4m3(row.data(), 1, n, 0);
  for (int64_t i = 0; i < n; ++i) v[i] = double(e4m3_decode(q.codes[size_t(i)])) * double(q.scales[0]);
}

double dot(const double* x, const float* w, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * static_cast<double>(w[i]);
  return acc;
}

void expert_mlp(const DenseExpert& e, const double* x, double* y, double* scratch) {
  const int64_t H = e.hidden, I = e.intermediate;
  auto bias = [](const std::vector<float>& b, int64_t i) { return b.empty() ? 0.0 : double(b[size_t(i)]); };
  double* a = scratch;  // [I]: the activation of (gate . x, up . x)
  for (int64_t i = 0; i < I; ++i) {
    double h = dot(x, e.gate.data() + i * H, H) + bias(e.gate_bias, i);
    double u = dot(x, e.up.data() + i * H, H) + bias(e.up_bias, i);
    if (e.activation == Activation::clamped_swiglu) {
      h = std::min(h, e.limit);
      u = std::clamp(u, -e.limit, e.limit);
      a[i] = h / (1.0 + std::exp(-e.alpha * h)) * (u + 1.0);
    } else {
      a[i] = h / (1.0 + std::exp(-h)) * u;
    }
  }
  if (e.fp8_intermediate) quantize_row_e4m3_in_place(a, I, true);
  for (int64_t n = 0; n < H; ++n) y[n] = dot(a, e.down.data() + n * I, I) + bias(e.down_bias, n);
}

}  // namespace detail

void expert_gemm_reference(const Fp4Matrix& w, const float* x, int64_t rows, float* y) {
  FP4MOE_CHECK(rows >= 0, "expert_gemm_reference: rows = " << rows << " must not be negative");
  detail::check_matrix(w, w.rows, w.cols, "expert_gemm_reference: weight");
  if (rows == 0) return;
  FP4MOE_CHECK(x != nullptr && y != nullptr, "expert_gemm_reference: null x or y for rows = " << rows);
  const int64_t N = w.rows, K = w.cols;
  const std::vector<float> wd = dequantize(w);
  std::vector<double> xr(static_cast<size_t>(K));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) xr[static_cast<size_t>(k)] = static_cast<double>(x[r * K + k]);
    for (int64_t n = 0; n < N; ++n)
      y[r * N + n] = static_cast<float>(detail::dot(xr.data(), wd.data() + n * K, K));
  }
}

std::vector<float> router_logits_reference(const float* hidden, int64_t tokens, int64_t hidden_size,
                                           const std::vector<uint16_t>& router_weight,
                                           const std::vector<float>& router_bias) {
  FP4MOE_CHECK(hidden_size > 0 && !router_weight.empty() && int64_t(router_weight.size()) % hidden_size == 0,
               "router_logits_reference: router weight of " << router_weight.size() << " values is not [E, H = "
                                                            << hidden_size << "]");
  const int64_t E = int64_t(router_weight.size()) / hidden_size;
  FP4MOE_CHECK(router_bias.empty() || int64_t(router_bias.size()) == E,
               "router_logits_reference: router bias of " << router_bias.size() << " values for E = " << E << " experts");
  std::vector<float> w(router_weight.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(router_weight[i]);
  std::vector<float> out(static_cast<size_t>(tokens * E));
  detail::parallel_for(tokens, [&](int64_t t) {
    std::vector<double> x(static_cast<size_t>(hidden_size));
    for (int64_t h = 0; h < hidden_size; ++h) x[size_t(h)] = hidden[t * hidden_size + h];
    for (int64_t e = 0; e < E; ++e)
      out[size_t(t * E + e)] = static_cast<float>(detail::dot(x.data(), w.data() + e * hidden_size, hidden_size)) +
                               (router_bias.empty() ? 0.f : router_bias[size_t(e)]);
  });
  return out;
}

}  // namespace fp4moe
