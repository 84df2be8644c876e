// Private helpers shared by the CPU reference's translation units (and its
// tests). Not part of the public API.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/format.hpp"
#include "common/parallel.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe::detail {

// ---- router arithmetic (fp32, bit-exact contract; docs/reference.md) ---------
// exp(x) from IEEE fp32 operations only (multiply, rint, fma, ldexp), so a GPU
// kernel issuing the same operations (__fmul_rn, rintf, __fmaf_rn, ldexpf)
// gets the same bits. x > 88.5 -> +inf; x < -87 -> +0 (no subnormal results).
float router_expf(float x);
// 1 / (1 + router_expf(-x)), each operation one fp32 IEEE op.
float router_sigmoidf(float x);

// ---- random weights (random_weights.cpp) ---------------------------------------
// [rows, cols] FP4 codes and block scales drawn directly, not quantized from
// floats (full-size models): values of std ~ 1/sqrt(cols), as the quantized path.
Fp4Matrix random_matrix_direct(Fp4Format format, int64_t rows, int64_t cols, std::mt19937_64 g);

// ---- expert MLP on exactly dequantized weights ---------------------------------
// Shape/size checks for one quantized matrix; `what` names it in the error.
void check_matrix(const Fp4Matrix& m, int64_t rows, int64_t cols, const std::string& what);

// One expert's three projections dequantized once (fp32 values are exact).
struct DenseExpert {
  int64_t hidden = 0, intermediate = 0;
  std::vector<float> gate, up;  // [I, H]
  std::vector<float> down;      // [H, I]
  std::vector<float> gate_bias, up_bias, down_bias;  // empty: none
  Activation activation = Activation::swiglu;
  double limit = 0, alpha = 0;  // clamped_swiglu
  // fp8 activations: the SwiGLU output is rounded to bf16 (as GEMM1's
  // epilogue stores it) and quantized to e4m3 per row before the down
  // projection, as the FP8 row copy does (the caller quantizes x).
  bool fp8_intermediate = false;
};
// fp8_fold: the weights as the FP8 fold gives them (fp8_folded_weight: NVFP4's
// rounded to e4m3; MXFP4's exact, the same values).
DenseExpert dequantize_expert(const ExpertWeights& w, const MoeConfig& cfg, int64_t intermediate, bool fp8_fold = false);

// v[0..n) as e4m3 with one scale (amax / 448, quantize_rows_e4m3), optionally
// after rounding to bf16: the values an FP8 GEMM reads.
void quantize_row_e4m3_in_place(double* v, int64_t n, bool round_to_bf16_first);

// Double dot product, ascending k, one accumulator.
double dot(const double* x, const float* w, int64_t n);

// y[H] = down . act(gate . x + bg, up . x + bu) + bd, all in double. scratch: >= I doubles.
// The exact-math MLP: no intermediate is rounded. (GPU kernels round the
// SwiGLU output A2 to bf16 before GEMM2; that costs ~2^-9 relative per
// element, well inside the 1e-2 relative Frobenius tolerance of the checks.)
void expert_mlp(const DenseExpert& e, const double* x, double* y, double* scratch);

}  // namespace fp4moe::detail
