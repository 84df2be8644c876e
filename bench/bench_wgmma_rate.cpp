// bench_wgmma_rate: the decode K loop's math alone on sm_90a, by token width
// (bench/wgmma_rate_kernels.cu says what each case runs), against cuBLAS bf16
// timed in the same run. One CTA per SM, no global loads.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fmt/core.h>
#include <string>

#include "bench/bench_device.hpp"
#include "bench/wgmma_rate_kernels.hpp"
#include "fp4moe/device.hpp"
#include "measure/ceilings.hpp"
#include "common/cuda_check.hpp"
#include "runtime/timing.hpp"

int main(int argc, char** argv) {
  using namespace fp4moe;
  CLI::App app{"wgmma m64xNxk16 (A in registers) rate of the decode K loop, by token width (sm_90a)"};
  int reps = 20;
  double ms_per_launch = 2.0;
  app.add_option("--reps", reps, "Timed launches per case")->check(CLI::Range(3, 1000));
  app.add_option("--ms", ms_per_launch, "Approximate milliseconds per launch")->check(CLI::Range(0.1, 100.0));
  CLI11_PARSE(app, argc, argv);
  try {
    const auto dev = bench::bench_device("bench_wgmma_rate");
    if (!dev) return 0;
    if (dev->cc != 90) {
      fmt::print(stderr, "bench_wgmma_rate: needs sm_90 (wgmma); {} is sm_{}\n", dev->name, dev->cc);
      return 2;
    }
    const int sms = dev->sm_count;
    const double cublas = measure_bf16_tflop_per_s();
    float* sink = nullptr;
    FP4MOE_CUDA_CHECK(cudaMalloc(&sink, size_t(sms) * 512 * sizeof(float)));
    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&stream));
    fmt::print("GPU: {} SMs, cuBLAS bf16 {:.0f} TFLOP/s in this run; one CTA per SM, no global loads\n\n", sms, cublas);
    fmt::print("| N | warpgroups | wgmma groups in flight | accumulator sets | A fragments | ms | TFLOP/s | % of cuBLAS bf16 | ns per 16x16 weight block per SM |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|\n");
    const auto cases = bench::wgmma_rate_cases();
    for (size_t i = 0; i < cases.size(); ++i) {
      const bench::WgmmaRateCase& c = cases[i];
      // passes for about --ms at 500 TFLOP/s
      const double flop_per_pass = bench::wgmma_rate_flop_per_pass(c);
      const int passes = std::max(1, int(ms_per_launch * 1e-3 * 500e12 / sms / flop_per_pass));
      const TimingStats t = time_on_stream([&] { bench::launch_wgmma_rate(i, sms, passes, sink, stream); }, stream, 3, reps);
      const double tflops = flop_per_pass * passes * sms / (t.median_ms * 1e-3) / 1e12;
      const double blocks_per_sm = double(passes) * bench::kWgmmaRateStepsPerPass * c.warpgroups * 4;  // 16x16 weight blocks, 4 warps
      static const char* const kWhat[] = {"raw code words", "dequantized", "dequantized, no wgmma", "unpacked, no scale multiply",
                                          "unpacked, integer ops for the scale multiply"};
      const char* what = kWhat[c.mode];
      const bool mma = c.mode != 2;
      fmt::print("| {} | {} | {} | {} | {} | {:.3f} | {} | {} | {:.2f} |\n", c.n, c.warpgroups, mma ? std::to_string(c.depth) : "-",
                 mma ? std::to_string(c.acc_sets) : "-", what, t.median_ms, mma ? fmt::format("{:.0f}", tflops) : "-",
                 mma ? fmt::format("{:.0f}%", 100.0 * tflops / cublas) : "-", t.median_ms * 1e6 / blocks_per_sm);
    }
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
    FP4MOE_CUDA_CHECK(cudaFree(sink));
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_wgmma_rate: {}\n", e.what());
    return 1;
  }
  return 0;
}
