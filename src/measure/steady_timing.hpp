// Timing as a busy server runs a kernel: its launches (a CUDA graph's replays)
// back to back until the clocks have settled at the power cap, then timed with the SM clock
// and board power sampled beside it. And the after-idle burst, which a busy
// server never gets, as a second figure.
#pragma once
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "fp4moe/error.hpp"
#include "runtime/captured_graph.hpp"
#include "measure/gpu_sensors.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {

struct SteadyTiming {
  TimingStats steady;  // after warm_seconds of back-to-back launches
  SensorSummary sensors;
  TimingStats burst;   // after idle_ms without work (reps_burst launches; zero reps: not taken)
};

// `launch` run back to back for warm_seconds (16 per synchronization), then
// `reps` timed launches with the SM clock and board power sampled beside them.
inline SteadyTiming time_steady(const std::function<void()>& launch, cudaStream_t stream, double warm_seconds, int reps) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  while (std::chrono::duration<double>(clock::now() - t0).count() < warm_seconds) {
    for (int i = 0; i < 16; ++i) launch();
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  int device = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  GpuSensorSampler sampler(device);
  SteadyTiming r;
  r.steady = time_on_stream(launch, stream, 0, reps);
  r.sensors = sampler.stop();
  return r;
}

// `enqueue` captured as a CUDA graph: its burst after idle_ms of idle, then its steady state (time_steady).
inline SteadyTiming time_graph_steady(const std::function<void()>& enqueue, cudaStream_t stream, double warm_seconds,
                                      int reps, int idle_ms = 1000, int reps_burst = 10) {
  enqueue();
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const CapturedGraph graph(stream, enqueue);
  TimingStats burst;
  if (reps_burst > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    burst = time_on_stream([&] { graph.launch(); }, stream, 1, reps_burst);
  }
  SteadyTiming r = time_steady([&] { graph.launch(); }, stream, warm_seconds, reps);
  r.burst = burst;
  return r;
}

// time_graph_sequence at steady state: `launches` back to back as one graph,
// timed as time_graph_steady does; every figure per launch.
inline SteadyTiming time_graph_sequence_steady(const std::vector<std::function<void()>>& launches, cudaStream_t stream,
                                               double warm_seconds, int reps, int idle_ms = 1000, int reps_burst = 10) {
  FP4MOE_CHECK(!launches.empty(), "time_graph_sequence_steady: no launches");
  SteadyTiming t = time_graph_steady(
      [&] {
        for (const auto& f : launches) f();
      },
      stream, warm_seconds, reps, idle_ms, reps_burst);
  const double n = double(launches.size());
  for (TimingStats* s : {&t.steady, &t.burst}) s->median_ms /= n, s->min_ms /= n, s->max_ms /= n;
  return t;
}

}  // namespace fp4moe
