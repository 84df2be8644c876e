// One GEMM of a forward as it launches, built by the code every caller shares
// (the layer's forward plan, its tuner, bench_grouped_gemm, the tests): the
// grouped GEMM's arguments from a projection and its operands, the row copy
// its tile needs, the prepared kernel launch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fp4moe/format.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/quantize_rows_fp8.hpp"
#include "kernels/grouped_gemm_launch.hpp"
#include "kernels/routing_kernels.hpp"
#include "plan/arch.hpp"

namespace fp4moe {

// Prepared FP4 weights as a GEMM reads them (src/format/prepare_gemm.hpp's
// layout): a layer's projection, or a benchmark's random bytes.
struct ProjectionView {
  const uint8_t* weights = nullptr;
  const uint8_t* scales = nullptr;
  const float* dequant_scale = nullptr;  // [E][scale_parts]
  const float* bias = nullptr;           // [E][N] in the prepared row order, or null
  int scale_parts = 1;
  Fp4Format format = Fp4Format::nvfp4;
  int64_t n = 0, k = 0, experts = 0;
  // e4m3: the weights and scales are the FP8 layout (format/prepare_fp8.hpp)
  // with its per-row scales [E][N]; dequant_scale is not read.
  plan::ActivationType activations = plan::ActivationType::bf16;
  const float* row_scale = nullptr;
  bool biased() const { return bias != nullptr; }
};

// What one GEMM reads and writes besides its weights.
struct GemmOperands {
  const __nv_bfloat16* x = nullptr;  // [rows, x_cols] in order, or the rows `gather` indexes
  int64_t x_cols = 0;                // x's row width when narrower than K (0: K); the rest reads as zeros
  const int32_t* gather = nullptr;   // [rows] row of x for each permuted row, or null
  int64_t rows = 0;                  // permuted rows P
  const int32_t* offsets = nullptr;  // [E+1]
  bool offsets_ready_at_launch = false;  // GroupedGemmArgs::offsets_ready_at_launch
  kernels::GemmEpilogue epilogue = kernels::GemmEpilogue::store;
  __nv_bfloat16* y = nullptr;        // store, swiglu
  // scatter_add: the fused finalize's weighted sum
  float* accumulate = nullptr;
  const int32_t* permuted_pair = nullptr;
  const float* topk_weights = nullptr;
  int top_k = 0;
  // swiglu: the model's activation
  kernels::GemmActivation activation = kernels::GemmActivation::silu;
  float swiglu_limit = 7.0f, swiglu_alpha = 1.702f;
  void* split_workspace = nullptr;   // split-K (null: never split)
  int64_t split_workspace_bytes = 0;
  // Where gathered rows are copied in expert order for a tile that loads them
  // by TMA ([rows, K], 16-byte aligned), or null where no tile needs it.
  __nv_bfloat16* row_copy = nullptr;
  // e4m3 weights (ProjectionView::activations): the FP8 row copy's output, the
  // rows of x (gathered where `gather` is given) as e4m3 in expert order
  // [rows, K] and their scales [rows].
  uint8_t* row_copy_e4m3 = nullptr;
  float* row_scales = nullptr;
  int fp8_promotion_stages = 0;  // GroupedGemmArgs::fp8_promotion_stages
};

// The grouped GEMM's arguments: the one place they are filled.
kernels::GroupedGemmArgs grouped_gemm_args(const ProjectionView& w, const GemmOperands& io);

// One GEMM step, ready to queue: the row copy where the tile loads its rows
// in expert order (or x is narrower than K), or on e4m3 tiles the FP8 row
// copy (always), then the GEMM.
struct GemmStepLaunch {
  bool copies_rows = false;
  kernels::GatherRowsArgs row_copy;
  bool quantizes_rows = false;
  kernels::QuantizeRowsFp8Args fp8_row_copy;
  kernels::PreparedGemm gemm;
};

// Checks and assembles the step (the planner's verdict, the grid, split-K,
// tensor maps). Throws fp4moe::Error naming what does not fit.
GemmStepLaunch prepare_gemm_step(const ProjectionView& w, const GemmOperands& io, const kernels::GemmLaunch& launch,
                                 const plan::DeviceLimits& device);
// Queues it: one or two launches, nothing computed.
void enqueue_gemm_step(const GemmStepLaunch& s, cudaStream_t stream);
// The same step on another x of the same shape (a forward's hidden states).
void bind_gemm_input(GemmStepLaunch& s, const __nv_bfloat16* x);

// prepare and enqueue on the current device (tests, one-off launches).
void launch_gemm_step(const ProjectionView& w, const GemmOperands& io, const kernels::GemmLaunch& launch,
                      cudaStream_t stream);

}  // namespace fp4moe
