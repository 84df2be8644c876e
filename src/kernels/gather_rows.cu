// out[p] = x[rows[p]] for the permuted rows: GEMM1's activations laid out in
// expert order, so the warp-specialized tiles can load them by TMA (a tensor
// map cannot gather rows on sm_90). A warp per row, 16 bytes per lane and step;
// a row wider than x's is padded with zeros (K padded to the weights' granule).
#include <cuda_bf16.h>

#include <cstdint>

#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

__global__ void __launch_bounds__(256) gather_rows_kernel(const uint4* __restrict__ x, const int32_t* __restrict__ rows,
                                                          int64_t count, int pieces_per_row, int out_pieces,
                                                          uint4* __restrict__ out) {
  wait_for_prior_grid();
  allow_dependent_grids();
  const int64_t p = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // one warp per row
  if (p >= count) return;
  const uint4* src = x + int64_t(rows[p]) * pieces_per_row;
  uint4* dst = out + p * out_pieces;
#pragma unroll 4
  for (int c = threadIdx.x % 32; c < pieces_per_row; c += 32) dst[c] = src[c];
  for (int c = pieces_per_row + threadIdx.x % 32; c < out_pieces; c += 32) dst[c] = make_uint4(0, 0, 0, 0);
}

}  // namespace

void launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.x && a.rows && a.out, "gather_rows: x, rows and out must be device pointers, got null");
  FP4MOE_CHECK(a.cols > 0 && a.cols % 8 == 0, "gather_rows: cols = " << a.cols << " must be a positive multiple of 8");
  FP4MOE_CHECK(a.count >= 0, "gather_rows: count = " << a.count << " is negative");
  const int64_t out_cols = a.out_cols ? a.out_cols : a.cols;
  FP4MOE_CHECK(out_cols >= a.cols && out_cols % 8 == 0,
               "gather_rows: out_cols = " << a.out_cols << " must be a multiple of 8 and at least cols = " << a.cols);
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0,
               "gather_rows: x and out must be 16-byte aligned (rows are copied 16 bytes at a time)");
  if (a.count == 0) return;
  FP4MOE_CHECK(out_cols / 8 <= INT32_MAX, "gather_rows: out_cols = " << out_cols << " is too wide");
  constexpr int kRowsPerBlock = 8;  // 256 threads, a warp per row: no per-element index arithmetic
  launch_dependent(gather_rows_kernel, static_cast<unsigned>((a.count + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32,
                   0, stream, reinterpret_cast<const uint4*>(a.x), a.rows, a.count, static_cast<int>(a.cols / 8),
                   static_cast<int>(out_cols / 8), reinterpret_cast<uint4*>(a.out));
  FP4MOE_CHECK_LAUNCH("gather_rows");
}

}  // namespace fp4moe::kernels
