// out[p] = x[rows[p]] for the permuted rows: GEMM1's activations laid out in
// expert order, so the warp-specialized tiles can load them by TMA (a tensor
// map cannot gather rows on sm_90). 16 bytes per thread, one warp per row slice.
#include <cuda_bf16.h>

#include "fp4moe/error.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

__global__ void gather_rows_kernel(const uint4* __restrict__ x, const int32_t* __restrict__ rows, int64_t count,
                                   int64_t pieces_per_row, uint4* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= count * pieces_per_row) return;
  const int64_t p = idx / pieces_per_row, c = idx % pieces_per_row;
  out[idx] = x[int64_t(rows[p]) * pieces_per_row + c];
}

}  // namespace

void launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.x && a.rows && a.out, "gather_rows: x, rows and out must be device pointers, got null");
  FP4MOE_CHECK(a.cols > 0 && a.cols % 8 == 0, "gather_rows: cols = " << a.cols << " must be a positive multiple of 8");
  FP4MOE_CHECK(a.count >= 0, "gather_rows: count = " << a.count << " is negative");
  if (a.count == 0) return;
  const int64_t pieces = a.cols / 8, total = a.count * pieces;
  constexpr int kThreads = 256;
  gather_rows_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(a.x), a.rows, a.count, pieces, reinterpret_cast<uint4*>(a.out));
  FP4MOE_CHECK_LAUNCH("gather_rows");
}

}  // namespace fp4moe::kernels
