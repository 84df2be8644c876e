// The device side of split-K (plan/split_k.hpp): a split of a work item hands
// its accumulators over, and the split that arrives last gets the item's sum.
#pragma once
#include <cstdint>

#include "kernels/async_sm90.cuh"
#include "kernels/grouped_gemm_common.cuh"

namespace fp4moe::kernels::detail {

// `acc` is one consumer thread's N accumulators; `ctid` numbers the `threads`
// consumer threads of the CTA, which all call this (named barrier `barrier_id`).
// Slot (item, split) holds register r of thread c at [r][c] (coalesced). Returns
// true, with acc = the sum of every split's slot in split order, in the CTA
// that arrived last; false (acc unchanged) in the others.
template <int N>
__device__ __forceinline__ bool sum_split_partials(float (&acc)[N], const KernelParams& p, int item, int split,
                                                   int splits, int ctid, int threads, int barrier_id,
                                                   volatile int32_t* last_flag) {
  float* first = p.split_partials + int64_t(item) * splits * N * threads + ctid;
#pragma unroll
  for (int r = 0; r < N; ++r) __stcg(first + (int64_t(split) * N + r) * threads, acc[r]);
  __threadfence();  // this thread's slot is visible device-wide before the count says so
  async::named_barrier(barrier_id, threads);
  if (ctid == 0) {
    const int32_t arrived_before = atomicAdd(p.split_counters + item, 1);
    const bool last = arrived_before == splits - 1;
    if (last) p.split_counters[item] = 0;  // the item's splits are all in: zero for the next launch
    *last_flag = last;
  }
  async::named_barrier(barrier_id, threads);
  if (!*last_flag) return false;
  __threadfence();
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = __ldcg(first + int64_t(r) * threads);
  for (int s = 1; s < splits; ++s)
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] += __ldcg(first + (int64_t(s) * N + r) * threads);
  return true;
}

// A counter read with acquire semantics at GPU scope: what was released
// before the increments it sees is visible after it.
__device__ __forceinline__ int32_t load_acquire_gpu(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The balanced split's hand-over (plan/split_k.hpp). Part 0 of an item (the
// CTA that ran its first stages, at the end of its range) sums; every later
// part ran at the start of its CTA's range, and a CTA has at most one, so its
// slot is the CTA's own. A later part stores its accumulators, and once every
// consumer thread's are stored one thread releases them by the item's counter
// (the canonical order: a barrier, then a fence and the increment by that
// thread), and the CTA goes on to its next segment.
template <int N>
__device__ __forceinline__ void hand_over_balanced_part(const float (&acc)[N], const KernelParams& p, int item, int ctid,
                                                        int threads, int barrier_id) {
  // (32-bit offsets: the slots are at most the resident CTAs')
  float* slot = p.split_partials + (int(blockIdx.x) * N * threads + ctid);
#pragma unroll
  for (int r = 0; r < N; ++r) __stcg(slot + r * threads, acc[r]);
  async::named_barrier(barrier_id, threads);
  if (ctid == 0) {
    __threadfence();
    atomicAdd(p.split_counters + item, 1);
  }
}
// Part 0 waits for the counter to reach parts - 1 (the parts it waits for
// wait on nothing), adds the slots of CTAs +1 .. +parts-1 in that order to
// acc, and zeroes the counter for the next launch.
template <int N>
__device__ __forceinline__ void sum_balanced_parts(float (&acc)[N], const KernelParams& p, int item, int parts, int ctid,
                                                   int threads, int barrier_id) {
  if (ctid == 0) {
    while (load_acquire_gpu(p.split_counters + item) < parts - 1) __nanosleep(64);
    p.split_counters[item] = 0;  // every later part has arrived: nothing else counts on it in this launch
  }
  async::named_barrier(barrier_id, threads);
  for (int j = 1; j < parts; ++j) {
    const float* slot = p.split_partials + ((int(blockIdx.x) + j) * N * threads + ctid);
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] += __ldcg(slot + r * threads);
  }
}

}  // namespace fp4moe::kernels::detail
