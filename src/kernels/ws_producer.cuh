// The warp-specialized kernel's producer: one thread of the producer warpgroup
// fills the stage ring. Per stage, one tensor copy of the weights, one of the
// block scales (src/plan/tma_geometry.hpp) and one per 128-byte atom of the
// activation rows (64 k of bf16, 128 of e4m3), 128-byte swizzled as wgmma
// reads them: a few instructions per stage, so the ring stays full however
// busy the consumers keep the SM's schedulers. The rows are in expert order (the layer copies gathered rows
// first). Completion is the "full" barrier's transaction count.
#pragma once
#include <cstdint>

#include "kernels/async_sm90.cuh"
#include "kernels/ws_pipeline.cuh"
#include "kernels/ws_schedule.cuh"
#include "kernels/ws_tile.cuh"

namespace fp4moe::kernels::detail {

template <int TileIndex>
struct WsProducer : WsTile<TileIndex> {
  using WsTile<TileIndex>::T;
  using WsTile<TileIndex>::L;
  using WsTile<TileIndex>::kCluster;
  static constexpr uint16_t kClusterMask = uint16_t((1u << kCluster) - 1);
  static constexpr uint32_t kActRowBytes = uint32_t(T.bk) * T.activation_bytes();  // one row's bytes per stage
  static constexpr uint32_t kActStageBytes = uint32_t(T.nt) * kActRowBytes;
  static constexpr uint32_t kStageTx = uint32_t(L.weight_bytes_per_stage() + L.scale_bytes_per_stage());
  static constexpr int kActAtoms = T.bk / T.activation_atom_k();  // 128-byte atoms of a stage's activation rows

  const WsSchedule<TileIndex>& sched;
  const StageRing<kCluster>& ring;
  const TensorMaps& maps;

  // The weights and scales of K stage kt of item w into the ring slot at st (one tensor copy each).
  __device__ void copy_stage_weights(uint8_t* st, int kt, const WorkItem& w, uint64_t* bar) const {
    const int rowgroup0 = w.ntile * (T.bm / 16);  // the tile's first 16-row group in its expert
    async::tensor_copy_4d(st + L.weight_offset(), &maps.weights, 0, kt * (T.bk / 32), rowgroup0, w.expert, bar);
    async::tensor_copy_3d(st + L.scale_offset(), &maps.scales, kt * T.bk, rowgroup0, w.expert, bar);
  }

  // The activation rows of K stage kt of an item whose rows start at row0,
  // `columns` of them (its K-loop width): one box per atom where that is
  // nt, else a sum of narrower boxes (x_rows), placed in expert order.
  // Cluster tiles: each CTA multicasts its share of the atoms to all.
  __device__ void copy_stage_activations(uint8_t* st, int kt, int row0, int columns, uint64_t* bar) const {
#pragma unroll
    for (int a = 0; a < kActAtoms; ++a) {
      if (kCluster > 1 && a % kCluster != sched.cluster_rank()) continue;
      uint8_t* dst = st + L.act_offset() + a * (T.nt * 128);
      const int k0 = kt * T.bk + a * T.activation_atom_k();
      if (columns == T.nt) {
        copy_activation_box(dst, &maps.x, k0, row0, bar);
      } else {
        int r = 0;  // 8-row multiples keep every box on a whole 1024-byte swizzle atom
#pragma unroll
        for (int j = kRowBoxMaps - 1; j >= 0; --j)
          if ((8 << j) < T.nt && (columns & (8 << j))) {
            copy_activation_box(dst + r * 128, &maps.x_rows[j], k0, row0 + r, bar);
            r += 8 << j;
          }
      }
    }
  }
  __device__ void copy_activation_box(uint8_t* dst, const CUtensorMap* map, int k0, int row0, uint64_t* bar) const {
    if constexpr (kCluster > 1)
      async::tensor_copy_2d_multicast(dst, map, k0, row0, bar, kClusterMask);
    else
      async::tensor_copy_2d(dst, map, k0, row0, bar);
  }

