// GPU permutation: a counting sort of the T*k (token, slot) pairs by expert,
// deterministic inside an expert (ascending pair index). One CTA: a shared-
// memory histogram, a scan, then one warp ranks the pairs in order, 32 at a
// time, with __match_any_sync (about 13 us for 16K pairs; fine for decode and
// moderate prefill, see docs/kernels.md).
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kMaxExperts = 4096;

// The held expert of a global id, or -1 (another rank's expert, or a bad id: `bad` set).
__device__ __forceinline__ int held_expert(const PermuteArgs& a, int id, bool& bad) {
  if (id < 0 || id >= a.global_experts) {
    bad |= id != -1;
    return -1;
  }
  const int e = id - a.expert_begin;
  return e >= 0 && e < a.experts ? e : -1;
}

__global__ void __launch_bounds__(kThreads) permute_kernel(const PermuteArgs a) {
  __shared__ int count[kMaxExperts];
  __shared__ int next[kMaxExperts];
  wait_for_prior_grid();
  allow_dependent_grids();
  const int E = a.experts, tid = threadIdx.x;
  const int64_t P = a.tokens * a.top_k;
  for (int e = tid; e < E; e += kThreads) count[e] = 0;
  __syncthreads();
  bool bad = false;
  for (int64_t q = tid; q < P; q += kThreads) {
    const int e = held_expert(a, a.topk_ids[q], bad);
    if (e >= 0) atomicAdd(&count[e], 1);
    else a.pair_pos[q] = -1;
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(a.status, kStatusBadExpertId);
  // Exclusive scan of the counts by warp 0, 32 experts at a time.
  if (tid < 32) {
    int carry = 0;
    for (int base = 0; base < E; base += 32) {
      const int e = base + tid;
      const int c = e < E ? count[e] : 0;
      int incl = c;
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (tid >= o) incl += v;
      }
      if (e < E) {
        next[e] = carry + incl - c;
        a.expert_offsets[e] = carry + incl - c;
      }
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    // The shared expert's rows after the routed ones, one per token in order; then the
    // rows no kept pair fills: pair -1, token 0 (a row copy of all rows stays in bounds).
    const int64_t S = a.shared_rows;
    for (int64_t t = tid; t < S; t += 32) a.permuted_pair[carry + t] = -1, a.permuted_token[carry + t] = static_cast<int32_t>(t);
    for (int64_t p = carry + S + tid; p < P + S; p += 32) a.permuted_pair[p] = -1, a.permuted_token[p] = 0;
    if (tid == 0) {
      if (S > 0) a.expert_offsets[E + 1] = static_cast<int32_t>(carry + S);
      a.expert_offsets[E] = carry;
      if (a.dense_offsets)
        a.dense_offsets[0] = 0, a.dense_offsets[1] = static_cast<int32_t>(a.dense_tokens < 0 ? a.tokens : a.dense_tokens);
    }
    __syncwarp();  // next[] written by every lane above is read by every lane below
    // Rank in pair order: equal experts within 32 pairs take consecutive slots.
    for (int64_t base = 0; base < P; base += 32) {
      const int64_t q = base + tid;
      bool ignored = false;
      const int e = q < P ? held_expert(a, a.topk_ids[q], ignored) : -1;
      const bool live = e >= 0;
      const unsigned active = __ballot_sync(0xffffffffu, live);
      if (live) {
        const unsigned peers = __match_any_sync(active, e);
        const int rank = __popc(peers & ((1u << tid) - 1));
        const int pos = next[e] + rank;
        a.permuted_pair[pos] = static_cast<int32_t>(q);
        a.permuted_token[pos] = static_cast<int32_t>(q / a.top_k);
        a.pair_pos[q] = pos;
        __syncwarp(active);
        if (rank == 0) next[e] += __popc(peers);
      }
      __syncwarp();
    }
  }
}

}  // namespace

void launch_permute(const PermuteArgs& args, cudaStream_t stream) {
  PermuteArgs a = args;
  if (a.global_experts == 0) a.global_experts = a.experts;
  FP4MOE_CHECK(a.expert_begin >= 0 && a.expert_begin + a.experts <= a.global_experts,
               "permute: held experts [" << a.expert_begin << ", " << a.expert_begin + a.experts
                                         << ") are outside the model's " << a.global_experts);
  FP4MOE_CHECK(a.experts >= 1 && a.experts <= kMaxExperts, "permute: experts = " << a.experts << " is outside 1.." << kMaxExperts);
  FP4MOE_CHECK(a.top_k >= 1, "permute: top_k = " << a.top_k << " must be positive");
  FP4MOE_CHECK(a.tokens >= 0 && a.tokens * a.top_k < (int64_t(1) << 31), "permute: " << a.tokens << " tokens x " << a.top_k << " pairs overflow int32");
  FP4MOE_CHECK(a.shared_rows >= 0 && a.shared_rows <= a.tokens && a.tokens * a.top_k + a.shared_rows < (int64_t(1) << 31),
               "permute: shared_rows = " << a.shared_rows << " is outside 0..tokens = " << a.tokens
                                         << " (or overflows int32 with the pairs)");
  FP4MOE_CHECK(a.topk_ids && a.expert_offsets && a.permuted_pair && a.permuted_token && a.pair_pos && a.status,
               "permute: a device pointer is null");
  launch_dependent(permute_kernel, 1, kThreads, 0, stream, a);
  FP4MOE_CHECK_LAUNCH("permute_kernel");
}

}  // namespace fp4moe::kernels
