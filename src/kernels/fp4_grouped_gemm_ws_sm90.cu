// Warp-specialized FP4 grouped GEMM for Hopper (sm_90a): Y = X . dequant(W_e)^T
// with the same prepared weights, schedule and epilogues as the all-warps
// kernel (fp4_grouped_gemm.cu). Its pieces:
//   ws_pipeline.cuh   the stage ring (full/empty mbarriers) and its cursor
//   ws_schedule.cuh   the items a CTA walks, split-K parts, early stages
//   ws_producer.cuh   the producer's tensor copies
//   ws_mainloop.cuh   the consumers' K loops (wgmma or mma.sync, by token width)
//   ws_epilogue.cuh   an item's staging and write
// and split_k_reduce.cuh the split-K sum.
//
// Why it is shaped this way (docs/kernels.md has the numbers):
// - The all-warps kernel spends its issue slots on cp.async address arithmetic
//   and meets at a CTA barrier every stage; here one producer warpgroup fills
//   the stage ring and the consumer warpgroups only dequantize and multiply.
// - Producer: per stage, one TMA box of weights and one of scales
//   (src/plan/tma_geometry.hpp), and the activations as 64 k x nt token boxes,
//   128-byte swizzled. One elected thread issues them: a few instructions per
//   stage, so the producer keeps the ring full however busy the math warps
//   keep the schedulers. The rows are contiguous: the launcher first copies
//   gathered rows into expert order (gathering them in the kernel, by cp.async
//   or by one-row boxes, cost GEMM1 1.5x to 5x; docs/kernels.md). Completion
//   is an mbarrier transaction count ("full"); consumers hand slots back
//   through an "empty" mbarrier, one arrival per consumer thread (tiles in
//   clusters: also one on the peer CTA's, whose multicast fills this slot too).
// - Consumers: each warpgroup owns 64 x warp_m_tiles weight rows; every k16
//   step it dequantizes its A fragments in registers and then, on wgmma tiles,
//   issues one wgmma m64 x nt x k16 per m64 block with the tokens from shared
//   memory (more rows per warpgroup: fewer activation bytes from L2 per flop).
//   Two A buffers keep one wgmma in flight across steps and across stages: a
//   slot is released right after the next stage's first wait, never by
//   draining the tensor cores at a stage boundary. On mma.sync tiles (decode,
//   few tokens: the tensor cores idle, the issue slots are the limit) each
//   warp multiplies its 16-row groups by ldmatrix fragments of the same
//   swizzled stage and releases the slot when its reads are done.
// - Items run expert-major so one expert's weights and its tokens' rows stay
//   in L2 while all its (N tile, token chunk) items are computed.
#include <cuda_bf16.h>

#include "kernels/async_sm90.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/grouped_gemm_kernels.hpp"
#include "kernels/split_k_reduce.cuh"
#include "kernels/ws_epilogue.cuh"
#include "kernels/ws_mainloop.cuh"
#include "kernels/ws_pipeline.cuh"
#include "kernels/ws_producer.cuh"
#include "kernels/ws_schedule.cuh"
#include "kernels/ws_tile.cuh"
#include "plan/gemm_layout.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using namespace detail;
using plan::GemmSmemLayout;

// An item's sum written (where this CTA holds it) by a consumer thread (of
// warpgroup cg, its warp wg_warp) and its accumulators cleared.
template <int TileIndex, EpilogueInstance Epi>
__device__ __forceinline__ void finish_item(const KernelParams& p, uint8_t* smem, int stages, int cg, int wg_warp, int lane,
                                            int tid, const WorkItem& w, bool write_tile,
                                            float (&acc)[WsTile<TileIndex>::kMB][plan::kGemmTiles[TileIndex].nt / 2]) {
  using Tile = WsTile<TileIndex>;
  constexpr plan::GemmTile T = Tile::T;
  if (write_tile && p.probe != GemmProbe::no_output) {
    constexpr GemmSmemLayout L = Tile::L;  // (a local copy: device code cannot read the static member)
    const WsEpilogue<TileIndex, Epi> epilogue{{}, p, reinterpret_cast<float*>(smem + L.epilogue_offset(stages)), cg,
                                              wg_warp, lane, tid - Tile::kProducerThreads - cg * 128};
    epilogue.write(w, acc);
  }
  if constexpr (!T.wgmma) {  // wgmma overwrites them at the next item's first step
#pragma unroll
    for (int b = 0; b < Tile::kMB; ++b)
#pragma unroll
      for (int i = 0; i < T.nt / 2; ++i) acc[b][i] = 0.f;
  }
}

