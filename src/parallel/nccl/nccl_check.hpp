// Every NCCL call is checked; a failure becomes an fp4moe::Error naming the
// call, NCCL's code string and its last error message.
#pragma once
#include <nccl.h>

#include "fp4moe/error.hpp"

#define FP4MOE_NCCL_CHECK(expr)                                                                           \
  do {                                                                                                    \
    const ncclResult_t fp4moe_nccl_ = (expr);                                                             \
    FP4MOE_CHECK(fp4moe_nccl_ == ncclSuccess, #expr << " failed: " << ncclGetErrorString(fp4moe_nccl_)   \
                                                    << " (" << ncclGetLastError(nullptr) << ")");         \
  } while (0)
