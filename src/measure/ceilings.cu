#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "fp4moe/error.hpp"
#include "measure/ceilings.hpp"
#include "measure/dense_gemm.hpp"
#include "runtime/random_fill.hpp"
#include "runtime/cublas_check.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "measure/steady_timing.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {


double measure_bf16_tflop_per_s(int gemm_size) {
  const OwnedStream stream;
  const DenseGemm gemm(gemm_size, stream.s);
  return gemm.tflop_per_s(time_on_stream([&] { gemm.run(); }, stream.s, 3, 20).median_ms);
}

Ceilings measure_ceilings(double warm_seconds, int64_t copy_bytes, int gemm_size) {
  FP4MOE_CHECK(warm_seconds >= 0 && std::isfinite(warm_seconds),
               "ceilings: warm_seconds = " << warm_seconds << " must be finite and at least 0");
  Ceilings c;
  c.warm_seconds = warm_seconds;
  c.copy_bytes = copy_bytes;
  c.gemm_size = gemm_size;
  const OwnedStream stream;
  const auto copy_rate = [&](double ms) { return 2.0 * double(copy_bytes) / (ms * 1e-3) / 1e12; };
  {
    DeviceBuffer<uint8_t> a{static_cast<size_t>(copy_bytes)}, b{static_cast<size_t>(copy_bytes)};
    fill_random_bytes(a.get(), copy_bytes, 1, 0, 255, stream.s);
    const auto copy = [&] {
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), size_t(copy_bytes), cudaMemcpyDeviceToDevice, stream.s));
    };
    c.copy_tb_per_s_burst = copy_rate(time_on_stream(copy, stream.s, 3, 20).median_ms);
    const DenseGemm gemm(gemm_size, stream.s);
    c.bf16_tflop_per_s_burst = gemm.tflop_per_s(time_on_stream([&] { gemm.run(); }, stream.s, 3, 20).median_ms);
    if (warm_seconds > 0) {
      const SteadyTiming tc = time_steady(copy, stream.s, warm_seconds, 20);
      c.copy_tb_per_s = copy_rate(tc.steady.median_ms), c.copy_sensors = tc.sensors;
      const SteadyTiming tg = time_steady([&] { gemm.run(); }, stream.s, warm_seconds, 20);
      c.bf16_tflop_per_s = gemm.tflop_per_s(tg.steady.median_ms), c.gemm_sensors = tg.sensors;
      c.energy = measure_energy_model(std::min(1.0, warm_seconds));
    } else {
      c.copy_tb_per_s = c.copy_tb_per_s_burst, c.bf16_tflop_per_s = c.bf16_tflop_per_s_burst;
    }
  }
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  return c;
}

double energy_floor_ms(const Ceilings& c, double bytes, double flops) {
  return std::max(floor_ms(c, bytes, flops), energy_bound_ms(c.energy, bytes, flops));
}

double floor_ms(const Ceilings& c, double bytes, double flops, bool burst) {
  const double copy = burst ? c.copy_tb_per_s_burst : c.copy_tb_per_s;
  const double dense = burst ? c.bf16_tflop_per_s_burst : c.bf16_tflop_per_s;
  return std::max(bytes / (copy * 1e12), flops / (dense * 1e12)) * 1e3;
}

}  // namespace fp4moe
