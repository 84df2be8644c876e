// The FP8 (W4A8) prepare step on the GPU, in place: prepared FP4 weights
// re-packed for the FP8 K loop (format/fp8_fragment.hpp), each block scale
// replaced by its fold code and each row's scale computed, byte for byte what
// the host's prepare_fp8_gemm_weights (format/prepare_fp8.cpp) makes. The
// weights never leave the GPU (a GLM-5 layer holds 4.8 GB of them).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "fp4moe/format.hpp"

namespace fp4moe::kernels {

struct PrepareFp8Args {
  uint8_t* weights = nullptr;              // [E][N/16][K/64][32 lanes][16 bytes]: FP4 codes in, FP8 layout out
  uint8_t* scales = nullptr;               // [E][N/16][ceil(K/128)][128]: prepared scale bytes in, fold codes out
  // MXFP4, or NVFP4 (the caller has opted in: the fold rounds; check_fp8_format)
  Fp4Format format = Fp4Format::mxfp4;
  const float* dequant_scale = nullptr;    // [E][scale_parts]
  int scale_parts = 1;
  float* row_scale = nullptr;              // [E][N] out
  int64_t experts = 0, n = 0, k = 0;       // N a multiple of 16, K of 64 (at most 32768)
  // Out, per expert: the nonzero blocks too far below their row's largest to
  // fold (zeroed by the caller) and the first row holding one (INT32_MAX by
  // the caller).
  int* below = nullptr;
  int* first_row = nullptr;
};
void launch_prepare_fp8_weights(const PrepareFp8Args& a, cudaStream_t stream);

}  // namespace fp4moe::kernels
