// Every CUDA runtime call and every launch is checked; a failure becomes an
// fp4moe::Error naming the call and the runtime's message.
#pragma once
#include <cuda_runtime.h>

#include "fp4moe/error.hpp"

#define FP4MOE_CUDA_CHECK(expr)                                                              \
  do {                                                                                       \
    const cudaError_t fp4moe_err_ = (expr);                                                  \
    FP4MOE_CHECK(fp4moe_err_ == cudaSuccess, #expr << " failed: " << cudaGetErrorName(fp4moe_err_) \
                                                   << " (" << cudaGetErrorString(fp4moe_err_) << ")"); \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately.
#define FP4MOE_CHECK_LAUNCH(what) FP4MOE_CUDA_CHECK((static_cast<void>(what), cudaGetLastError()))
