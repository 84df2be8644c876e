// The down projection and the weighted sum of a forward of few tokens, in one
// launch and deterministic without atomics (the small-batch path's second
// launch): out[t] = sum over t's slots j, in order, of
// w[t, j] (W2_e . a2[row of (t, j)] + b2_e), plus the shared expert's
// W2_s . a2_s[t], as bf16. Each CTA owns whole 16-row groups of H and sums
// every expert's part of them itself, so no CTA waits for another.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fp4moe/format.hpp"

namespace fp4moe::kernels {

// One projection's prepared weights (format/prepare_gemm.hpp): [E][N/16][K/64]
// granules, scales [E][N/16][ceil(K/128)][128], dequant_scale [E][scale_parts].
struct DecodeWeights {
  const uint8_t* weights = nullptr;
  const uint8_t* scales = nullptr;
  const float* dequant_scale = nullptr;
  int scale_parts = 1;
  int64_t k = 0;  // the projection's K (the expert width); N is the layer's hidden size
};

struct DecodeDownArgs {
  Fp4Format format = Fp4Format::nvfp4;
  DecodeWeights routed;                      // E experts' down projections
  const float* bias = nullptr;               // [E][H] fp32, or null
  int experts = 0;                           // E held
  int64_t hidden = 0;                        // H (a multiple of 16)
  int64_t tokens = 0;                        // T, 1..kDecodeDownMaxTokens
  int top_k = 0;
  const int32_t* expert_offsets = nullptr;   // [E+1]: each expert's permuted rows
  const int32_t* pair_pos = nullptr;         // [T k]: each pair's permuted row, -1 where dropped
  const float* topk_weights = nullptr;       // [T k]
  const __nv_bfloat16* a2 = nullptr;         // [rows][routed.k]: GEMM1's SwiGLU output, permuted rows
  // The shared expert (or none: shared.weights null): one expert whose a2 rows are the tokens, weight 1.
  DecodeWeights shared;
  const __nv_bfloat16* shared_a2 = nullptr;  // [T][shared.k]
  __nv_bfloat16* out = nullptr;              // [T][H]
  int32_t* status = nullptr;                 // kStatusWords words: a row not finite is reported, or null
};

// An expert has at most T rows (a token picks an expert once), so one mma n8 tile holds them.
inline constexpr int64_t kDecodeDownMaxTokens = 8;
inline constexpr int64_t kDecodeDownMaxPairs = 64;  // T top_k rows (8 tokens x top-8)
void launch_decode_down(const DecodeDownArgs& a, int sm_count, cudaStream_t stream);

}  // namespace fp4moe::kernels
