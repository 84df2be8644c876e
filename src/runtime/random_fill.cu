// Deterministic pseudo-random device buffers (a hash of the seed and the
// index): the tuner's and the benchmarks' inputs, made on the device.
#include <cuda_bf16.h>

#include "common/cuda_check.hpp"
#include "runtime/random_fill.hpp"

namespace fp4moe {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

__global__ void fill_bf16_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed * 0x9E3779B97F4A7C15ULL + uint64_t(i));
    // sum of 4 uniforms ~ normal(0, 1/3 * ...): centered, scaled to stddev
    float s = 0;
    for (int j = 0; j < 4; ++j) s += float((h >> (16 * j)) & 0xFFFF) / 65535.f;
    p[i] = __float2bfloat16_rn((s - 2.f) * 1.7320508f * stddev);
  }
}

__global__ void fill_bytes_kernel(uint8_t* p, int64_t n, uint64_t seed, uint32_t lo, uint32_t span) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed * 0x9E3779B97F4A7C15ULL + uint64_t(i));
    p[i] = static_cast<uint8_t>(lo + uint32_t(h % span));
  }
}

}  // namespace

void fill_random_bf16(void* dst, int64_t count, uint64_t seed, float stddev, cudaStream_t stream) {
  fill_bf16_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), count, seed, stddev);
  FP4MOE_CHECK_LAUNCH("fill_bf16_kernel");
}

void fill_random_bytes(void* dst, int64_t bytes, uint64_t seed, uint8_t lo, uint8_t hi, cudaStream_t stream) {
  fill_bytes_kernel<<<1024, 256, 0, stream>>>(static_cast<uint8_t*>(dst), bytes, seed, lo, uint32_t(hi - lo) + 1);
  FP4MOE_CHECK_LAUNCH("fill_bytes_kernel");
}

}  // namespace fp4moe
