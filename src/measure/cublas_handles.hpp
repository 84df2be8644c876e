// The cuBLASLt handles and descriptors the measurements use, owned like the
// runtime's cuBLAS handle (runtime/cublas_check.hpp).
#pragma once
#include <cublasLt.h>

#include "runtime/cublas_check.hpp"

namespace fp4moe {

using CublasLtHandle = CublasOwned<cublasLtHandle_t, cublasLtDestroy>;
using CublasLtMatmulDesc = CublasOwned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using CublasLtLayout = CublasOwned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using CublasLtPreference = CublasOwned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

}  // namespace fp4moe
