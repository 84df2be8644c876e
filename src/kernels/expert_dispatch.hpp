// Expert parallelism's all-to-all on the device: which rows a rank sends to
// each peer (dispatch) and how the peers' fp32 partial rows come back together
// (combine). Sizes are fixed by a capacity of rows per peer, so the transfers
// need no count from the device and the forward stays graph capturable.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fp4moe::kernels {

struct ExpertDispatchArgs {
  const __nv_bfloat16* hidden = nullptr;  // [T, H] this rank's tokens
  const int32_t* topk_ids = nullptr;      // [T, k] global expert ids (-1: none)
  const float* topk_weights = nullptr;    // [T, k]
  int64_t tokens = 0, hidden_size = 0;
  int top_k = 0;
  int ranks = 0, self = 0;                // G, and this rank
  int experts_per_rank = 0;               // E / G: rank d holds [d E/G, (d+1) E/G)
  int64_t capacity = 0;                   // rows per peer
  // Block d (capacity rows) of send_* goes to rank d; this rank's own block is
  // written straight into block `self` of recv_* (no copy to itself).
  __nv_bfloat16* send_hidden = nullptr;   // [G, C, H]
  int32_t* send_ids = nullptr;            // [G, C, k]: the pairs bound for d, -1 elsewhere and in empty slots
  float* send_weights = nullptr;          // [G, C, k]
  __nv_bfloat16* recv_hidden = nullptr;   // [G, C, H]
  int32_t* recv_ids = nullptr;
  float* recv_weights = nullptr;
  int32_t* slot_of = nullptr;             // [T, G]: token t's slot in its block for rank d, -1 if none
  int32_t* send_count = nullptr;          // [G] rows bound for each rank (capped at C), or null
  int32_t* status = nullptr;              // kStatusCapacityOverflow when a token found no slot
};
// Slots in token order (a token takes the next slot of every rank one of its
// pairs goes to), exactly parallel::plan_alltoall's on the host.
void launch_expert_dispatch(const ExpertDispatchArgs& a, cudaStream_t stream);

struct ExpertCombineArgs {
  const float* returned = nullptr;          // [G, C, H] fp32 partial rows back from each rank (block self unused)
  const float* own = nullptr;               // [C, H] this rank's partial rows for its own tokens
  const int32_t* slot_of = nullptr;         // [T, G] from the dispatch
  const __nv_bfloat16* shared = nullptr;    // [T, H] the shared expert's output, or null
  int64_t tokens = 0, hidden_size = 0, capacity = 0;
  int ranks = 0, self = 0;
  __nv_bfloat16* out = nullptr;             // [T, H]: bf16(the sum over ranks d = 0..G-1 in that order, + shared)
};
void launch_expert_combine(const ExpertCombineArgs& a, cudaStream_t stream);

}  // namespace fp4moe::kernels
