// Fills device memory with deterministic pseudo-random values (queued on `stream`).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace fp4moe {

// Approximately N(0, stddev^2) (a sum of four uniforms), rounded to bf16.
void fill_random_bf16(void* dst, int64_t count, uint64_t seed, float stddev, cudaStream_t stream);
// Uniform in [lo, hi].
void fill_random_bytes(void* dst, int64_t bytes, uint64_t seed, uint8_t lo, uint8_t hi, cudaStream_t stream);

}  // namespace fp4moe
