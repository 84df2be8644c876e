// Programmatic dependent launch (sm_90+): a kernel launched with
// launch_dependent() may start while the kernel before it on the stream is
// still running, so its launch and first instructions overlap that kernel's
// tail. Every fp4moe kernel calls wait_for_prior_grid() before it touches
// global memory (that waits for the prior grid to complete and its writes to
// be visible, as plain stream order would), then allow_dependent_grids().
// Without sm_90, or with FP4MOE_NO_PDL set, launches are plain stream order.
#pragma once
#include "kernels/dependent_launch.hpp"

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


}  // namespace fp4moe::kernels
