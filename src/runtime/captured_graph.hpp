// A CUDA graph of what `enqueue` puts on a stream, captured and instantiated
// once, launched as often as wanted, destroyed with the object (also when the
// capture throws: the stream leaves capture mode first).
#pragma once
#include <cuda_runtime.h>

#include <functional>

#include "runtime/cuda_check.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {

class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<void()>& enqueue) : stream_(stream) {
    FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
      throw;
    }
    FP4MOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    const cudaError_t e = cudaGraphInstantiate(&exec_, graph_, 0);
    if (e != cudaSuccess) cudaGraphDestroy(graph_);
    FP4MOE_CUDA_CHECK(e);
  }
  ~CapturedGraph() {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch() const { FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Times what `enqueue` puts on `stream` replayed from a CUDA graph, as a
// serving engine runs it: the host's per-launch work stays off the GPU's clock.
// One eager call first, so one-time setup (function attributes, cached
// occupancy) happens outside the capture.
inline TimingStats time_graph_replay(const std::function<void()>& enqueue, cudaStream_t stream, int warmup, int reps) {
  enqueue();
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const CapturedGraph graph(stream, enqueue);
  return time_on_stream([&] { graph.launch(); }, stream, warmup, reps);
}

}  // namespace fp4moe
