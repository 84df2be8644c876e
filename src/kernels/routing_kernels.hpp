// Host interface of the GPU routing, permutation and finalize kernels. All are
// graph-capture safe: device inputs, device outputs, no host synchronisation.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fp4moe/model.hpp"

namespace fp4moe::kernels {

// Bits of the device status word (a bad input never crashes or writes out of bounds).
enum RoutingStatus : int32_t {
  kStatusNonFiniteLogit = 1,   // a NaN/Inf router logit: that token routes to experts 0..k-1 with weight 0
  kStatusBadExpertId = 2,      // a topk id outside [0, global experts): that pair contributes nothing
  kStatusCapacityOverflow = 4, // EP all-to-all: a token found no slot for a peer; its pairs there contribute nothing
  kStatusNonFiniteOutput = 8,  // a token's output row holds NaN/Inf (a NaN/Inf hidden state, or an overflow); only its row
};
// The status words: [0] the bits above, [1] INT32_MAX minus the first token whose
// output was not finite (atomicMax keeps the lowest; 0: none). Zero between checks.
inline constexpr int kStatusWords = 2;

struct RouteArgs {
  const float* logits = nullptr;  // [T, E]
  const float* bias = nullptr;    // [E] e_score_correction_bias, or null
  int64_t tokens = 0;
  int experts = 0, top_k = 0;
  bool sigmoid = false, renormalize = true;
  int n_group = 1, topk_group = 1;
  float routed_scaling_factor = 1.f;
  int32_t* topk_ids = nullptr;     // [T, k]
  float* topk_weights = nullptr;   // [T, k]
  int32_t* status = nullptr;       // OR of RoutingStatus bits
};
// Bitwise the CPU reference's choice and weights (src/reference/router_math.hpp).
void launch_route(const RouteArgs& a, cudaStream_t stream);
inline constexpr int kRouteMaxExperts = 1024;  // 32 per lane
// The arguments launch_route refuses (an fp4moe::Error naming the value).
void check_route_args(const RouteArgs& a);
// Experts per lane of a routing warp, rounded up to the kernels' instances (1, 2, 4, ..., 32).
constexpr int route_experts_per_lane(int experts) {
  int p = 1;
  while (p * 32 < experts) p *= 2;
  return p;
}
// The router of model `cfg` (its scoring, groups, scaling) over `tokens`
// tokens into ids, weights and status; the logits are the caller's to set.
RouteArgs route_args(const MoeConfig& cfg, const float* correction_bias, int64_t tokens, int32_t* topk_ids,
                     float* topk_weights, int32_t* status);

// A layer may hold a range of the model's experts (expert parallelism): ids in
// [expert_begin, expert_begin + experts) are its own and sorted; other valid ids
// (< global_experts) are dropped; ids outside [0, global_experts) are dropped
// and flagged. A dropped pair has pair_pos -1, and the rows past the last kept
// pair (up to T*k) hold pair -1 and token 0, so a copy of every row stays in bounds.
struct PermuteArgs {
  const int32_t* topk_ids = nullptr;  // [T, k], global expert ids
  int64_t tokens = 0;
  int experts = 0, top_k = 0;         // experts: held by the layer
  int expert_begin = 0;               // global id of the layer's first expert
  int global_experts = 0;             // the model's expert count (0: = experts)
  int32_t* expert_offsets = nullptr;  // [E+1] over the held experts
  int32_t* permuted_pair = nullptr;   // [T*k]: pair index t*k+j at each permuted row
  int32_t* permuted_token = nullptr;  // [T*k]: its token t (GEMM1's gather rows)
  int32_t* pair_pos = nullptr;        // [T*k]: the inverse, permuted row of each pair (-1: dropped)
  int32_t* dense_offsets = nullptr;   // [2] = {0, dense_tokens}: one "expert" holding every token (shared expert), or null
  int64_t dense_tokens = -1;          // the shared expert's token count (-1: tokens)
  // The shared expert as held expert `experts` (one past the routed ones): each
  // of the first shared_rows tokens one row after the routed rows, in token
  // order (expert_offsets then has E+2 entries; permuted_pair -1 on those rows,
  // and the arrays of rows hold T*k + shared_rows). 0: none.
  int64_t shared_rows = 0;
  int32_t* status = nullptr;
};
// Counting sort by expert; inside an expert, ascending pair index (deterministic).
// An id of -1 is no expert (padding rows, an engine's dropped pair): dropped, not flagged.
void launch_permute(const PermuteArgs& a, cudaStream_t stream);
inline constexpr int kPermuteMaxExperts = 4096;
// The arguments launch_permute takes (global_experts 0 made E), or an fp4moe::Error naming the bad value.
PermuteArgs checked_permute_args(const PermuteArgs& a);

// Routing and permutation in one launch (one CTA), for few tokens: the
// outputs of launch_route then launch_permute, bitwise, with the permutation
// reading the routing's ids from shared memory. r.topk_ids is p's ids.
inline constexpr int64_t kRoutePermuteMaxTokens = 8;
inline constexpr int kRoutePermuteMaxExperts = 512;
// Whether a forward of `tokens` over E experts (global, and held) takes it.
constexpr bool route_permute_fits(int64_t tokens, int experts, int held_experts) {
  return tokens >= 1 && tokens <= kRoutePermuteMaxTokens && experts <= kRoutePermuteMaxExperts &&
         held_experts <= kRoutePermuteMaxExperts;
}
void launch_route_permute(const RouteArgs& r, const PermuteArgs& p, cudaStream_t stream);

struct GatherRowsArgs {
  const __nv_bfloat16* x = nullptr;  // [*, cols]
  const int32_t* rows = nullptr;     // [count]
  int64_t count = 0, cols = 0;
  __nv_bfloat16* out = nullptr;      // [count, out_cols]: out[p] = x[rows[p]], then zeros
  int64_t out_cols = 0;              // 0: cols; more: each row padded with zeros (a GEMM's K padded to its granule)
};
void launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream);

struct FinalizeArgs {
  const __nv_bfloat16* expert_out = nullptr;  // [T*k, H] GEMM2 output, permuted rows (split mode), or null
  const float* accumulated = nullptr;          // [T, H] fp32 sums from the fused epilogue, or null
  const int32_t* pair_pos = nullptr;
  const float* topk_weights = nullptr;
  const __nv_bfloat16* shared_out = nullptr;   // [T, H] shared expert output, or null
  // Or the shared expert's rows inside expert_out (split mode, PermuteArgs::shared_rows):
  // token t's is row *shared_row0 + t (shared_row0: expert_offsets + E, on the device).
  const int32_t* shared_row0 = nullptr;
  int64_t tokens = 0, hidden = 0;
  int64_t expert_stride = 0;                   // row stride of expert_out and accumulated (0: hidden; more: H padded)
  int top_k = 0;
  __nv_bfloat16* out = nullptr;                // [T, H]
  float* out_f32 = nullptr;                    // instead of out: the fp32 sums, unrounded (parallel layers)
  int32_t* status = nullptr;                   // kStatusWords words: a row not finite is reported, or null
};
// out[t] = sum_j w[t,j] * expert_out[pos(t,j)] in slot order j = 0..k-1 over
// the pairs not dropped (pos >= 0), fp32
// (split mode: bitwise identical run to run); or out[t] = accumulated[t]
// (fused mode); plus the shared expert's output when given.
void launch_finalize(const FinalizeArgs& a, cudaStream_t stream);

}  // namespace fp4moe::kernels