// A consumer warpgroup's items: the K loop, the split-K sum where the item is
// split (the CTA whose part arrives last sums the parts and writes the tile;
// in the balanced split the CTA of its first stages), the epilogue.
template <int TileIndex, EpilogueInstance Epi, bool RoundedFold>
__device__ __forceinline__ void run_consumer(const KernelParams& p, const WsSchedule<TileIndex>& sched,
                                             const StageRing<plan::kGemmTiles[TileIndex].cluster_n>& ring, uint8_t* smem,
                                             int tid) {
  using Tile = WsTile<TileIndex>;
  constexpr plan::GemmTile T = Tile::T;
  constexpr GemmSmemLayout L = Tile::L;
  constexpr int kMB = Tile::kMB;
  constexpr int kAllConsumersBarrier = WsEpilogue<TileIndex, Epi>::kFirstBarrier + 4;
  using Mainloop = WsMainloop<TileIndex, RoundedFold>;
  const int warp = tid / 32, lane = tid % 32;
  const int cg = (warp - 4) / 4;  // consumer warpgroup: rows 64 MB cg .. 64 MB (cg + 1) - 1 of the tile
  const int wg_warp = warp % 4;   // its warp w owns rows 16 w .. 16 w + 15 of each of its m64 blocks
  float acc[kMB][T.nt / 2] = {};
  typename Mainloop::AccOdd acc_odd = {};
  RingCursor cursor;
  int pending = -1;
  const Mainloop mainloop{{}, p, smem, ring, cursor, pending, acc, acc_odd, cg, wg_warp, lane,
                          (lane % 8) + (T.nt >= 16 ? (lane / 16) * 8 : 0), (lane / 8) % 2};
  // Tiles that re-read the item after the K loop (GemmTile::rereads_item_after_k_loop)
  // ask the schedule again for it (and the split count and item count); the
  // others keep the values read before the loop.
  constexpr bool kReread = T.rereads_item_after_k_loop();
  // The balanced split (WsSchedule): this CTA's segments in order; a part
  // other than 0 hands its accumulators over and writes nothing.
  if constexpr (T.balances_k()) {
    if (sched.balanced()) {
      for (int s = sched.segment_begin(); s < sched.segment_end(); ++s) {
        // (the segment asked for again where it is used, not kept live across the K loop)
        const WorkItem loaded = sched.work(s);
        if (loaded.rows <= 0) continue;  // past P: the producer loaded nothing for it
        {
          const Segment g = sched.segment(s);
          mainloop.k_loop_for_rows(loaded.rows, g.kt0, g.kt1);
        }
        mainloop.drain();
        const Segment g = sched.segment(s);
        float(&flat)[kMB * T.nt / 2] = reinterpret_cast<float(&)[kMB * T.nt / 2]>(acc);
        const int ctid = tid - Tile::kProducerThreads;
        if (g.kt0 > 0) {  // a later part: its sum is part 0's
          hand_over_balanced_part(flat, p, s, ctid, Tile::kConsumerThreads, kAllConsumersBarrier);
          finish_item<TileIndex, Epi>(p, smem, ring.stages, cg, wg_warp, lane, tid, loaded, false, acc);
          continue;
        }
        if (g.kt1 < sched.k_stages())  // part 0 of a cut item
          sum_balanced_parts(flat, p, s, sched.owned_parts(s), ctid, Tile::kConsumerThreads, kAllConsumersBarrier);
        finish_item<TileIndex, Epi>(p, smem, ring.stages, cg, wg_warp, lane, tid, kReread ? sched.work(s) : loaded, true, acc);
      }
      return;
    }
  }
  const int splits_before = sched.splits(), items_before = sched.total_items();
  const auto splits = [&] { return kReread ? sched.splits() : splits_before; };
  for (int it = sched.first_item(); it < (kReread ? sched.total_items() : items_before); it += sched.item_stride()) {
    const WorkItem loaded = sched.item(it, splits());
    if (loaded.rows <= 0) continue;  // past P: the producer loaded nothing for it
    {
      const int parts = splits();
      mainloop.k_loop_for_rows(loaded.rows, sched.kt_begin(it % parts, parts), sched.kt_begin(it % parts + 1, parts));
    }
    mainloop.drain();
    const int parts = splits();
    const WorkItem w = kReread ? sched.item(it, parts) : loaded;
    bool write_tile = true;
    if constexpr (T.splits_k())
      write_tile = parts == 1 || sum_split_partials(reinterpret_cast<float(&)[kMB * T.nt / 2]>(acc), p, it / parts,
                                                    it % parts, parts, tid - Tile::kProducerThreads,
                                                    Tile::kConsumerThreads, kAllConsumersBarrier,
                                                    reinterpret_cast<volatile int32_t*>(smem + L.split_flag_offset(ring.stages)));
    // (finish_item's work written out: calling it here, force-inlined, made
    // ptxas spill 8 bytes in the e4m3 bm128_nt128 tile)
    if (write_tile && p.probe != GemmProbe::no_output) {
      const WsEpilogue<TileIndex, Epi> epilogue{{}, p, reinterpret_cast<float*>(smem + L.epilogue_offset(ring.stages)), cg,
                                                wg_warp, lane, tid - Tile::kProducerThreads - cg * 128};
      epilogue.write(w, acc);
    }
    if constexpr (!T.wgmma) {  // wgmma overwrites them at the next item's first step
#pragma unroll
      for (int b = 0; b < kMB; ++b)
#pragma unroll
        for (int i = 0; i < T.nt / 2; ++i) acc[b][i] = 0.f;
    }
  }
}

