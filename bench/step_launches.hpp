// A GEMM step per routing, prepared and queued back to back, as the grouped
// GEMM benchmarks time them (one CUDA graph of all of them).
#pragma once
#include <functional>
#include <vector>

#include "runtime/gemm_step.hpp"

namespace fp4moe::bench {

// Each routing's GEMM step as the layer's forward plan holds it
// (runtime/gemm_step.hpp): a gathered GEMM1 on a tile that loads its rows by
// TMA is two kernels, the row copy and the GEMM, both timed.
inline std::vector<GemmStepLaunch> prepare_steps(const ProjectionView& w, const std::vector<GemmOperands>& ops,
                                                 const kernels::GemmLaunch& L, const plan::DeviceLimits& device) {
  std::vector<GemmStepLaunch> steps;
  for (const GemmOperands& io : ops) steps.push_back(prepare_gemm_step(w, io, L, device));
  return steps;
}
inline std::vector<std::function<void()>> enqueue_each(const std::vector<GemmStepLaunch>& steps, cudaStream_t stream) {
  std::vector<std::function<void()>> launches;
  for (const GemmStepLaunch& st : steps) launches.push_back([&st, stream] { enqueue_gemm_step(st, stream); });
  return launches;
}

}  // namespace fp4moe::bench
