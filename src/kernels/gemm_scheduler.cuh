// The grouped GEMM's device-side work schedule: token chunks per expert,
// prefix-summed in shared memory from the expert offsets (no host read-back),
// and the (expert, N tile, chunk) work item of an index. Both kernels use it.
#pragma once
#include <cstdint>

#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

struct WorkItem {
  int expert, row0, rows, ntile;
};

// Token chunks per expert (plan::token_chunks: `Chunk` rows, the last up to
// `MaxRows`), prefix-summed into shared memory by one warp from the device-side
// expert offsets (no host read-back). Each lane takes kPerLane consecutive
// experts, and a pass loads all its offsets before it uses any: with one load
// per 32 experts inside the scan, E = 256 cost four dependent round trips to
// L2, and the whole CTA waits for the prefix (about a sixth of a one-token
// GEMM1 in Nsight Compute's stall samples).
// Where `routed_rows` is given, it receives expert_offsets[E].
template <int Chunk, int MaxRows>
__device__ __forceinline__ void build_chunk_prefix(int32_t* prefix, const int32_t* offsets, int num_experts, int lane,
                                                   int32_t* routed_rows = nullptr) {
  constexpr int kPerLane = 8;  // a pass covers 256 experts
  if (lane == 0) prefix[0] = 0;
  int carry = 0;
  for (int base = 0; base < num_experts; base += 32 * kPerLane) {
    const int e0 = base + lane * kPerLane;
    int32_t o[kPerLane + 1];
    // (L2 loads: a warp-specialized launch may read the offsets before it waits for the previous kernel)
#pragma unroll
    for (int j = 0; j <= kPerLane; ++j) o[j] = e0 + j <= num_experts ? __ldcg(offsets + e0 + j) : 0;
#pragma unroll
    for (int j = 0; j <= kPerLane; ++j)
      if (routed_rows && e0 + j == num_experts) *routed_rows = o[j];
    int c[kPerLane], sum = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      c[j] = e0 + j < num_experts ? static_cast<int>(plan::token_chunks(o[j + 1] - o[j], Chunk, MaxRows)) : 0;
      sum += c[j];
    }
    int incl = sum;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    int run = carry + incl - sum;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      run += c[j];
      if (e0 + j < num_experts) prefix[e0 + j + 1] = run;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
}

// Work item `index` of chunks x N tiles.
//   chunk-minor: the chunks of one expert and N tile run side by side (decode:
//     one chunk per expert, every expert's same N tile at once);
//   expert-major: all of one expert's (N tile, chunk) items run together, so its
//     weights and its tokens' activations stay in L2 (prefill, many chunks).
// Its expert, N tile and chunk come from the prefix in shared memory alone;
// work_item adds the rows from the expert offsets.
struct ItemTile {
  int expert, ntile, chunk;
};
template <bool ExpertMajor>
__device__ __forceinline__ ItemTile work_item_tile(int index, const int32_t* prefix, int num_experts, int total_chunks,
                                                   int n_tiles) {
  const int key = ExpertMajor ? index / n_tiles : index % total_chunks;
  int lo = 0, hi = num_experts;  // last e with prefix[e] <= key
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (prefix[mid] <= key) lo = mid; else hi = mid;
  }
  ItemTile t;
  t.expert = lo;
  if constexpr (ExpertMajor) {
    const int chunks = prefix[lo + 1] - prefix[lo];
    const int local = index - prefix[lo] * n_tiles;
    t.chunk = local % chunks;
    t.ntile = local / chunks;
  } else {
    t.chunk = key - prefix[lo];
    t.ntile = index / total_chunks;
  }
  return t;
}
template <int Chunk, bool ExpertMajor>
__device__ __forceinline__ WorkItem work_item(int index, const int32_t* prefix, const int32_t* offsets, int num_experts,
                                              int total_chunks, int n_tiles) {
  const ItemTile t = work_item_tile<ExpertMajor>(index, prefix, num_experts, total_chunks, n_tiles);
  WorkItem w;
  w.expert = t.expert;
  w.ntile = t.ntile;
  w.row0 = __ldcg(offsets + t.expert) + t.chunk * Chunk;
  // the expert's last chunk takes the rest (up to the tile's nt rows)
  w.rows = t.chunk + 1 < prefix[t.expert + 1] - prefix[t.expert] ? Chunk : __ldcg(offsets + t.expert + 1) - w.row0;
  return w;
}

}  // namespace fp4moe::kernels::detail
