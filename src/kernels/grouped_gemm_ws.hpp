// Host side of the warp-specialized (sm_90a) grouped GEMM tiles: their kernel
// entry points and the tensor map of contiguous activation rows.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/grouped_gemm_common.cuh"

namespace fp4moe::kernels {

// The kernel of warp-specialized tile `tile` (plan::kDecodeTiles[tile].warp_specialized).
detail::KernelFn ws_kernel(int tile);

// x [rows, k] bf16, boxes of 64 k x nt rows in the 128-byte-swizzled layout a
// wgmma descriptor reads; rows past the end read as zeros.
CUtensorMap activation_tensor_map(const __nv_bfloat16* x, int64_t rows, int64_t k, int nt);

}  // namespace fp4moe::kernels
