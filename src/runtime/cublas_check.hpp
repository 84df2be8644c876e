#pragma once
#include <cublas_v2.h>

#include <memory>
#include <type_traits>

#include "fp4moe/error.hpp"

#define FP4MOE_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                              \
    const cublasStatus_t fp4moe_st_ = (expr);                                                       \
    FP4MOE_CHECK(fp4moe_st_ == CUBLAS_STATUS_SUCCESS, #expr << " failed: " << cublasGetStatusString(fp4moe_st_)); \
  } while (0)

namespace fp4moe {

// cuBLAS handles owned by unique_ptrs: a constructor that throws halfway (a
// create or set call failing) destroys what it had made before, which a
// destructor of the class would not.
template <auto Destroy>
struct CublasDestroy {
  template <class Handle>
  void operator()(Handle h) const {
    Destroy(h);
  }
};

// Owns a cuBLAS(Lt) handle (a pointer to an opaque struct); destroyed with `Destroy`.
template <class Handle, auto Destroy>
using CublasOwned = std::unique_ptr<std::remove_pointer_t<Handle>, CublasDestroy<Destroy>>;

using CublasHandle = CublasOwned<cublasHandle_t, cublasDestroy>;

// `create(&handle, args...)`, checked (`what` names it in the error), its result owned.
template <class Owned, class Create, class... Args>
Owned cublas_create(const char* what, Create create, Args... args) {
  typename Owned::pointer h = nullptr;
  const cublasStatus_t st = create(&h, args...);
  FP4MOE_CHECK(st == CUBLAS_STATUS_SUCCESS, what << " failed: " << cublasGetStatusString(st));
  return Owned(h);
}

}  // namespace fp4moe
