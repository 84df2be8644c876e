// Timing as a busy server runs a kernel: the CUDA graph replayed back to back
// until the clocks have settled at the power cap, then timed with the SM clock
// and board power sampled beside it. And the after-idle burst, which a busy
// server never gets, as a second figure.
#pragma once
#include <chrono>
#include <functional>
#include <thread>

#include "runtime/captured_graph.hpp"
#include "runtime/gpu_sensors.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {

struct SteadyTiming {
  TimingStats steady;  // after warm_seconds of back-to-back replays
  SensorSummary sensors;
  TimingStats burst;   // after idle_ms without work (reps_burst replays; zero reps: not taken)
};

inline SteadyTiming time_graph_steady(const std::function<void()>& enqueue, cudaStream_t stream, double warm_seconds,
                                      int reps, int idle_ms = 1000, int reps_burst = 10) {
  enqueue();
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const CapturedGraph graph(stream, enqueue);
  SteadyTiming r;
  if (reps_burst > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    r.burst = time_on_stream([&] { graph.launch(); }, stream, 1, reps_burst);
  }
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  while (std::chrono::duration<double>(clock::now() - t0).count() < warm_seconds) {
    for (int i = 0; i < 16; ++i) graph.launch();
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  int device = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  GpuSensorSampler sampler(device);
  r.steady = time_on_stream([&] { graph.launch(); }, stream, 0, reps);
  r.sensors = sampler.stop();
  return r;
}

}  // namespace fp4moe
