// The dense FP8 GEMM of the energy model: C = A^T B, M = N = K = n, e4m3 in,
// bf16 out, fp32 accumulation, cuBLASLt (cublasGemmEx has no FP8 path; FP8
// on Hopper needs A transposed, the "TN" layout). Random e4m3 bytes, A's
// positive and B's negative, below 0x78 in magnitude: finite, no NaN.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "fp4moe/error.hpp"
#include "runtime/cublas_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"

namespace fp4moe {

class DenseFp8Gemm {
 public:
  DenseFp8Gemm(int64_t n, cudaStream_t stream)
      : n_(n), stream_(stream), a_(size_t(n * n)), b_(size_t(n * n)), c_(size_t(n * n)), workspace_(kWorkspace) {
    fill_random_bytes(a_.get(), n * n, 4, 0x00, 0x77, stream);
    fill_random_bytes(b_.get(), n * n, 5, 0x80, 0xF7, stream);
    FP4MOE_CUBLAS_CHECK(cublasLtCreate(&lt_));
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    const auto u = uint64_t(n);
    FP4MOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la_, CUDA_R_8F_E4M3, u, u, int64_t(n)));
    FP4MOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb_, CUDA_R_8F_E4M3, u, u, int64_t(n)));
    FP4MOE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc_, CUDA_R_16BF, u, u, int64_t(n)));
    cublasLtMatmulPreference_t pref;
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspace;
    FP4MOE_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, desc_, la_, lb_, lc_, lc_, pref, 1, &algo_, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    FP4MOE_CUBLAS_CHECK(st);
    FP4MOE_CHECK(found > 0, "cuBLASLt has no FP8 e4m3 GEMM for " << n << "^3 on this device");
  }
  ~DenseFp8Gemm() {
    cublasLtMatrixLayoutDestroy(la_), cublasLtMatrixLayoutDestroy(lb_), cublasLtMatrixLayoutDestroy(lc_);
    cublasLtMatmulDescDestroy(desc_);
    cublasLtDestroy(lt_);
  }
  DenseFp8Gemm(const DenseFp8Gemm&) = delete;
  DenseFp8Gemm& operator=(const DenseFp8Gemm&) = delete;
  void run() const {
    const float alpha = 1.f, beta = 0.f;
    FP4MOE_CUBLAS_CHECK(cublasLtMatmul(lt_, desc_, &alpha, a_.get(), la_, b_.get(), lb_, &beta, c_.get(), lc_, c_.get(),
                                       lc_, &algo_.algo, workspace_.get(), kWorkspace, stream_));
  }
  double flops() const { return 2.0 * double(n_) * double(n_) * double(n_); }
  // Bytes one run moves at least: A and B read (1 byte each), C written (bf16).
  double bytes() const { return 4.0 * double(n_) * double(n_); }

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  int64_t n_;
  cudaStream_t stream_;
  DeviceBuffer<uint8_t> a_, b_;
  DeviceBuffer<__nv_bfloat16> c_;
  DeviceBuffer<uint8_t> workspace_;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
};

}  // namespace fp4moe
