#include "runtime/gemm_step.hpp"

#include <algorithm>

#include "common/cuda_check.hpp"
#include "fp4moe/error.hpp"
#include "plan/gemm_plan.hpp"
#include "runtime/device_limits.hpp"

namespace fp4moe {

kernels::GroupedGemmArgs grouped_gemm_args(const ProjectionView& w, const GemmOperands& io) {
  kernels::GroupedGemmArgs a;
  a.weights = w.weights;
  a.scales = w.scales;
  a.dequant_scale = w.dequant_scale;
  a.scale_parts = w.scale_parts;
  a.format = w.format;
  a.num_experts = w.experts;
  a.n = w.n;
  a.k = w.k;
  a.x = io.x;
  a.gather = io.gather;
  a.permuted_rows = io.rows;
  a.expert_offsets = io.offsets;
  a.offsets_ready_at_launch = io.offsets_ready_at_launch;
  a.y = io.y;
  a.epilogue = io.epilogue;
  a.bias = w.bias;
  a.activation = io.activation;
  a.swiglu_limit = io.swiglu_limit;
  a.swiglu_alpha = io.swiglu_alpha;
  if (io.epilogue == kernels::GemmEpilogue::scatter_add) {
    a.accumulate = io.accumulate;
    a.permuted_pair = io.permuted_pair;
    a.topk_weights = io.topk_weights;
    a.top_k = io.top_k;
  }
  a.split_workspace = io.split_workspace;
  a.split_workspace_bytes = io.split_workspace_bytes;
  if (w.activations == plan::ActivationType::e4m3) {  // the GEMM reads the FP8 row copy's output
    a.x = nullptr;
    a.gather = nullptr;
    a.x_e4m3 = io.row_copy_e4m3;
    a.x_scale = io.row_scales;
    a.weight_row_scale = w.row_scale;
    a.fp8_promotion_stages = io.fp8_promotion_stages;
  }
  return a;
}

GemmStepLaunch prepare_gemm_step(const ProjectionView& w, const GemmOperands& io, const kernels::GemmLaunch& launch,
                                 const plan::DeviceLimits& device) {
  FP4MOE_CHECK(launch.tile >= 0 && launch.tile < plan::kNumGemmTiles,
               "GEMM tile index " << launch.tile << " is outside 0.." << plan::kNumGemmTiles - 1);
  kernels::GroupedGemmArgs a = grouped_gemm_args(w, io);
  const int64_t x_cols = io.x_cols ? io.x_cols : w.k;
  FP4MOE_CHECK(x_cols > 0 && x_cols <= w.k, "GEMM step: x has " << x_cols << " columns for K = " << w.k);
  FP4MOE_CHECK(io.gather || x_cols == w.k, "GEMM step: rows of " << x_cols << " columns for K = " << w.k << " need a gather");
  GemmStepLaunch s;
  if (w.activations == plan::ActivationType::e4m3) {
    // e4m3 tiles read the rows the FP8 row copy quantizes, in expert order (gathered on the way)
    FP4MOE_CHECK(io.x && io.row_copy_e4m3 && io.row_scales,
                 "GEMM step: e4m3 activations need x and the FP8 row copy's buffers (row_copy_e4m3, row_scales)");
    FP4MOE_CHECK(io.rows > 0, "GEMM step: the FP8 row copy needs permuted rows (P = expert_offsets[E]), got " << io.rows);
    s.quantizes_rows = true;
    s.fp8_row_copy = {.x = io.x, .rows = io.gather, .count = io.rows, .cols = x_cols, .group = 0,
                      .codes = io.row_copy_e4m3, .out_cols = w.k, .scales = io.row_scales};
    s.gemm = kernels::prepare_grouped_gemm(a, launch, device);
    return s;
  }
  // A tensor map cannot gather rows on sm_90: tiles that load by TMA read a
  // copy of the gathered rows in expert order (one-row boxes and in-kernel
  // cp.async gathers both measured slower than this copy; docs/kernels.md).
  s.copies_rows = io.gather && (plan::kGemmTiles[launch.tile].warp_specialized || x_cols != w.k);
  if (s.copies_rows) {
    FP4MOE_CHECK(io.row_copy, "tile " << plan::gemm_tile_name(launch.tile)
                                      << " needs its gathered rows copied in expert order; no row copy buffer was given");
    FP4MOE_CHECK(io.rows > 0, "GEMM step: the row copy needs permuted rows (P = expert_offsets[E]), got " << io.rows);
    s.row_copy = {io.x, io.gather, io.rows, x_cols, io.row_copy, w.k};
    a.x = io.row_copy;
    a.gather = nullptr;
  }
  s.gemm = kernels::prepare_grouped_gemm(a, launch, device);
  return s;
}

void enqueue_gemm_step(const GemmStepLaunch& s, cudaStream_t stream) {
  if (s.copies_rows) kernels::launch_gather_rows(s.row_copy, stream);
  if (s.quantizes_rows) kernels::launch_quantize_rows_fp8(s.fp8_row_copy, stream);
  kernels::enqueue_grouped_gemm(s.gemm, stream);
}

void bind_gemm_input(GemmStepLaunch& s, const __nv_bfloat16* x) {
  if (s.quantizes_rows) s.fp8_row_copy.x = x;
  else if (s.copies_rows) s.row_copy.x = x;
  else kernels::rebind_activations(s.gemm, x);
}

void launch_gemm_step(const ProjectionView& w, const GemmOperands& io, const kernels::GemmLaunch& launch,
                      cudaStream_t stream) {
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local plan::DeviceLimits limits;
  if (limits.device != dev) limits = device_limits(dev);
  enqueue_gemm_step(prepare_gemm_step(w, io, launch, limits), stream);
}

}  // namespace fp4moe
