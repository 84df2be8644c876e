// The FP8 (W4A8) prepare step: prepared MXFP4 weights (format/prepare_gemm.hpp)
// re-packed for the FP8 K loop (format/fp8_fragment.hpp), each block's scale
// folded into its codes' e4m3 exponent, exactly, and a power of two per
// output row left for the epilogue (docs/fp8.md).
#pragma once
#include <cstdint>
#include <vector>

#include "format/prepare_gemm.hpp"

namespace fp4moe {

struct PreparedFp8Weights {
  int64_t experts = 0, n = 0, k = 0;
  std::vector<uint8_t> weights;  // the FP8 layout, E * N * K / 2 bytes
  // Per (row, k16 step), where the FP4 layout keeps its block scales
  // (prepared_layout.hpp's scale_offset): the fold code u of the block's
  // shift, s = u + kFp8TableMinShift (MXFP4's 32-wide block: both steps).
  std::vector<uint8_t> scales;
  std::vector<float> row_scale;  // [E][N]: an output row's 2^row_exponent x the weights' global scale
  int max_row_span = 0;          // the widest exponent span of a row's nonzero blocks
};

// Throws fp4moe::Error for NVFP4 weights (their e4m3 block scales have a
// mantissa: the fold would round) and where a nonzero block lies more than
// kFp8TableMaxShift - kFp8TableMinShift octaves below its row's largest
// (it would not fold exactly), naming the expert, the row and the count.
PreparedFp8Weights prepare_fp8_gemm_weights(const PreparedExpertWeights& p);

// The refusals both prepare paths (this one and the GPU's, kernels/
// prepare_fp8_weights.hpp) make: weights other than MXFP4; and, from the
// count of blocks below the fold's range per expert and the first row holding
// one, the first expert that has any.
void check_fp8_format(Fp4Format format);
void check_fp8_fold(const std::vector<int64_t>& below, const std::vector<int64_t>& first_row);

// The e4m3 bits the FP8 layout gives W_e[row, col] (before the row's power of
// two), decoded through the kernel's own table and registers (tests).
uint8_t prepared_fp8_code(const PreparedFp8Weights& p, int64_t e, int64_t row, int64_t col);

}  // namespace fp4moe
