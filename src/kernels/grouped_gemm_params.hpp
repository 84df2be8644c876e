// What the host launcher hands the FP4 grouped GEMM kernels: their parameters,
// the tensor maps of the warp-specialized tiles and the kernel entry type.
// Host and device code include it.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/fp4_grouped_gemm.hpp"

namespace fp4moe::kernels::detail {

struct KernelParams {
  const uint8_t* weights;
  const uint8_t* scales;
  const float* dequant_scale;
  const __nv_bfloat16* x;
  const int32_t* gather;
  const int32_t* expert_offsets;
  __nv_bfloat16* y;
  float* accumulate;
  const int32_t* permuted_pair;
  const float* topk_weights;
  int64_t n, k;
  int epilogue;  // GemmEpilogue
  int scale_parts, top_k;
  int num_experts;
  int stages;
  uint32_t scale_add2;  // pack::scale_add2(exponent_add): the exponent add in both bf16 halves
  GemmProbe probe;      // GemmProbe::none but in benchmark diagnostics
  int64_t permuted_rows;  // P (warp-specialized tiles: no row at or past it is read or written); 0 on all-warps tiles
  int offsets_ready_at_launch;  // GroupedGemmArgs::offsets_ready_at_launch (warp-specialized tiles)
  // Split-K (warp-specialized tiles, plan/split_k.hpp): each item's K loop in
  // k_splits parts when the launch's items times k_splits fit split_slots.
  int k_splits;
  // The balanced split (plan/split_k.hpp, kBalancedKSplit; k_splits is 1):
  // each CTA the same share of all items' K stages, one slot per CTA.
  int balanced_split;
  int64_t split_slots;
  float* split_partials;
  int32_t* split_counters;
  // e4m3 tiles (GroupedGemmArgs::x_e4m3): each permuted row's activation
  // scale [P] and each weight row's scale [E][N].
  const float* x_scale;
  const float* row_scale;
  int fp8_promotion_stages;  // GroupedGemmArgs::fp8_promotion_stages
  // The biased kernel instances only (GroupedGemmArgs::bias, ::activation).
  const float* bias;
  int clamped_swiglu;
  float swiglu_limit, swiglu_alpha;
};

// Activation boxes of 8 << j rows, j < kRowBoxMaps (8 to 128 rows): an item
// whose K loop is narrower than nt gets its width as a sum of them.
inline constexpr int kRowBoxMaps = 5;

// The tensor maps a warp-specialized tile's producer copies through (TMA):
// the activation rows in expert order (nt-row boxes, and the narrower ones of
// x_rows where 8 << j < nt), and the prepared weights and block scales, so
// that a stage is one copy per operand (a few for narrowed activations).
// Every kernel takes them; the all-warps tiles get zeroed ones.
struct TensorMaps {
  CUtensorMap x, weights, scales;
  CUtensorMap x_rows[kRowBoxMaps];
};
using KernelFn = void (*)(KernelParams, TensorMaps);

// Which kernel instance of a tile runs: the plain epilogue (no bias, silu), or
// the biased one (bias and either activation). Two instances, so that the
// models without biases keep their kernels' registers and instructions.
enum class EpilogueInstance : int { plain = 0, biased = 1 };

}  // namespace fp4moe::kernels::detail
