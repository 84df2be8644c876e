// The dense GEMM of the ceilings and the energy model: C = A B, M = N = K = n,
// bf16 in and out, fp32 accumulation, cuBLAS, on random data.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "measure/cublas_handles.hpp"
#include "runtime/cublas_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"

namespace fp4moe {

class DenseGemm {
 public:
  DenseGemm(int64_t n, cudaStream_t stream) : n_(n), a_(size_t(n * n)), b_(size_t(n * n)), c_(size_t(n * n)) {
    fill_random_bf16(a_.get(), n * n, 2, 1.f, stream);
    fill_random_bf16(b_.get(), n * n, 3, 1.f, stream);
    handle_ = cublas_create<CublasHandle>("cublasCreate", cublasCreate);
    FP4MOE_CUBLAS_CHECK(cublasSetStream(handle_.get(), stream));
  }
  DenseGemm(const DenseGemm&) = delete;
  DenseGemm& operator=(const DenseGemm&) = delete;
  void run() const {
    const float alpha = 1.f, beta = 0.f;
    const int n = int(n_);
    FP4MOE_CUBLAS_CHECK(cublasGemmEx(handle_.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a_.get(), CUDA_R_16BF, n, b_.get(),
                                     CUDA_R_16BF, n, &beta, c_.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  }
  double flops() const { return 2.0 * double(n_) * double(n_) * double(n_); }
  // Bytes one run moves at least: A and B read, C written.
  double bytes() const { return 3.0 * double(n_) * double(n_) * 2.0; }
  double tflop_per_s(double ms) const { return flops() / (ms * 1e-3) / 1e12; }

 private:
  int64_t n_;
  DeviceBuffer<__nv_bfloat16> a_, b_, c_;
  CublasHandle handle_;
};

struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { FP4MOE_CUDA_CHECK(cudaStreamCreate(&s)); }
  ~OwnedStream() { cudaStreamDestroy(s); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};

}  // namespace fp4moe
