// The FP8 (W4A8) prepare step: prepared FP4 weights (format/prepare_gemm.hpp)
// re-packed for the FP8 K loop (format/fp8_fragment.hpp), each block's scale
// folded into its codes' e4m3 exponent (MXFP4: exactly; NVFP4, opted in: the
// scale's mantissa rounds each weight to e4m3), and a power of two per output
// row left for the epilogue (docs/fp8.md).
#pragma once
#include <cstdint>
#include <vector>

#include "format/prepare_gemm.hpp"

namespace fp4moe {

struct PreparedFp8Weights {
  int64_t experts = 0, n = 0, k = 0;
  std::vector<uint8_t> weights;  // the FP8 layout, E * N * K / 2 bytes
  // Per (row, k16 step), where the FP4 layout keeps its block scales
  // (prepared_layout.hpp's scale_offset): the fold code, u | m << 4, of the
  // block's shift s = u + kFp8TableMinShift and its scale's mantissa m
  // (MXFP4: m = 0, and its 32-wide block both steps).
  std::vector<uint8_t> scales;
  std::vector<float> row_scale;  // [E][N]: an output row's 2^row_exponent x the weights' global scale
  int max_row_span = 0;          // the widest exponent span of a row's nonzero blocks
};

// Throws fp4moe::Error for NVFP4 weights unless round_nvfp4 (their e4m3 block
// scales have a mantissa: the fold rounds) and where a nonzero block lies
// more than fp8::max_shift - kFp8TableMinShift octaves below its row's
// largest (it would not fold), naming the expert, the row and the count.
PreparedFp8Weights prepare_fp8_gemm_weights(const PreparedExpertWeights& p, bool round_nvfp4 = false);

// The refusals both prepare paths (this one and the GPU's, kernels/
// prepare_fp8_weights.hpp) make: NVFP4 weights not opted in; and, from the
// count of blocks below the fold's range per expert and the first row holding
// one, the first expert that has any.
void check_fp8_format(Fp4Format format, bool round_nvfp4);
void check_fp8_fold(const std::vector<int64_t>& below, const std::vector<int64_t>& first_row, Fp4Format format);

// The value the fold gives a weight of e2m1 code `code` in a block of scale
// `block_scale` (decoded, without the global scale; (1 + m/8) 2^E): MXFP4's
// (m = 0) exactly e2m1 x scale; NVFP4's |e2m1| (1 + m/8) rounded to e4m3 by
// the kernel's own table (fp8::rounded_fold_table), times 2^E and the sign.
// The CPU reference's weights for fp8 activations.
double fp8_folded_weight(uint8_t code, float block_scale);

// The e4m3 bits the FP8 layout gives W_e[row, col] (before the row's power of
// two), decoded through the kernel's own table and registers (tests).
uint8_t prepared_fp8_code(const PreparedFp8Weights& p, int64_t e, int64_t row, int64_t col);

}  // namespace fp4moe
