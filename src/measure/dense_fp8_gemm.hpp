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
#include "measure/cublas_handles.hpp"
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
    lt_ = cublas_create<CublasLtHandle>("cublasLtCreate", cublasLtCreate);
    desc_ = cublas_create<CublasLtMatmulDesc>("cublasLtMatmulDescCreate", cublasLtMatmulDescCreate, CUBLAS_COMPUTE_32F,
                                              CUDA_R_32F);
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    const auto u = uint64_t(n);
    auto layout = [&](cudaDataType_t type) {
      return cublas_create<CublasLtLayout>("cublasLtMatrixLayoutCreate", cublasLtMatrixLayoutCreate, type, u, u,
                                           int64_t(n));
    };
    la_ = layout(CUDA_R_8F_E4M3);
    lb_ = layout(CUDA_R_8F_E4M3);
    lc_ = layout(CUDA_R_16BF);
    const auto pref = cublas_create<CublasLtPreference>("cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate);
    const size_t ws = kWorkspace;
    FP4MOE_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    int found = 0;
    FP4MOE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_.get(), desc_.get(), la_.get(), lb_.get(), lc_.get(),
                                                       lc_.get(), pref.get(), 1, &algo_, &found));
    FP4MOE_CHECK(found > 0, "cuBLASLt has no FP8 e4m3 GEMM for " << n << "^3 on this device");
  }
  DenseFp8Gemm(const DenseFp8Gemm&) = delete;
  DenseFp8Gemm& operator=(const DenseFp8Gemm&) = delete;
  void run() const {
    const float alpha = 1.f, beta = 0.f;
    FP4MOE_CUBLAS_CHECK(cublasLtMatmul(lt_.get(), desc_.get(), &alpha, a_.get(), la_.get(), b_.get(), lb_.get(), &beta,
                                       c_.get(), lc_.get(), c_.get(), lc_.get(), &algo_.algo, workspace_.get(),
                                       kWorkspace, stream_));
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
  // Declared handle first: the descriptors and layouts are destroyed before it.
  CublasLtHandle lt_;
  CublasLtMatmulDesc desc_;
  CublasLtLayout la_, lb_, lc_;
  cublasLtMatmulHeuristicResult_t algo_{};
};

}  // namespace fp4moe