// RoundedFold: an e4m3 tile's instance for NVFP4 weights (WsMainloop).
template <int TileIndex, EpilogueInstance Epi, bool RoundedFold>
__global__ void __launch_bounds__(plan::kGemmTiles[TileIndex].threads(), plan::kGemmTiles[TileIndex].ctas_per_sm)
    fp4_grouped_gemm_ws_kernel(const KernelParams p, const __grid_constant__ TensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  static_assert(T.warp_specialized);
  constexpr GemmSmemLayout L{T};
  constexpr int kCluster = T.cluster_n;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int stages = p.stages;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L.barriers_offset(stages));
  const StageRing<kCluster> ring{full, full + stages, stages};
  int32_t* prefix = reinterpret_cast<int32_t*>(smem + L.prefix_offset(stages));
  const int E = p.num_experts;
  const WsSchedule<TileIndex> sched{{}, p, smem, prefix, E};
  const WsProducer<TileIndex> producer{{}, sched, ring, maps};
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) ring.init(T.consumer_warpgroups() * 128);
  // (a peer's copies and arrivals may reach these barriers only once they are initialized)
  if constexpr (kCluster > 1) async::cluster_sync();

  // Up to here the launch may overlap the previous kernel's tail (dependent
  // launch): shared memory, and with early offsets the schedule and the weights.
  if (p.offsets_ready_at_launch) {
    if (warp == 1)
      build_chunk_prefix<T.chunk(), T.nt>(prefix, p.expert_offsets, E, lane,
                                          T.first_tile_from_prefix() ? sched.routed_rows() : nullptr);
    __syncthreads();
    if (tid == 0) producer.ask_first_stages_early();
  }
  wait_for_prior_grid();
  allow_dependent_grids();
  if (!p.offsets_ready_at_launch && warp == 1)
    build_chunk_prefix<T.chunk(), T.nt>(prefix, p.expert_offsets, E, lane);
  __syncthreads();
  // (a CTA without items runs through: its loops are empty. Returning here let
  // ptxas keep the schedule's values from this test live across setmaxnreg.)

  if (warp < 4) {
    // the producer warpgroup: one thread issues every tensor copy
    if constexpr (T.reallocates_registers()) async::setmaxnreg_dec<T.producer_registers()>();
    if (warp != 0) return;
    producer.run(lane);
  } else {
    if constexpr (T.reallocates_registers()) async::setmaxnreg_inc<T.consumer_registers()>();
    run_consumer<TileIndex, Epi, RoundedFold>(p, sched, ring, smem, tid);
  }
  // A CTA leaves only when no peer can still copy into its shared memory or arrive on its barriers.
  if constexpr (kCluster > 1) async::cluster_sync();
#else
  (void)p, (void)maps;
  __trap();  // the planner accepts warp-specialized tiles only on sm_90
#endif
}

template <EpilogueInstance Epi, bool RoundedFold>
struct WarpSpecializedKernels {
  template <int I>
  struct Pick {
    static constexpr KernelFn pick() {
      constexpr plan::GemmTile T = plan::kGemmTiles[I];
      if constexpr (T.warp_specialized && (!RoundedFold || T.fp8())) return &fp4_grouped_gemm_ws_kernel<I, Epi, RoundedFold>;
      else return nullptr;
    }
    static constexpr KernelFn fn = pick();
  };
};
template <EpilogueInstance Epi, bool RoundedFold>
constexpr auto kWsKernels = tile_kernel_table<WarpSpecializedKernels<Epi, RoundedFold>::template Pick>();

}  // namespace

KernelFn ws_kernel(int tile, EpilogueInstance e, bool rounded_fold) {
  FP4MOE_CHECK(tile >= 0 && tile < plan::kNumGemmTiles && plan::kGemmTiles[tile].warp_specialized,
               "tile " << tile << " is not a warp-specialized tile");
  FP4MOE_CHECK(!rounded_fold || plan::kGemmTiles[tile].fp8(),
               "tile " << plan::kGemmTiles[tile].name << " multiplies bf16 activations: no rounded-fold instance");
  const size_t t = static_cast<size_t>(tile);
  const KernelFn fn =
      rounded_fold ? (e == EpilogueInstance::biased ? kWsKernels<EpilogueInstance::biased, true>[t] : kWsKernels<EpilogueInstance::plain, true>[t])
                   : (e == EpilogueInstance::biased ? kWsKernels<EpilogueInstance::biased, false>[t] : kWsKernels<EpilogueInstance::plain, false>[t]);
  FP4MOE_CHECK(fn, "tile " << plan::kGemmTiles[tile].name << " has no such kernel instance");
  return fn;
}

}  // namespace fp4moe::kernels
