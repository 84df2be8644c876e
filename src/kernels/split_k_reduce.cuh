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

}  // namespace fp4moe::kernels::detail
