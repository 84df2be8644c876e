// The cuBLAS bf16 peer of fp4moe's benchmarks: bf16 weights [E, N, K] (random),
// one cublasGemmEx per active expert on contiguous (pre-gathered) rows,
// captured in a CUDA graph so launch gaps do not count against it.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "measure/cublas_handles.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {

class CublasGroupedPeer {
 public:
  struct Shape {
    int64_t n, k;
  };
  // Weights for every shape, activations and outputs for up to max_rows rows.
  CublasGroupedPeer(int64_t experts, const std::vector<Shape>& shapes, int64_t max_rows, cudaStream_t stream);
  CublasGroupedPeer(const CublasGroupedPeer&) = delete;
  CublasGroupedPeer& operator=(const CublasGroupedPeer&) = delete;

  // Median (min, max) time of shape `shape` with counts[e] rows for expert e;
  // with warm_seconds, at steady state (replayed back to back that long first,
  // as fp4moe's headline times are).
  TimingStats time(size_t shape, const std::vector<int32_t>& counts, int reps, double warm_seconds = 0) {
    return time(shape, std::vector<std::vector<int32_t>>{counts}, reps, warm_seconds);
  }
  // Per routing, the routings run back to back in one graph (as fp4moe's GEMMs
  // are timed over rotating routings: bench_grouped_gemm --rotate).
  TimingStats time(size_t shape, const std::vector<std::vector<int32_t>>& routings, int reps, double warm_seconds = 0);

 private:
  cudaStream_t stream_;
  std::vector<Shape> shapes_;
  DeviceBuffer<uint8_t> workspace_;
  std::vector<DeviceBuffer<__nv_bfloat16>> weights_;
  DeviceBuffer<__nv_bfloat16> x_, y_;
  CublasHandle handle_;  // declared last: destroyed before the workspace it was given
};

}  // namespace fp4moe
