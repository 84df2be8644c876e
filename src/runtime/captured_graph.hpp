// A CUDA graph of what `enqueue` puts on a stream, captured and instantiated
// once, launched as often as wanted, destroyed with the object (also when the
// capture throws: the stream leaves capture mode first).
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "fp4moe/error.hpp"

#include "common/cuda_check.hpp"
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

  // What the graph runs: kernel launches and the other nodes (memsets, copies).
  struct NodeCount {
    int kernels = 0, others = 0;
  };
  NodeCount nodes() const {
    size_t n = 0;
    FP4MOE_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
    std::vector<cudaGraphNode_t> v(n);
    if (n) FP4MOE_CUDA_CHECK(cudaGraphGetNodes(graph_, v.data(), &n));
    NodeCount c;
    for (cudaGraphNode_t node : v) {
      cudaGraphNodeType t{};
      FP4MOE_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
      ++(t == cudaGraphNodeTypeKernel ? c.kernels : c.others);
    }
    return c;
  }

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

// Per-launch time of `launches` enqueued back to back and replayed as one CUDA
// graph: a serving engine's steady state, where each launch follows another
// (dependent launch overlaps their boundaries) and the graph launch is paid
// once. The stats are of the whole graph divided by the number of launches.
inline TimingStats time_graph_sequence(const std::vector<std::function<void()>>& launches, cudaStream_t stream, int warmup,
                                       int reps) {
  FP4MOE_CHECK(!launches.empty(), "time_graph_sequence: no launches");
  auto enqueue = [&] {
    for (const auto& f : launches) f();
  };
  TimingStats t = time_graph_replay(enqueue, stream, warmup, reps);
  const double n = double(launches.size());
  t.median_ms /= n, t.min_ms /= n, t.max_ms /= n;
  return t;
}

}  // namespace fp4moe
