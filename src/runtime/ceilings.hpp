// The two ceilings every benchmark is measured against, taken in the same run:
// device-to-device copy bandwidth and the cuBLAS bf16 dense GEMM rate.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace fp4moe {

struct Ceilings {
  double copy_tb_per_s = 0;     // (bytes read + bytes written) / time, large cudaMemcpy D2D
  double bf16_tflop_per_s = 0;  // cuBLAS bf16 GEMM, fp32 accumulation, random data
  int64_t copy_bytes = 0;
  int gemm_size = 0;
};

// copy_bytes: buffer size of the copy test; gemm_size: M = N = K of the GEMM.
Ceilings measure_ceilings(int64_t copy_bytes = int64_t(2) << 30, int gemm_size = 8192);

// The cuBLAS bf16 rate alone (TFLOP/s), as measure_ceilings takes it. Timed beside a
// case, it is the ceiling at that moment's clocks: on the H200 a long sweep reaches
// the 700 W cap and the start-of-run rate no longer holds (docs/benchmarks.md).
double measure_bf16_tflop_per_s(int gemm_size = 8192);

// Fills device memory with deterministic pseudo-random values.
void fill_random_bf16(void* dst, int64_t count, uint64_t seed, float stddev, cudaStream_t stream);
void fill_random_bytes(void* dst, int64_t bytes, uint64_t seed, uint8_t lo, uint8_t hi, cudaStream_t stream);

}  // namespace fp4moe
