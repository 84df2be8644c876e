// Timing with CUDA events: warm-up, many repetitions, median/min/max.
#pragma once
#include <algorithm>
#include <functional>
#include <vector>

#include "common/median.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe {

struct TimingStats {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
};

// Times `fn` (which enqueues work on `stream`) one repetition per event pair.
inline TimingStats time_on_stream(const std::function<void()>& fn, cudaStream_t stream, int warmup = 5, int reps = 50) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * reps));
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    FP4MOE_CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i)], stream));
    fn();
    FP4MOE_CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i + 1)], stream));
  }
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&t, ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
    ms[size_t(i)] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  TimingStats s;
  s.reps = reps;
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.median_ms = detail::median_of_sorted(ms);
  return s;
}

}  // namespace fp4moe
