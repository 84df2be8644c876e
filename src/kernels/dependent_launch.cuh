// Programmatic dependent launch (sm_90+): a kernel launched with
// launch_dependent() may start while the kernel before it on the stream is
// still running, so its launch and first instructions overlap that kernel's
// tail. Every fp4moe kernel calls wait_for_prior_grid() before it touches
// global memory (that waits for the prior grid to complete and its writes to
// be visible, as plain stream order would), then allow_dependent_grids().
// Without sm_90, or with FP4MOE_NO_PDL set, launches are plain stream order.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/dependent_launch.hpp"
#include "runtime/cuda_check.hpp"

namespace fp4moe::kernels {

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The next kernel on the stream may be launched once every CTA of this grid has called this (or exited).
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}


// The launch attribute for thread-block clusters of `cluster_x` CTAs along x.
inline cudaLaunchAttribute cluster_dimension(unsigned cluster_x) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim = {cluster_x, 1, 1};
  return a;
}

// `cluster_x` > 1: thread-block clusters of that many CTAs along x (grid.x a multiple of it).
template <typename... Params, typename... Args>
void launch_dependent_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                                  cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (dependent_launch_enabled(reinterpret_cast<const void*>(kernel))) {
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
  launch_dependent_in_clusters(kernel, grid, block, smem, 1, stream, std::forward<Args>(args)...);
}

}  // namespace fp4moe::kernels
