// The one-time prepare step: ModelOpt-layout FP4 experts -> the decode layout.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "format/prepared_layout.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {

// One projection (e.g. all experts' W13 or W2) in the decode layout of
// src/format/gemm_pack.hpp. Scales are prepared UE5M3 bytes (gemm_pack.hpp),
// one per 16 columns for both formats (MXFP4's per-32 scale is written twice).
struct PreparedExpertWeights {
  Fp4Format format = Fp4Format::nvfp4;
  int64_t experts = 0, n = 0, k = 0;
  std::vector<uint8_t> weights;       // E * N * K / 2 bytes
  std::vector<uint8_t> scales;        // E * pack::scale_bytes(N, K) bytes
  std::vector<float> dequant_scale;   // [E][scale_parts] 2^10 * weight_scale_2 (see kAccumulatorFactor)
  int scale_parts = 1;                // 2 for gated weights: part (row / 16) % 2

  int64_t weight_bytes_per_expert() const { return n * k / 2; }
  int64_t scale_bytes_per_expert() const { return pack::scale_bytes(n, k); }
};

// The prepared layout's K granule (a 16-row group's lane words cover k64): a
// K that is not a multiple is padded to one with zero weights, exactly.
inline constexpr int64_t kPreparedKGranule = 64;
// H or I as an MoE layer runs it (each is a GEMM's K and the other's N): as
// given when a multiple of min(granule, 128), else padded to a multiple of
// `granule`: 64 keeps every width a multiple of 64 as the model has it (gpt-oss's
// 2880; the tiles that take tails run it, sm_90), 256 lets every tile divide them
// (2880 runs as 3072), 128 pads less (2944) but leaves only the tiles of bm and
// bk 128 (docs/planner.md).
inline constexpr int64_t kFeatureGranule = 256;
constexpr int64_t padded_features(int64_t d, int64_t granule = kFeatureGranule) {
  const int64_t keep = granule < 128 ? granule : 128;
  return d % keep == 0 ? d : (d + granule - 1) / granule * granule;
}

// All experts must share format and shape. The prepared shape is [n, k]
// (0: the experts' own N and K), at least theirs: rows and columns past
// theirs are zero weights. N must be a multiple of 16, K of 64.
// Throws fp4moe::Error naming the expert and the bad value.
PreparedExpertWeights prepare_gemm_weights(std::span<const Fp4Matrix> experts, int64_t n = 0, int64_t k = 0);
PreparedExpertWeights prepare_gemm_weights(std::span<const Fp4Matrix* const> experts, int64_t n = 0, int64_t k = 0);

// `m` with zero rows and columns appended up to [rows, cols] (zero codes,
// scale bytes 0): the same values, padded.
Fp4Matrix pad_fp4_matrix(const Fp4Matrix& m, int64_t rows, int64_t cols);

// GEMM1 of an MoE layer: each expert's gate and up [I, H] interleaved in blocks
// of 16 rows (gate rows 0-15, up rows 0-15, gate rows 16-31, ...) so one tile
// holds matching gate and up rows for the SwiGLU epilogue; each keeps its own
// global scale (scale_parts = 2), exactly. `rows` and `k` pad each half to
// [rows, k] first (0: as given).
PreparedExpertWeights prepare_gated_gemm_weights(std::span<const Fp4Matrix> gate, std::span<const Fp4Matrix> up,
                                                   int64_t rows = 0, int64_t k = 0);
PreparedExpertWeights prepare_gated_gemm_weights(std::span<const Fp4Matrix* const> gate,
                                                   std::span<const Fp4Matrix* const> up, int64_t rows = 0, int64_t k = 0);

// Per-feature biases in the prepared row order, [experts][N]: gated, row r of
// the interleaved gate/up weights takes gate_bias or up_bias of source row
// (r / 32) * 16 + r % 16 (rows past the biases' length are 0); plain, row r
// takes bias[r] (0 past it). One vector per expert.
std::vector<float> prepared_bias(std::span<const std::vector<float>* const> bias, int64_t n);
std::vector<float> prepared_gated_bias(std::span<const std::vector<float>* const> gate_bias,
                                       std::span<const std::vector<float>* const> up_bias, int64_t n);

// Stack several matrices of one expert along N. Row blocks of `interleave` rows
// alternate between the parts (0 = plain concatenation). Codes and block scales
// only: the result carries part 0's global scale, the caller keeps the others.
Fp4Matrix stack_rows(std::span<const Fp4Matrix* const> parts, int64_t interleave = 0);

// Inverse of the packing for one element (tests and debugging): the e2m1 code
// and the block scale value the prepared layout holds for W_e[row, col]
// (a block of zero codes may report any scale).
uint8_t prepared_code(const PreparedExpertWeights& p, int64_t e, int64_t row, int64_t col);
float prepared_scale_value(const PreparedExpertWeights& p, int64_t e, int64_t row, int64_t col);

// The prepared byte of every block-scale byte of a format: the byte (>= 0),
// kPreparedScaleZero for a zero scale (stored as 0 with its codes cleared), or
// kPreparedScaleOutOfRange where the value is outside the kernels' range.
inline constexpr int16_t kPreparedScaleZero = -2;
inline constexpr int16_t kPreparedScaleOutOfRange = -1;
std::array<int16_t, 256> prepared_scale_table(Fp4Format f);

// The kernel's scale-operand constant for a format (gemm_pack.hpp).
uint32_t prepared_scale_exponent_add(Fp4Format f);
// The bias of the format's prepared scale bytes (UE5M3, gemm_pack.hpp).
constexpr int prepared_scale_bias(Fp4Format f) { return f == Fp4Format::nvfp4 ? pack::kNvfp4ScaleBias : pack::kMxfp4ScaleBias; }

}  // namespace fp4moe
