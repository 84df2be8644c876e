#pragma once
#include <cublas_v2.h>

#include "fp4moe/error.hpp"

#define FP4MOE_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                              \
    const cublasStatus_t fp4moe_st_ = (expr);                                                       \
    FP4MOE_CHECK(fp4moe_st_ == CUBLAS_STATUS_SUCCESS, #expr << " failed: " << cublasGetStatusString(fp4moe_st_)); \
  } while (0)
