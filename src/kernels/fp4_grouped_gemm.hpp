// Host interface of the decode grouped GEMM (NVFP4/MXFP4 weights x bf16 activations).
//
// For every expert e and every permuted row p in [expert_offsets[e], expert_offsets[e+1]):
//   Y[p, :] = X[gather ? gather[p] : p, :] . dequant(W_e)^T          (bf16 out, fp32 accumulation)
// Experts without rows cost one read of their offsets. Nothing is read back
// to the host: the kernel is graph-capture safe.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fp4moe/format.hpp"
#include "plan/gemm_layout.hpp"
#include "plan/split_k.hpp"

namespace fp4moe::kernels {

// What the epilogue does with a finished [tokens x bm] tile.
enum class GemmEpilogue {
  store,        // y[p, n] = acc (bf16), y has N columns
  swiglu,       // rows alternate 16 gate, 16 up: y[p, i] = silu(gate) * up (bf16), y has N/2 columns
  scatter_add,  // accumulate[t, n] += topk_weights[pair] * acc (fp32 atomics), pair = permuted_pair[p], t = pair / top_k
};

// The SwiGLU epilogue's activation of gate g and up u (after their biases).
enum class GemmActivation {
  silu,            // silu(g) * u
  clamped_swiglu,  // gpt-oss: g' = min(g, limit), u' = clamp(u, -limit, limit), g' sigmoid(alpha g') (u' + 1)
};

struct GroupedGemmArgs {
  // Prepared weights (src/format/prepare_gemm.hpp), on the device.
  const uint8_t* weights = nullptr;
  const uint8_t* scales = nullptr;
  const float* dequant_scale = nullptr;  // [E][scale_parts]; row r uses part (r / 16) % scale_parts
  int scale_parts = 1;
  Fp4Format format = Fp4Format::nvfp4;
  int64_t num_experts = 0, n = 0, k = 0;
  // Activations and routing, on the device.
  const __nv_bfloat16* x = nullptr;      // [rows, K]: P in order, or the rows gather indexes
  const int32_t* gather = nullptr;       // [P] row of x for permuted row p, or nullptr (identity)
  // e4m3 activations (the FP8 tiles, docs/fp8.md) in place of x: [P, K]
  // codes in expert order and each row's scale [P] (the FP8 row copy,
  // quantize_rows_fp8.hpp); the weights and scales are then the FP8 layout
  // (format/prepare_fp8.hpp) and weight_row_scale its per-row scales [E][N];
  // dequant_scale is not read.
  const uint8_t* x_e4m3 = nullptr;
  const float* x_scale = nullptr;
  const float* weight_row_scale = nullptr;
  // e4m3 tiles that promote partial sums (GemmTile::promotes_partial_sums):
  // the wgmma partial sums are added to fp32 accumulators every this many K
  // stages, 0: once per item. 0 by default: the error is lost inside each
  // k32 wgmma, not along K, and each promotion waits for the stage's wgmma
  // (docs/fp8.md, "Accumulation").
  int fp8_promotion_stages = 0;
  plan::ActivationType activations() const { return x_e4m3 ? plan::ActivationType::e4m3 : plan::ActivationType::bf16; }
  // P = expert_offsets[E], the permuted rows computed. Warp-specialized tiles
  // need it: they load the rows in expert order by TMA, from x with gather null
  // (a GEMM step's row copy gives them that); they read and write no row at
  // or past P. 0 (unknown) is accepted by the all-warps tiles only.
  int64_t permuted_rows = 0;
  const int32_t* expert_offsets = nullptr;  // [E+1]
  // True when expert_offsets were written by the kernel two or more launches
  // back on the stream (or uploaded before), and the kernel right before this
  // launch waits for its own predecessor before it lets dependents launch (every
  // fp4moe kernel does: griddepcontrol.wait, then launch_dependents): this launch
  // then cannot start before the writer has completed. A warp-specialized tile,
  // launched dependently, then reads its schedule (L2 loads) and starts loading
  // weights while the kernel right before finishes. Leave false when that kernel
  // writes the offsets, unless the launch gathers (warp-specialized tiles then
  // copy the rows first, so the GEMM's predecessor is that copy).
  bool offsets_ready_at_launch = false;
  __nv_bfloat16* y = nullptr;            // [P, N] (store) or [P, N/2] (swiglu)
  GemmEpilogue epilogue = GemmEpilogue::store;
  // Per-feature biases [E][N] fp32 in the prepared row order (gate/up rows
  // interleaved as the weights are), added to the accumulator before the
  // epilogue's store, SwiGLU or weighted sum; or null. With a bias, or the
  // clamped activation, the launch runs the tile's biased kernel instance.
  const float* bias = nullptr;
  GemmActivation activation = GemmActivation::silu;  // swiglu epilogue
  float swiglu_limit = 7.0f, swiglu_alpha = 1.702f;  // clamped_swiglu
  float* accumulate = nullptr;           // scatter_add: [T, N] fp32, 16-byte aligned
  const int32_t* permuted_pair = nullptr;
  const float* topk_weights = nullptr;
  int top_k = 0;
  // Split-K workspace (warp-specialized tiles; plan/split_k.hpp): its first
  // SplitKWorkspace::kCounterBytes must be zero before the first launch (every
  // launch leaves them zero); launches using it must not overlap in time.
  // Null: items are never split.
  void* split_workspace = nullptr;
  int64_t split_workspace_bytes = 0;
};

// Benchmark diagnostics: a part of the kernel left out, to see where the time
// goes (bench_grouped_gemm). Every probe but `none` gives wrong results.
enum class GemmProbe : int {
  none = 0,
  loads_only = 1,  // the stages are loaded, nothing multiplied
  math_only = 2,   // nothing loaded: the math runs on stale stages
  no_output = 3,   // no output tile staged or written
};

struct GemmLaunch {
  int tile = 0;     // index into plan::kGemmTiles
  int stages = 0;   // from the planner
  int grid = 0;     // persistent CTAs; 0 = fill the device
  GemmProbe probe = GemmProbe::none;
  int k_splits = 0; // split-K: 0 = the planner's choice (plan_k_splits), 1 = none, n = n parts (needs the workspace),
                    // plan::kBalancedKSplit = the balanced split (tiles that balance: GemmTile::balances_k)
  bool balance_k = false;  // k_splits 0: the planner may choose the balanced split (plan/split_k.hpp)
};

// A tile that loads its rows in expert order by TMA (warp-specialized tiles: a
// tensor map cannot gather rows on sm_90) needs gathered rows copied into
// expert order first (launch_gather_rows), a launch of its own before the GEMM.
// The launch itself: kernels/grouped_gemm_launch.hpp.

}  // namespace fp4moe::kernels
