// The warp-specialized kernel's scheduler: the (token chunk, N tile, K part)
// items a CTA walks, expert-major (all of one expert's items together, so its
// weights and its tokens' rows stay in L2), from the chunk prefix in shared
// memory and the expert offsets. Every value is recomputed from the parameters
// and shared memory where it is used: kept live across setmaxnreg, ptxas
// spills them.
#pragma once
#include <cstdint>

#include "kernels/gemm_scheduler.cuh"
#include "kernels/grouped_gemm_params.hpp"
#include "kernels/ws_tile.cuh"
#include "plan/gemm_layout.hpp"
#include "plan/split_k.hpp"

namespace fp4moe::kernels::detail {

// A stretch of one item's K stages that a CTA runs: stages [kt0, kt1) of
// (chunk, N tile) item `item`.
struct Segment {
  int item, kt0, kt1;
};

template <int TileIndex>
struct WsSchedule : WsTile<TileIndex> {
  using WsTile<TileIndex>::T;
  using WsTile<TileIndex>::kCluster;

  const KernelParams& p;
  uint8_t* smem;
  const int32_t* prefix;  // token chunks per expert, prefix-summed (build_chunk_prefix)
  int E;                  // p.num_experts

  // The items this CTA walks: its cluster's, each CTA of a cluster with its
  // own N tile (clusters run along x).
  __device__ static int first_item() { return int(blockIdx.x) / kCluster; }
  // (%nctaid.x read where it is used, as a volatile read that is not hoisted:
  // kept live across the K loop, the stride spilled the widest cluster tile)
  __device__ static int item_stride() {
    int ctas;
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(ctas));
    return ctas / kCluster;
  }
  __device__ static int cluster_rank() { return int(blockIdx.x) % kCluster; }
  // expert_offsets[E], kept in shared memory by build_chunk_prefix
  __device__ int32_t* routed_rows() const {
    constexpr plan::GemmSmemLayout layout{T};  // (a static member is host data; a local constant is not)
    return reinterpret_cast<int32_t*>(smem + layout.routed_rows_offset(p.stages));
  }
  __device__ int n_tiles() const {
    constexpr plan::GemmTile tile = T;  // a local copy: device code cannot read the static member
    return static_cast<int>(tile.n_tiles(p.n));
  }
  // Split-K: item i is part i % splits of (chunk, N tile) item i / splits; the
  // parts of one item are neighbours, so they run at the same time. Every CTA
  // counts the same: no split where the real items would overflow the workspace.
  __device__ int splits() const {
    const int64_t base = int64_t(prefix[E]) * n_tiles();
    return T.splits_k() && p.k_splits > 1 && base <= plan::SplitKWorkspace::kCounters && base * p.k_splits <= p.split_slots
               ? p.k_splits
               : 1;
  }
  __device__ int total_items() const { return prefix[E] * (n_tiles() / kCluster) * splits(); }
  // K stages [kt_begin(s), kt_begin(s + 1)) of part s
  __device__ int kt_begin(int split, int parts) const {
    constexpr plan::GemmTile tile = T;
    return static_cast<int>(tile.k_steps(p.k)) * split / parts;
  }
  __device__ WorkItem item(int i, int parts) const {
    WorkItem w = work_item<T.chunk(), true>(i / parts, prefix, p.expert_offsets, E, prefix[E], n_tiles() / kCluster);
    if constexpr (kCluster > 1) w.ntile = w.ntile * kCluster + cluster_rank();
    // rows at or past P (expert_offsets[E] above the caller's P) are neither loaded nor written
    w.rows = static_cast<int>(min(int64_t(w.rows), p.permuted_rows - w.row0));
    return w;
  }
  // ---- the balanced split (plan/split_k.hpp; tiles that balance) ----
  // The items' K stages end to end, this CTA's share of them: one segment per
  // item it touches, in order. (The unsplit and split launches walk
  // item_stride()-th items from first_item(), as they did before: the
  // producer's and consumers' loops of those are kept apart, since folding
  // them into these made ptxas spill some of the widest tiles.)
  __device__ bool balanced() const {
    if constexpr (!T.balances_k()) {
      return false;
    } else {
      const int items = prefix[E] * n_tiles();
      return p.balanced_split && items > 0 && items <= plan::SplitKWorkspace::kCounters && item_stride() <= p.split_slots &&
             plan::BalancedSplitOf<int>::fits_32_bits(items, k_stages(), item_stride());
    }
  }
  __device__ int k_stages() const {
    constexpr plan::GemmTile tile = T;
    return static_cast<int>(tile.k_steps(p.k));
  }
  __device__ plan::BalancedSplitOf<int> balanced_split() const { return {prefix[E] * n_tiles(), k_stages(), item_stride()}; }
  __device__ int segment_begin() const { return balanced_split().first_item(first_item()); }
  __device__ int segment_end() const { return balanced_split().end_item(first_item()); }
  // Segment s (of item s): its stages alone, no part numbers (working those
  // out where unused cost registers). One from kt0 > 0 is a later part, one
  // from 0 to k_stages() the whole item, one from 0 to less part 0 of
  // owned_parts(s).
  __device__ Segment segment(int s) const {
    const plan::BalancedSplitOf<int>::Segment g = balanced_split().stages_of(first_item(), s);
    return {s, g.kt0, g.kt1};
  }
  __device__ int owned_parts(int s) const { return balanced_split().parts_from(first_item(), s); }
  // The work item of (chunk, N tile) index i.
  __device__ WorkItem work(int i) const { return item(i, 1); }

  // The first item's weights need only its expert and N tile, which the prefix
  // in shared memory gives: loading its expert offsets first added a round
  // trip to L2 before the first copy (GemmTile::first_tile_from_prefix).
  __device__ WorkItem first_item_tile(int parts) const { return tile_of_item(first_item() / parts); }
  __device__ WorkItem tile_of_item(int item_index) const {
    if constexpr (T.first_tile_from_prefix()) {
      const ItemTile t = work_item_tile<true>(item_index, prefix, E, prefix[E], n_tiles());
      WorkItem w{};
      w.expert = t.expert, w.ntile = t.ntile;  // (copy_stage_weights needs no more)
      return w;
    } else {
      return work(item_index);
    }
  }
  // Stages of this CTA's first item (balanced: segment) whose weights and scales the producer asks
  // for before the previous kernel has finished (weights are never written; the
  // schedule may be read early when the offsets were final before that kernel
  // started: GroupedGemmArgs::offsets_ready_at_launch). Every item has rows
  // unless the routed rows pass P; then none is asked for early.
  __device__ int early_stages() const {
    if constexpr (T.balances_k()) {
      if (balanced()) {
        if (!p.offsets_ready_at_launch || p.probe == GemmProbe::math_only || segment_begin() >= segment_end()) return 0;
        const Segment s = segment(segment_begin());
        if (T.first_tile_from_prefix() ? *routed_rows() > p.permuted_rows : work(s.item).rows <= 0) return 0;
        return min(p.stages, s.kt1 - s.kt0);
      }
    }
    if (!p.offsets_ready_at_launch || p.probe == GemmProbe::math_only || first_item() >= total_items()) return 0;
    const int parts = splits();
    if (T.first_tile_from_prefix() ? *routed_rows() > p.permuted_rows : item(first_item(), parts).rows <= 0) return 0;
    return min(p.stages, kt_begin(first_item() % parts + 1, parts) - kt_begin(first_item() % parts, parts));
  }
};

}  // namespace fp4moe::kernels::detail
