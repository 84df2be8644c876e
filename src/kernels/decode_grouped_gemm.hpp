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

namespace fp4moe::kernels {

struct DecodeGemmArgs {
  // Prepared weights (src/format/prepare_decode.hpp), on the device.
  const uint8_t* weights = nullptr;
  const uint8_t* scales = nullptr;
  const float* dequant_scale = nullptr;  // [E]
  Fp4Format format = Fp4Format::nvfp4;
  int64_t num_experts = 0, n = 0, k = 0;
  // Activations and routing, on the device.
  const __nv_bfloat16* x = nullptr;      // [rows_x, K]
  const int32_t* gather = nullptr;       // [P] row of x for permuted row p, or nullptr (identity)
  const int32_t* expert_offsets = nullptr;  // [E+1]
  __nv_bfloat16* y = nullptr;            // [P, N]
};

struct DecodeLaunch {
  int tile = 0;     // index into plan::kDecodeTiles
  int stages = 0;   // from the planner
  int grid = 0;     // persistent CTAs; 0 = fill the device
  int debug_mode = 0;  // benchmark diagnostics only: 1 = loads only, 2 = compute only (wrong results)
};

// Validates the launch against the planner's verdict for the current device
// (throws fp4moe::Error with the plan's explanation if it does not fit), then launches.
void launch_decode_grouped_gemm(const DecodeGemmArgs& args, const DecodeLaunch& launch, cudaStream_t stream);

// Dynamic shared memory the launch will use (the planner's figure).
int64_t decode_launch_smem_bytes(const DecodeLaunch& launch);

}  // namespace fp4moe::kernels
