// Host side of programmatic dependent launch (dependent_launch.cuh has the device side).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "common/cuda_check.hpp"

namespace fp4moe::kernels {

// Whether `kernel`'s launches on the current device may overlap their
// predecessor: FP4MOE_NO_PDL unset, an sm_90+ device, and the kernel's code
// compiled for compute_90+ (code JIT-compiled from the compute_80 PTX on a
// newer GPU has no griddepcontrol.wait, so it must not start early).
bool dependent_launch_enabled(const void* kernel);

// The same for fp4moe's kernels on the current device (asked of a probe kernel built like them).
bool dependent_launch_available();

// For bench_host_overhead only: while set, every fp4moe launch is prepared and
// checked as always but not handed to the driver, so that the host work of a
// forward can be timed apart from the driver's own cost per launch. Results
// are then meaningless; nothing in the library sets it.
void skip_launches_for_host_timing(bool skip);
bool launches_skipped();

// The launch attribute for thread-block clusters of `cluster_x` CTAs along x.
inline cudaLaunchAttribute cluster_dimension(unsigned cluster_x) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim = {cluster_x, 1, 1};
  return a;
}

// `cluster_x` > 1: thread-block clusters of that many CTAs along x (grid.x a
// multiple of it); `dependent`: dependent_launch_enabled(kernel), asked once by the caller.
template <typename... Params, typename... Args>
void launch_dependent_in_clusters(void (*kernel)(Params...), bool dependent, dim3 grid, dim3 block, size_t smem,
                                  unsigned cluster_x, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (dependent) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) attr[n++] = cluster_dimension(cluster_x);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  if (launches_skipped()) return;
  FP4MOE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_dependent_in_clusters(kernel, dependent_launch_enabled(reinterpret_cast<const void*>(kernel)), grid, block, smem,
                               1, stream, std::forward<Args>(args)...);
}

}  // namespace fp4moe::kernels
