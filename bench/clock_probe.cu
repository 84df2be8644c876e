#include "bench/clock_probe.hpp"

#include "fp4moe/device.hpp"
#include "kernels/dependent_launch.cuh"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe::bench {
namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void clock_probe_kernel(double* mhz) {
  const uint64_t t0 = global_ns();
  const long long c0 = clock64();
  while (global_ns() - t0 < 50000) {
  }
  const long long c1 = clock64();
  const uint64_t t1 = global_ns();
  *mhz = double(c1 - c0) / double(t1 - t0) * 1e3;
}

__global__ void spin_kernel(long long cycles) {
  const long long c0 = clock64();
  while (clock64() - c0 < cycles) {
  }
}

__global__ void empty_dependent_kernel() {
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_grids();
}

}  // namespace

double sm_clock_mhz(cudaStream_t stream) {
  DeviceBuffer<double> mhz(1);
  clock_probe_kernel<<<1, 1, 0, stream>>>(mhz.get());
  FP4MOE_CHECK_LAUNCH("clock_probe_kernel");
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return mhz.download()[0];
}

void keep_sms_busy(double us, cudaStream_t stream) {
  const int sms = list_devices().at(0).sm_count;
  // cycles at the top clock (1980 MHz on the H200): at a lower clock the spell is longer
  spin_kernel<<<sms * 4, 128, 0, stream>>>(static_cast<long long>(us * 1980.0));
  FP4MOE_CHECK_LAUNCH("spin_kernel");
}

void launch_empty_dependent(cudaStream_t stream) {
  kernels::launch_dependent(empty_dependent_kernel, 1, 32, 0, stream);
  FP4MOE_CHECK_LAUNCH("empty_dependent_kernel");
}

}  // namespace fp4moe::bench
