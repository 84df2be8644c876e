// What FP8 activations (W4A8) cost in accuracy, on the CPU: each model GEMM's
// output with activations as bf16 (W4A16), as e4m3 with one scale per token
// row, and as e4m3 with one scale per token and 128-wide K block, against the
// exact product (double); for NVFP4 also the weights' rounded fold into e4m3
// (the kernels' table, fp8_folded_weight) and the exact hi + lo split.
// The weights are MXFP4 or NVFP4 quantized from Gaussian rows; the FP8 tensor
// cores' own accumulation is not modelled (docs/fp8.md).
//   bench_fp8_accuracy [--tokens 32] [--rows 256] [--seed 1]
#include <CLI/CLI.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "format/fp8_fold.hpp"
#include "format/fp8_rows.hpp"
#include "format/prepare_fp8.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

using namespace fp4moe;

namespace {

struct Gemm {
  const char* model;
  const char* name;
  Fp4Format format;
  int64_t k;
  const char* input;  // the activations it reads: "hidden" (GEMM1) or "swiglu" (GEMM2)
};

// Activations as the GEMM sees them. hidden: N(0, 1) with 8 fixed channels 50x
// larger (the outlier channels of LLM hidden states); swiglu: silu(a) x b.
std::vector<float> activations(const std::string& kind, int64_t rows, int64_t k, std::mt19937& g) {
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      float v = n(g);
      if (kind == "hidden" && c % (k / 8) == 3) v *= 50.f;
      if (kind == "swiglu") {
        const float a = 1.5f * v, b = 1.5f * n(g);
        v = a / (1.f + std::exp(-a)) * b;
      }
      x[size_t(r * k + c)] = v;
    }
  return x;
}

// Gaussian weight rows, each row's scale in [0.5, 2) x 1/sqrt(k), quantized.
Fp4Matrix weights(Fp4Format f, int64_t rows, int64_t k, std::mt19937& g) {
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.5f, 2.f);
  std::vector<float> w(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const float sd = u(g) / std::sqrt(float(k));
    for (int64_t c = 0; c < k; ++c) w[size_t(r * k + c)] = sd * n(g);
  }
  return quantize(f, w.data(), rows, k);
}

// y = x w^T in double; x [T, k] and w [n, k] as given values.
std::vector<double> product(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t n, int64_t k) {
  std::vector<double> y(size_t(T * n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += double(x[size_t(t * k + c)]) * double(w[size_t(j * k + c)]);
      y[size_t(t * n + j)] = s;
    }
  return y;
}

double rel_error(const std::vector<double>& y, const std::vector<double>& exact) {
  double d = 0, e = 0;
  for (size_t i = 0; i < y.size(); ++i) d += (y[i] - exact[i]) * (y[i] - exact[i]), e += exact[i] * exact[i];
  return std::sqrt(d / e);
}

std::vector<float> dequantized(const Fp8Rows& q) {
  std::vector<float> v(size_t(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) v[size_t(r * q.cols + c)] = q.value(r, c);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FP8 activations' accuracy on the CPU (docs/fp8.md)"};
  int64_t tokens = 32, rows = 256;
  uint32_t seed = 1;
  app.add_option("--tokens", tokens, "Activation rows")->check(CLI::Range(1, 4096));
  app.add_option("--rows", rows, "Weight rows (output columns) of each GEMM")->check(CLI::Range(1, 65536));
  app.add_option("--seed", seed, "Random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    const Gemm gemms[] = {{"GLM-5", "GEMM1", Fp4Format::nvfp4, 6144, "hidden"},
                          {"GLM-5", "GEMM2", Fp4Format::nvfp4, 2048, "swiglu"},
                          {"DeepSeek-V3", "GEMM1", Fp4Format::nvfp4, 7168, "hidden"},
                          {"DeepSeek-V3", "GEMM2", Fp4Format::nvfp4, 2048, "swiglu"},
                          {"gpt-oss-120b", "GEMM1", Fp4Format::mxfp4, 2880, "hidden"},
                          {"gpt-oss-120b", "GEMM2", Fp4Format::mxfp4, 2880, "swiglu"}};
    fmt::print("{} activation rows x {} weight rows per GEMM, seed {}; norm-wise relative error against the exact "
               "product (double)\n\n",
               tokens, rows, seed);
    fmt::print("| model | GEMM | K | input | bf16 activations | e4m3 per token | e4m3 per token x 128 K | weight fold | "
               "rounded NVFP4 fold, bf16 act. | rounded NVFP4 fold, e4m3 x 128 | NVFP4 as hi + lo e4m3 |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::mt19937 g(seed);
    for (const Gemm& gm : gemms) {
      const Fp4Matrix w = weights(gm.format, rows, gm.k, g);
      const std::vector<float> wd = dequantize(w);
      const std::vector<float> x = activations(gm.input, tokens, gm.k, g);
      const std::vector<double> exact = product(x, wd, tokens, rows, gm.k);
      std::vector<float> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_to_float(bf16_from_float(x[i]));
      const std::vector<float> x_tok = dequantized(quantize_rows_e4m3(x.data(), tokens, gm.k, 0));
      const std::vector<float> x_blk = dequantized(quantize_rows_e4m3(x.data(), tokens, gm.k, 128));
      std::string fold = "n/a", nv_bf16 = "n/a", nv_fp8 = "n/a", split = "n/a";
      if (gm.format == Fp4Format::mxfp4) {
        const Mxfp4Fold f = plan_mxfp4_fold(w);
        fold = f.exact() ? fmt::format("exact (span {})", f.max_row_span)
                         : fmt::format("{} blocks out of range", f.below_range_blocks);
      } else {
        // the kernel's rounded fold (fp8::rounded_fold_table), as the CPU reference applies it
        std::vector<float> wr(wd.size());
        int64_t rounded = 0;
        const int64_t kbs = w.scale_cols();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < gm.k; ++c) {
            const float block_scale = e4m3_decode(w.scales[size_t(r * kbs + c / w.block_size())]);
            const float folded = float(fp8_folded_weight(w.code(r, c), block_scale));
            rounded += folded != e2m1_decode(w.code(r, c)) * block_scale;
            wr[size_t(r * gm.k + c)] = folded * w.weight_scale_2;
          }
        fold = fmt::format("rounded: {:.1f}% of codes", 100.0 * double(rounded) / double(rows * gm.k));
        nv_bf16 = fmt::format("{:.2e}", rel_error(product(xb, wr, tokens, rows, gm.k), exact));
        nv_fp8 = fmt::format("{:.2e}", rel_error(product(x_blk, wr, tokens, rows, gm.k), exact));
        const Nvfp4Split sp = split_nvfp4_to_e4m3(w);
        split = sp.inexact == 0 ? std::string("exact") : fmt::format("{} elements inexact", sp.inexact);
      }
      fmt::print("| {} | {} | {} | {} | {:.2e} | {:.2e} | {:.2e} | {} | {} | {} | {} |\n", gm.model, gm.name, gm.k, gm.input,
                 rel_error(product(xb, wd, tokens, rows, gm.k), exact),
                 rel_error(product(x_tok, wd, tokens, rows, gm.k), exact),
                 rel_error(product(x_blk, wd, tokens, rows, gm.k), exact), fold, nv_bf16, nv_fp8, split);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "bench_fp8_accuracy: {}\n", e.what());
    return 1;
  }
  return 0;
}
