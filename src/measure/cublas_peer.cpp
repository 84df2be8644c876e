#include "runtime/random_fill.hpp"
#include "measure/cublas_peer.hpp"

#include <algorithm>
#include <functional>

#include "fp4moe/error.hpp"
#include "runtime/captured_graph.hpp"
#include "measure/ceilings.hpp"
#include "runtime/cublas_check.hpp"
#include "common/cuda_check.hpp"
#include "measure/steady_timing.hpp"

namespace fp4moe {

CublasGroupedPeer::CublasGroupedPeer(int64_t experts, const std::vector<Shape>& shapes, int64_t max_rows,
                                     cudaStream_t stream)
    : stream_(stream), shapes_(shapes) {
  FP4MOE_CHECK(experts >= 1 && !shapes.empty() && max_rows >= 1,
               "cuBLAS peer: " << experts << " experts, " << shapes.size() << " shapes, " << max_rows << " rows");
  handle_ = cublas_create<CublasHandle>("cublasCreate", cublasCreate);
  FP4MOE_CUBLAS_CHECK(cublasSetStream(handle_.get(), stream));
  workspace_.resize(size_t(32) << 20);  // a fixed workspace keeps cuBLAS graph-capture safe
  FP4MOE_CUBLAS_CHECK(cublasSetWorkspace(handle_.get(), workspace_.get(), workspace_.bytes()));
  int64_t max_n = 0, max_k = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    weights_.emplace_back(size_t(experts * shapes[i].n * shapes[i].k));
    fill_random_bf16(weights_.back().get(), int64_t(weights_.back().size()), 31 + i, 0.02f, stream);
    max_n = std::max(max_n, shapes[i].n);
    max_k = std::max(max_k, shapes[i].k);
  }
  x_.resize(size_t(max_rows * max_k));
  y_.resize(size_t(max_rows * max_n));
  fill_random_bf16(x_.get(), int64_t(x_.size()), 30, 1.f, stream);
}

TimingStats CublasGroupedPeer::time(size_t shape, const std::vector<std::vector<int32_t>>& routings, int reps,
                                    double warm_seconds) {
  FP4MOE_CHECK(shape < shapes_.size(), "cuBLAS peer: shape " << shape << " of " << shapes_.size());
  FP4MOE_CHECK(!routings.empty(), "cuBLAS peer: no routing to time");
  const int64_t n = shapes_[shape].n, k = shapes_[shape].k;
  const __nv_bfloat16* w = weights_[shape].get();
  const float alpha = 1.f, beta = 0.f;
  // one cuBLAS call per active expert, the routings back to back in one graph
  std::vector<std::function<void()>> launches;
  for (const std::vector<int32_t>& counts : routings)
    launches.push_back([&, counts = &counts] {
      int64_t row = 0;
      for (size_t e = 0; e < counts->size(); ++e) {
        const int32_t rows = (*counts)[e];
        if (!rows) continue;
        FP4MOE_CUBLAS_CHECK(cublasGemmEx(handle_.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), rows, int(k), &alpha,
                                         w + int64_t(e) * n * k, CUDA_R_16BF, int(k), x_.get() + row * k, CUDA_R_16BF,
                                         int(k), &beta, y_.get() + row * n, CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
        row += rows;
      }
    });
  if (warm_seconds <= 0) return time_graph_sequence(launches, stream_, 3, reps);
  return time_graph_sequence_steady(launches, stream_, warm_seconds, reps, 0, 0).steady;
}

}  // namespace fp4moe
