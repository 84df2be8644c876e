// The GPU permutation's sort, one CTA's work, for the permute kernel
// (permute.cu) and the fused routing and permutation (route_permute.cu): a
// counting sort of the T*k (token, slot) pairs by expert, deterministic
// inside an expert (ascending pair index). A shared-memory histogram, a scan,
// then one warp ranks the pairs in order, 32 at a time, with __match_any_sync.
#pragma once
#include <cstdint>

#include "kernels/routing_kernels.hpp"

namespace fp4moe::kernels::detail {

// The held expert of a global id, or -1 (another rank's expert, or a bad id: `bad` set).
__device__ __forceinline__ int held_expert(const PermuteArgs& a, int id, bool& bad) {
  if (id < 0 || id >= a.global_experts) {
    bad |= id != -1;
    return -1;
  }
  const int e = id - a.expert_begin;
  return e >= 0 && e < a.experts ? e : -1;
}

// The whole sort by one CTA of `Threads` threads, all of which call it: ids
// are the pairs' expert ids (the caller's, or a copy in shared memory); count
// and next are E ints of shared memory.
template <int Threads>
__device__ __forceinline__ void permute_pairs(const PermuteArgs& a, const int32_t* ids, int* count, int* next) {
  const int E = a.experts, tid = threadIdx.x;
  const int64_t P = a.tokens * a.top_k;
  for (int e = tid; e < E; e += Threads) count[e] = 0;
  __syncthreads();
  bool bad = false;
  for (int64_t q = tid; q < P; q += Threads) {
    const int e = held_expert(a, ids[q], bad);
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
      const int e = q < P ? held_expert(a, ids[q], ignored) : -1;
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

}  // namespace fp4moe::kernels::detail
