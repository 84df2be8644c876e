// One MoE layer across several GPUs over NCCL (docs/parallel.md).
//
//   expert parallelism, allgather: rank r holds experts [r E/G, (r+1) E/G);
//     every rank all-gathers the tokens (hidden states, routing) of all ranks,
//     computes its experts' share for all of them, and a reduce-scatter returns
//     each rank the sums for its own tokens; the shared expert runs on each
//     rank's own tokens. Fixed sizes (max_tokens per rank): graph capturable.
//   expert parallelism, alltoall: the same experts per rank; each token
//     travels only to the ranks holding one of its experts (once per rank,
//     with the ids and weights of its pairs there), in buffers of a fixed
//     capacity of rows per peer, and its fp32 partial rows travel back to be
//     summed in rank order. Graph capturable; moves fewer bytes than allgather
//     only with a capacity below max_tokens (docs/parallel.md).
//   tensor parallelism: rank r holds the slice [r I/G, (r+1) I/G) of every
//     expert's (and the shared expert's) intermediate dimension; every rank
//     runs the layer on its slice for the same tokens, and an all-reduce sums
//     the partial outputs.
//
// Routing is computed once per token, on its rank, exactly as the single-GPU
// layer computes it. Partial sums travel in fp32; with one rank each mode
// equals the single-GPU layer bitwise (split finalize). Every NCCL call is
// checked; a failure is an fp4moe::Error naming the call and NCCL's message.
// NVLink multicast (NVLS) is never enabled by fp4moe.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "fp4moe/layer.hpp"
#include "fp4moe/parallel_mode.hpp"

namespace fp4moe {


struct ParallelOptions {
  // expert_alltoall: rows each rank sends to each peer per forward; -1 is
  // max_tokens, which never drops a pair (a token goes at most once to a rank).
  // Below that, a token that finds no slot loses its pairs on that rank and
  // check_status() reports it.
  int64_t alltoall_capacity = -1;
};

class ParallelMoeLayer {
 public:
  // comm: this rank's communicator (the caller's; not destroyed here), on the
  // current device (or opts.device). weights: the whole layer on the host;
  // the rank prepares only its part. opts.max_tokens is per rank.
  ParallelMoeLayer(const MoeConfig& cfg, const MoeWeights& weights, ParallelMode mode, ncclComm_t comm,
                   const LayerOptions& opts = {}, const ParallelOptions& popts = {});
  ~ParallelMoeLayer();
  ParallelMoeLayer(const ParallelMoeLayer&) = delete;
  ParallelMoeLayer& operator=(const ParallelMoeLayer&) = delete;

  // This rank's tokens: hidden bf16 [T, H], router_logits fp32 [T, E], out bf16
  // [T, H], T <= max_tokens. Every rank calls it (a collective), each with its
  // own T. Allocates nothing, never synchronises.
  // rows_per_rank: the rows each rank's block takes in this forward's
  // exchanges, the same on every rank and at least every rank's T (an engine
  // knows it: the step's largest, or padded, token count per rank); -1 is
  // max_tokens. Expert modes move that many rows per rank (all-to-all: at
  // most its capacity); the tensor mode ignores it.
  void forward(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits, int64_t tokens,
               __nv_bfloat16* out, int64_t rows_per_rank = -1);

  // The collectives of a forward of `tokens` tokens alone, on the layer's own
  // buffers (their contents are not meaningful after): what the communication
  // costs beside the compute. A collective like forward.
  void communicate(cudaStream_t stream, int64_t tokens, int64_t rows_per_rank = -1);

  int rank() const;
  int ranks() const;
  ParallelMode mode() const;
  MoeLayer& local();  // the rank's own layer: its experts, or its slice of every expert
  int64_t alltoall_capacity() const;  // rows per peer (expert_alltoall), else 0
  void check_status(cudaStream_t stream) { local().check_status(stream); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A communicator for `rank` of `ranks` from a unique id every rank shares, on `device`.
ncclComm_t make_nccl_comm(const ncclUniqueId& id, int rank, int ranks, int device);
// One communicator per local GPU in one process (ncclCommInitAll): devices[i] is rank i.
std::vector<ncclComm_t> make_local_nccl_comms(const std::vector<int>& devices);
// ncclCommFinalize then ncclCommDestroy (a collective among the ranks of a node).
void destroy_nccl_comm(ncclComm_t comm);

}  // namespace fp4moe