  // Before the previous kernel has finished (thread 0): the weights of this
  // CTA's first item's first stages (WsSchedule::early_stages), ring slots 0.. in order.
  __device__ void ask_first_stages_early() const {
    const int pre = sched.early_stages();
    if (pre <= 0) return;
    if constexpr (T.balances_k()) {
      if (sched.balanced()) {
        const Segment first = sched.segment(sched.segment_begin());
        return ask_stages(sched.tile_of_item(first.item), first.kt0, pre);
      }
    }
    const int parts = sched.splits();
    ask_stages(sched.first_item_tile(parts), sched.kt_begin(sched.first_item() % parts, parts), pre);
  }
  // Stages [kt0, kt0 + pre) of item w's weights and scales into the first ring slots.
  __device__ __forceinline__ void ask_stages(const WorkItem& w, int kt0, int pre) const {
    for (int s = 0; s < pre; ++s) {  // the full count: the activations follow after the wait
      async::mbarrier_arrive_expect_tx(&ring.full[s], kStageTx + kActStageBytes);
      copy_stage_weights(sched.smem + s * L.smem_bytes_per_stage(), kt0 + s, w, &ring.full[s]);
    }
  }

  // Stage kt of item w into the ring slot at c (lane 0 issues the copies);
  // `early`: its weights and scales already asked for, the slot free.
  __device__ __forceinline__ void produce_stage(RingCursor& c, const WorkItem& w, int kt, int columns, bool early,
                                                int lane) const {
    const KernelParams& p = sched.p;
    if (!early) ring.wait_empty(c);
    uint8_t* st = sched.smem + c.slot * L.smem_bytes_per_stage();
    if (lane == 0) {
      const int stage_columns = early ? T.nt : columns;
      if (!early)
        async::mbarrier_arrive_expect_tx(
            &ring.full[c.slot], p.probe == GemmProbe::math_only ? 0u : kStageTx + uint32_t(stage_columns) * kActRowBytes);
      if (p.probe != GemmProbe::math_only) {
        if (!early) copy_stage_weights(st, kt, w, &ring.full[c.slot]);
        copy_stage_activations(st, kt, w.row0, stage_columns, &ring.full[c.slot]);
      }
    }
    c.advance(ring.stages);
  }

  // The balanced split's loop: this CTA's segments in order (WsSchedule).
  __device__ void run_balanced(int lane) const {
    const int first = sched.segment_begin(), end = sched.segment_end(), pre = sched.early_stages();
    RingCursor c;
    for (int s = first; s < end; ++s) {
      const Segment seg = sched.segment(s);
      const WorkItem w = sched.work(seg.item);
      if (w.rows <= 0) continue;  // the consumers skip it too
      constexpr plan::GemmTile tile = T;
      const int columns = tile.k_loop_columns(w.rows);
      for (int kt = seg.kt0; kt < seg.kt1; ++kt) produce_stage(c, w, kt, columns, s == first && kt - seg.kt0 < pre, lane);
    }
  }

  // The producer warp's loop over the CTA's items and their K stages (lane 0 issues the copies).
  __device__ void run(int lane) const {
    if constexpr (T.balances_k()) {
      if (sched.balanced()) return run_balanced(lane);
    }
    const int parts = sched.splits(), items = sched.total_items(), pre = sched.early_stages();
    RingCursor c;
    for (int it = sched.first_item(); it < items; it += sched.item_stride()) {
      const WorkItem w = sched.item(it, parts);
      if (w.rows <= 0) continue;  // the consumers skip it too
      // Activation rows: the item's K-loop width (a box counts all its rows;
      // those past the end of x are zero-filled). The first item's early
      // stages were armed for all nt rows before its rows were known.
      constexpr plan::GemmTile tile = T;  // a local copy: device code cannot take kGemmTiles' address
      const int columns = tile.k_loop_columns(w.rows);
      const int kt_first = sched.kt_begin(it % parts, parts), kt_end = sched.kt_begin(it % parts + 1, parts);
      // the first item's first `pre` stages: weights and scales already asked for, slot free
      for (int kt = kt_first; kt < kt_end; ++kt)
        produce_stage(c, w, kt, columns, it == sched.first_item() && kt - kt_first < pre, lane);
    }
  }
};

}  // namespace fp4moe::kernels::detail
