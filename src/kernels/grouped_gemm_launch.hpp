// A grouped GEMM launch made once and enqueued many times: the planner's
// verdict, the kernel attribute, the grid, split-K, the kernel parameters and
// the tensor maps are settled by prepare_grouped_gemm, so that enqueueing it
// is one driver call (a forward plan holds one per GEMM step).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/grouped_gemm_params.hpp"
#include "plan/arch.hpp"
#include "plan/split_k.hpp"

namespace fp4moe::kernels {

struct PreparedGemm {
  detail::KernelFn kernel = nullptr;
  int tile = -1, stages = 0;
  int grid = 0, threads = 0, cluster = 1;
  int64_t smem_bytes = 0;
  bool dependent_launch = false;  // may overlap its predecessor (dependent_launch_enabled)
  plan::SplitKPlan k_split;       // what the launch does with K, and why
  detail::KernelParams params{};
  detail::TensorMaps maps{};
};

// Checks the launch against the planner's verdict for `device` (an
// fp4moe::Error with the plan's explanation if it does not fit) and every
// argument, raises the kernel's shared-memory attribute, sizes the grid and
// encodes the tensor maps. Nothing is queued.
PreparedGemm prepare_grouped_gemm(const GroupedGemmArgs& args, const GemmLaunch& launch, const plan::DeviceLimits& device);

// Queues the prepared launch on `stream` (checked: the launch's error is an fp4moe::Error).
void enqueue_grouped_gemm(const PreparedGemm& g, cudaStream_t stream);

// The same launch on other activations of the same shape (a forward's hidden
// states): the parameters and the tensor maps' addresses.
void rebind_activations(PreparedGemm& g, const __nv_bfloat16* x);

}  // namespace fp4moe::kernels
