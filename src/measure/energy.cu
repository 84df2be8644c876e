#include "measure/energy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/cuda_check.hpp"
#include "fp4moe/error.hpp"
#include "measure/dense_fp8_gemm.hpp"
#include "measure/dense_gemm.hpp"
#include "measure/gpu_sensors.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"

namespace fp4moe {
namespace {

// b = a, 16 bytes per thread and step: with few CTAs it moves fewer bytes per
// second, the rest of the chip idle, which is what the fit needs.
__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) b[i] = a[i];
}

using Clock = std::chrono::steady_clock;

// `launch` back to back for `seconds` (after a quarter of that to settle),
// counting launches; the board's energy over the timed part.
template <class Launch>
EnergySample run_loop(const GpuEnergyCounter& counter, Launch&& launch, cudaStream_t s, double seconds, double bytes_each,
                      double flops_each, std::string what) {
  const auto run_for = [&](double secs) {
    int64_t runs = 0;
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < secs) {
      for (int i = 0; i < 8; ++i) launch();
      runs += 8;
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    return runs;
  };
  run_for(seconds / 4);
  const double j0 = counter.joules();
  const auto t0 = Clock::now();
  const int64_t runs = run_for(seconds);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double j1 = counter.joules();
  return {std::move(what), secs, j1 - j0, double(runs) * bytes_each, double(runs) * flops_each};
}

}  // namespace

EnergyModel measure_energy_model(double seconds_per_loop) {
  FP4MOE_CHECK(seconds_per_loop > 0 && std::isfinite(seconds_per_loop),
               "energy model: seconds_per_loop = " << seconds_per_loop << " must be positive and finite");
  EnergyModel m;
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  const GpuEnergyCounter counter(dev);
  if (!counter.available()) {
    m.why_not = counter.why_not();
    return m;
  }
  m.power_cap_w = counter.power_limit_w();
  int sms = 0;
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const OwnedStream stream;
  constexpr int64_t kCopyBytes = int64_t(1) << 30;
  DeviceBuffer<uint8_t> a{size_t(kCopyBytes)}, b{size_t(kCopyBytes)};
  fill_random_bytes(a.get(), kCopyBytes, 1, 0, 255, stream.s);
  for (const int ctas : {4 * sms, sms, sms / 2, sms / 4, sms / 8}) {
    const auto copy = [&] {
      copy_kernel<<<ctas, 256, 0, stream.s>>>(reinterpret_cast<const uint4*>(a.get()), reinterpret_cast<uint4*>(b.get()),
                                              kCopyBytes / 16);
      FP4MOE_CHECK_LAUNCH("copy_kernel");
    };
    m.samples.push_back(run_loop(counter, copy, stream.s, seconds_per_loop, 2.0 * double(kCopyBytes), 0,
                                 "copy " + std::to_string(ctas) + " CTAs"));
  }
  // power = static + joules_per_byte x bytes per second, least squares over the copy loops
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = double(m.samples.size());
  for (const EnergySample& e : m.samples) {
    const double x = e.bytes / e.seconds, y = e.watts();
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  m.joules_per_byte = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  m.static_w = (sy - m.joules_per_byte * sx) / n;
  double ss = 0;
  for (const EnergySample& e : m.samples) {
    const double r = e.watts() - (m.static_w + m.joules_per_byte * e.bytes / e.seconds);
    ss += r * r;
  }
  m.fit_rms_w = std::sqrt(ss / n);
  const DenseGemm gemm(8192, stream.s);
  const EnergySample g = run_loop(counter, [&] { gemm.run(); }, stream.s, seconds_per_loop, gemm.bytes(), gemm.flops(),
                                  "cuBLAS bf16 8192^3");
  m.samples.push_back(g);
  m.joules_per_bf16_flop = (g.joules - m.static_w * g.seconds - m.joules_per_byte * g.bytes) / g.flops;
  try {
    const DenseFp8Gemm fp8(8192, stream.s);
    const EnergySample f = run_loop(counter, [&] { fp8.run(); }, stream.s, seconds_per_loop, fp8.bytes(), fp8.flops(),
                                    "cuBLASLt e4m3 8192^3");
    m.samples.push_back(f);
    m.joules_per_fp8_flop = (f.joules - m.static_w * f.seconds - m.joules_per_byte * f.bytes) / f.flops;
  } catch (const Error& e) {  // the bf16 model stands without it; the report says why
    m.fp8_why_not = e.what();
  }
  m.why_not.clear();
  if (!(m.power_cap_w > m.static_w) || !(m.joules_per_byte > 0) || !(m.joules_per_bf16_flop > 0))
    m.why_not = "the fit is not physical (cap " + std::to_string(m.power_cap_w) + " W, static " +
                std::to_string(m.static_w) + " W, " + std::to_string(m.joules_per_byte * 1e12) + " pJ/byte, " +
                std::to_string(m.joules_per_bf16_flop * 1e12) + " pJ/FLOP)";
  return m;
}

double energy_bound_ms(const EnergyModel& m, double bytes, double flops, double fp8_flops) {
  if (!m.measured()) return 0;
  return (bytes * m.joules_per_byte + flops * m.joules_per_bf16_flop + fp8_flops * m.joules_per_fp8_flop) /
         (m.power_cap_w - m.static_w) * 1e3;
}

}  // namespace fp4moe
