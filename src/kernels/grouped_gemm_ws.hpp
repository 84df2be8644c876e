// Host side of the warp-specialized (sm_90a) grouped GEMM tiles: their kernel
// entry points and the tensor maps of their operands.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/grouped_gemm_common.cuh"

namespace fp4moe::kernels {

// The kernel of warp-specialized tile `tile` (plan::kGemmTiles[tile].warp_specialized).
detail::KernelFn ws_kernel(int tile);

// x [rows, k] bf16, boxes of 64 k x nt rows in the 128-byte-swizzled layout a
// wgmma descriptor reads; rows past the end read as zeros.
CUtensorMap activation_tensor_map(const __nv_bfloat16* x, int64_t rows, int64_t k, int nt);

// Prepared weights [E][N/16][K/64][512 bytes] as bytes {256, K/32, E N/16}: one
// box {256, bk/32, bm/16} is a stage's [bm/16 row groups][bk/64 granules][512].
CUtensorMap weight_tensor_map(const uint8_t* weights, int64_t num_experts, int64_t n, int64_t k, const plan::GemmTile& t);
// Prepared scales [E][N/16][K/128][128 bytes] as bytes {K, E N/16}: one box
// {bk, bm/16} is a stage's [bm/16 row groups][bk/128 granules][128].
CUtensorMap scale_tensor_map(const uint8_t* scales, int64_t num_experts, int64_t n, int64_t k, const plan::GemmTile& t);

}  // namespace fp4moe::kernels
