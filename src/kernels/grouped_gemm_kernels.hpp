// The FP4 grouped GEMM kernels' entry points, one per tile, and the tensor maps
// the warp-specialized (sm_90a) tiles copy their operands through.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/grouped_gemm_params.hpp"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels {

// The kernel of tile `tile` with epilogue instance `e`: warp-specialized
// (fp4_grouped_gemm_ws_sm90.cu) or all warps loading (fp4_grouped_gemm.cu),
// as plan::kGemmTiles[tile] says. rounded_fold: an e4m3 tile's instance for
// NVFP4 weights (fp8::rounded_fold_table).
detail::KernelFn ws_kernel(int tile, detail::EpilogueInstance e, bool rounded_fold = false);
detail::KernelFn all_warps_kernel(int tile, detail::EpilogueInstance e);

// x [rows, k] of `type` (bf16 or e4m3), boxes of one 128-byte atom (64 or 128
// k) x nt rows in the 128-byte-swizzled layout a wgmma descriptor reads; rows
// past the end read as zeros.
CUtensorMap activation_tensor_map(const void* x, int64_t rows, int64_t k, int nt, plan::ActivationType type);

// Prepared weights [E][N/16][K/64][512 bytes] as bytes {256, K/32, N/16, E}: one
// box {256, bk/32, bm/16, 1} is a stage's [bm/16 row groups][bk/64 granules][512]
// (plan::weight_tma_geometry; zeros past K and past the expert's N).
CUtensorMap weight_tensor_map(const uint8_t* weights, int64_t num_experts, int64_t n, int64_t k, const plan::GemmTile& t);
// Prepared scales [E][N/16][ceil(K/128)][128 bytes] as bytes {ceil(K/128) 128,
// N/16, E}: one box {bk, bm/16, 1} is a stage's [bm/16 row groups][bk/128
// granules][128] (plan::scale_tma_geometry).
CUtensorMap scale_tensor_map(const uint8_t* scales, int64_t num_experts, int64_t n, int64_t k, const plan::GemmTile& t);

// A map's global address replaced, its shape and box kept (cuTensorMapReplaceAddress).
void replace_tensor_map_address(CUtensorMap& map, const void* base);

}  // namespace fp4moe::kernels
