// Warp-specialized grouped GEMM for Hopper (sm_90a): Y = X . dequant(W_e)^T with
// the same prepared weights, schedule and epilogues as the decode kernel.
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

#include <array>
#include <utility>

#include "kernels/async_sm90.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/grouped_gemm_kernels.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/split_k_reduce.cuh"
#include "kernels/wgmma_sm90.cuh"
#include "plan/gemm_layout.hpp"
#include "plan/split_k.hpp"
#include "plan/tma_geometry.hpp"
#include "runtime/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using namespace detail;
using plan::GemmSmemLayout;

template <int TileIndex>
__global__ void __launch_bounds__(plan::kGemmTiles[TileIndex].threads(), plan::kGemmTiles[TileIndex].ctas_per_sm)
    fp4_grouped_gemm_ws_kernel(const KernelParams p, const __grid_constant__ TensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  static_assert(T.warp_specialized);
  constexpr GemmSmemLayout L{T};
  constexpr int kConsumerWarps = T.consumer_warpgroups() * 4;
  constexpr int kMB = T.warp_m_tiles;  // m64 blocks per consumer warpgroup
  constexpr int kRowGroups = T.bm / 16;
  constexpr int kWGranPerStage = T.bk / 64;   // weight granules (and activation atoms) per stage
  constexpr int kSGranPerStage = T.bk / 128;  // scale granules per stage
  constexpr uint32_t kActStageBytes = uint32_t(T.nt) * T.bk * 2;
  constexpr uint32_t kStageTx = uint32_t(L.weight_bytes_per_stage() + L.scale_bytes_per_stage());
  constexpr int kEpiStride = static_cast<int>(L.epilogue_row_stride() / 4);
  constexpr int kEpiTokens = static_cast<int>(L.epilogue_tokens());
  constexpr int kProducerThreads = plan::GemmTile::kProducerThreads;
  constexpr int kFirstConsumerBarrier = 1;  // named barriers: + consumer warpgroup index
  constexpr int kAllConsumersBarrier = kFirstConsumerBarrier + 4;
  // Clusters (T.cluster_n CTAs): the CTAs take adjacent N tiles of the same
  // items, and each multicasts its share of every stage's activation atoms to
  // all; a slot is free once the consumers of every CTA of the cluster are done
  // with it, so each consumer thread arrives on every CTA's "empty" barrier.
  constexpr int kCluster = T.cluster_n;
  constexpr uint16_t kClusterMask = uint16_t((1u << kCluster) - 1);

  extern __shared__ __align__(1024) uint8_t smem[];
  const int stages = p.stages;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L.barriers_offset(stages));
  uint64_t* empty = full + stages;
  int32_t* prefix = reinterpret_cast<int32_t*>(smem + L.prefix_offset(stages));
  float* epi = reinterpret_cast<float*>(smem + L.epilogue_offset(stages));
  volatile int32_t* split_last = reinterpret_cast<volatile int32_t*>(smem + L.split_flag_offset(stages));
  // expert_offsets[E] (a function: values kept live across setmaxnreg spill, below)
  auto routed_rows = [&] { return reinterpret_cast<int32_t*>(smem + L.routed_rows_offset(stages)); };

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int E = p.num_experts;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      async::mbarrier_init(&full[s], 1);  // the producer's expect_tx arrival
      async::mbarrier_init(&empty[s], kConsumerWarps * 32 * kCluster);  // every consumer thread of the cluster
    }
    async::fence_barrier_init();
  }
  // (a peer's copies and arrivals may reach these barriers only once they are initialized)
  if constexpr (kCluster > 1) async::cluster_sync();
  // The items this CTA walks: its cluster's, each with its own N tile.
  auto first_item = [] { return int(blockIdx.x) / kCluster; };
  auto item_stride = [] { return int(gridDim.x) / kCluster; };
  auto cluster_rank = [] { return int(blockIdx.x) % kCluster; };  // (clusters run along x)
  // The schedule is recomputed from the parameters and shared memory where it is
  // used: values kept live across setmaxnreg spill (ptxas).
  auto n_tiles = [&] { return static_cast<int>(p.n / T.bm); };
  // Split-K: item i is part i % splits of (chunk, N tile) item i / splits; the
  // parts of one item are neighbours, so they run at the same time. Every CTA
  // counts the same: no split where the real items would overflow the workspace.
  auto splits = [&] {
    const int64_t base = int64_t(prefix[E]) * n_tiles();
    return T.splits_k() && p.k_splits > 1 && base <= plan::SplitKWorkspace::kCounters && base * p.k_splits <= p.split_slots
               ? p.k_splits
               : 1;
  };
  auto total_items = [&] { return prefix[E] * (n_tiles() / kCluster) * splits(); };
  // K stages [kt_begin(s), kt_begin(s + 1)) of part s
  auto kt_begin = [&](int split, int parts) { return static_cast<int>(p.k / T.bk) * split / parts; };
  auto item = [&](int i, int parts) {
    WorkItem w = work_item<T.chunk(), true>(i / parts, prefix, p.expert_offsets, E, prefix[E], n_tiles() / kCluster);
    if constexpr (kCluster > 1) w.ntile = w.ntile * kCluster + cluster_rank();
    // rows at or past P (expert_offsets[E] above the caller's P) are neither loaded nor written
    w.rows = static_cast<int>(min(int64_t(w.rows), p.permuted_rows - w.row0));
    return w;
  };
  // The first item's weights need only its expert and N tile, which the prefix
  // in shared memory gives: loading its expert offsets first added a round
  // trip to L2 before the first copy. Every item has rows unless the routed
  // rows pass P; then none is asked for early. (The cluster tile asks the
  // offsets as before: the prefix-only path made ptxas spill 48 bytes in it.)
  constexpr bool kFirstTileFromPrefix = T.first_tile_from_prefix();
  auto first_item_tile = [&](int parts) {
    if constexpr (kFirstTileFromPrefix) {
      const ItemTile t = work_item_tile<true>(first_item() / parts, prefix, E, prefix[E], n_tiles());
      WorkItem w{};
      w.expert = t.expert, w.ntile = t.ntile;  // (copy_weights needs no more)
      return w;
    } else {
      return item(first_item(), parts);
    }
  };
  // Stages of this CTA's first item whose weights and scales the producer asks
  // for before the previous kernel has finished (weights are never written; the
  // schedule may be read early when the offsets were final before that kernel
  // started: GroupedGemmArgs::offsets_ready_at_launch). Ring slots 0.. in order.
  auto early_stages = [&] {
    if (!p.offsets_ready_at_launch || p.probe == GemmProbe::math_only || first_item() >= total_items()) return 0;
    const int parts = splits();
    if (kFirstTileFromPrefix ? *routed_rows() > p.permuted_rows : item(first_item(), parts).rows <= 0) return 0;
    return min(stages, kt_begin(first_item() % parts + 1, parts) - kt_begin(first_item() % parts, parts));
  };
  const int rowgroups_per_expert = static_cast<int>(p.n / 16);
  // The weights and scales of K stage kt of item w into the ring slot at st (one tensor copy each).
  auto copy_weights = [&](uint8_t* st, int kt, const WorkItem& w, uint64_t* bar) {
    const int rowgroup0 = w.expert * rowgroups_per_expert + w.ntile * kRowGroups;  // the tile's first 16-row group
    async::tensor_copy_3d(st + L.weight_offset(), &maps.weights, 0, kt * (T.bk / 32), rowgroup0, bar);
    async::tensor_copy_2d(st + L.scale_offset(), &maps.scales, kt * T.bk, rowgroup0, bar);
  };

  // Up to here the launch may overlap the previous kernel's tail (dependent
  // launch): shared memory, and with early offsets the schedule and the weights.
  if (p.offsets_ready_at_launch) {
    if (warp == 1) build_chunk_prefix<T.chunk(), T.nt>(prefix, p.expert_offsets, E, lane,
                                                   kFirstTileFromPrefix ? routed_rows() : nullptr);
    __syncthreads();
    if (tid == 0) {
      const int pre = early_stages();
      if (pre > 0) {
        const int parts = splits();
        const WorkItem w = first_item_tile(parts);
        const int kt0 = kt_begin(first_item() % parts, parts);
        for (int s = 0; s < pre; ++s) {  // the full count: the activations follow after the wait
          async::mbarrier_arrive_expect_tx(&full[s], kStageTx + kActStageBytes);
          copy_weights(smem + s * L.smem_bytes_per_stage(), kt0 + s, w, &full[s]);
        }
      }
    }
  }
  wait_for_prior_grid();
  allow_dependent_grids();
  if (!p.offsets_ready_at_launch && warp == 1) build_chunk_prefix<T.chunk(), T.nt>(prefix, p.expert_offsets, E, lane);
  __syncthreads();
  if (first_item() >= total_items()) return;  // (the whole cluster)

  if (warp < 4) {
    // ================= producer warpgroup =================
    if constexpr (T.reallocates_registers()) async::setmaxnreg_dec<T.producer_registers()>();
    if (warp != 0) return;  // one thread issues every tensor copy
    const int parts = splits(), items = total_items(), pre = early_stages();
    int slot = 0;
    uint32_t phase = 0;
    for (int it = first_item(); it < items; it += item_stride()) {
      const WorkItem w = item(it, parts);
      if (w.rows <= 0) continue;  // the consumers skip it too
      // (an activation box counts all nt rows; those past the end of x are zero-filled)
      const uint32_t tx = p.probe == GemmProbe::math_only ? 0u : kStageTx + kActStageBytes;
      const int kt_first = kt_begin(it % parts, parts), kt_end = kt_begin(it % parts + 1, parts);
      for (int kt = kt_first; kt < kt_end; ++kt) {
        // the first item's first `pre` stages: weights and scales already asked for, slot free
        const bool early = it == first_item() && kt - kt_first < pre;
        if (!early) async::mbarrier_wait(&empty[slot], phase ^ 1);
        uint8_t* st = smem + slot * L.smem_bytes_per_stage();
        if (lane == 0) {
          // The stage's weights, scales and activations are one tensor copy each (per 64-k atom for the
          // activations, [atom][nt rows][128 bytes] swizzled): the producer's issue cost stays a few
          // instructions per stage however busy the consumers keep the SM's schedulers.
          if (!early) async::mbarrier_arrive_expect_tx(&full[slot], tx);
          if (p.probe != GemmProbe::math_only) {
            if (!early) copy_weights(st, kt, w, &full[slot]);
#pragma unroll
            for (int a = 0; a < kWGranPerStage; ++a) {
              uint8_t* dst = st + L.act_offset() + a * (T.nt * 128);
              if constexpr (kCluster > 1) {
                if (a % kCluster == cluster_rank())
                  async::tensor_copy_2d_multicast(dst, &maps.x, kt * T.bk + a * 64, w.row0, &full[slot], kClusterMask);
              } else {
                async::tensor_copy_2d(dst, &maps.x, kt * T.bk + a * 64, w.row0, &full[slot]);
              }
            }
          }
        }
        if (++slot == stages) slot = 0, phase ^= 1;
      }
    }
  } else {
  // ================= consumer warpgroups =================
  if constexpr (T.reallocates_registers()) async::setmaxnreg_inc<T.consumer_registers()>();
  const int cg = (warp - 4) / 4;  // consumer warpgroup: rows 64 MB cg .. 64 MB (cg + 1) - 1 of the tile
  const int wg_warp = warp % 4;   // its warp w owns rows 16 w .. 16 w + 15 of each of its m64 blocks
  const int gtid = tid - kProducerThreads - cg * 128;
  // Every consumer thread arrives (its own reads are done): a lane-0 branch
  // here would make ptxas serialize the wgmma pipeline (C7513).
  // Clusters: each consumer thread also arrives on the peer CTA's barrier (one
  // thread per warpgroup and CTA would do, but predicating the arrival on the
  // thread made ptxas serialize the wgmma pipeline, C7513).
  static_assert(kCluster <= 2, "release arrives on this CTA's and one peer's barriers");
  auto release = [&](int s) {
    if constexpr (kCluster > 1) {
      async::mbarrier_arrive_cluster(async::cluster_smem_addr(&empty[s], uint32_t(cluster_rank() ^ 1)));
    }
    async::mbarrier_arrive(&empty[s]);
  };
  // This warp's 16-byte weight and scale pieces of granule kk, per m64 block.
  auto load_weight_granules = [&](const uint8_t* st, int kk, uint4 (&wq)[kMB], uint4 (&sq)[kMB]) {
#pragma unroll
    for (int b = 0; b < kMB; ++b) {
      const int rg = (cg * kMB + b) * 4 + wg_warp;  // 16-row group of the tile
      wq[b] = *reinterpret_cast<const uint4*>(st + L.weight_offset() + (rg * kWGranPerStage + kk) * pack::kWeightGranuleBytes +
                                              lane * 16);
      sq[b] = *reinterpret_cast<const uint4*>(st + L.scale_offset() +
                                              (rg * kSGranPerStage + kk / 2) * pack::kScaleGranuleBytes + (lane / 4) * 16);
    }
  };
  // Runs step(kk, t, wq, sq) for k16 step t of every 64-k granule kk of a stage,
  // with this warp's weight and scale pieces of the granule (both consumer kinds).
  auto for_each_k16_step = [&](const uint8_t* st, auto&& step) {
#pragma unroll
    for (int kk = 0; kk < kWGranPerStage; ++kk) {
      uint4 wq[kMB], sq[kMB];
      load_weight_granules(st, kk, wq, sq);
#pragma unroll
      for (int t = 0; t < 4; ++t) step(kk, t, wq, sq);
    }
  };
  // f.template operator()<S>() for S == slot_now: slots run below the tile's most stages,
  // to which the planner holds every launch's stage count (plan_gemm_tile)
  auto with_constant_slot = [&](int slot_now, auto&& f) {
    [&]<int... S>(std::integer_sequence<int, S...>) {
      ((slot_now == S ? (f.template operator()<S>(), 0) : 0), ...);
    }(std::make_integer_sequence<int, T.max_stages>{});
  };
  float acc[kMB][T.nt / 2] = {};
  constexpr int kAccSets = T.accumulator_sets();
  float acc_odd[kAccSets == 2 ? kMB : 1][kAccSets == 2 ? T.nt / 2 : 1] = {};
  constexpr int kFragBuffers = plan::GemmTile::kFragmentBuffers;
  static_assert(kFragBuffers >= 2 && (T.bk / 16) % kFragBuffers == 0,
                "a stage's k16 steps cycle through two or more fragment buffers");
  // ldmatrix rows of this lane: token r = (lane % 8) + 8 * (lane / 16) (+ 8 jn), k half (lane / 8) % 2;
  // in the swizzled layout chunk c of token r sits at c ^ (r % 8), and r % 8 = lane % 8.
  const int ld_row = (lane % 8) + (T.nt >= 16 ? (lane / 16) * 8 : 0), ld_khalf = (lane / 8) % 2;
  constexpr bool kRecomputeItem = T.rereads_item_after_k_loop();
  const int parts_kept = splits(), items_kept = total_items();
  int slot = 0, pending = -1;  // pending: the previous stage's slot, released once its wgmma are done
  uint32_t phase = 0;
  for (int it = first_item(); it < (kRecomputeItem ? total_items() : items_kept); it += item_stride()) {
    const WorkItem w_kept = item(it, kRecomputeItem ? splits() : parts_kept);
    const int rows = w_kept.rows;
    if (rows <= 0) continue;  // past P: the producer loaded nothing for it
    // The item's K loop multiplies NU token columns: the smallest width (above)
    // that covers its rows (ragged counts leave many short chunks;
    // the columns past the rows are never stored). The choice is made once per
    // item, around the whole pipeline: a branch around each wgmma would make
    // ptxas serialize them (C7520).
    auto k_loop = [&]<int NU>() {
      constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];  // a constant inside the lambda too
      const int parts = kRecomputeItem ? splits() : parts_kept;
      const int kt0 = kt_begin(it % parts, parts), kt1 = kt_begin(it % parts + 1, parts);
      for (int kt = kt0; kt < kt1; ++kt) {
        async::mbarrier_wait(&full[slot], phase);
        const uint8_t* st = smem + slot * L.smem_bytes_per_stage();
        if (p.probe == GemmProbe::loads_only) {
          release(slot);
        } else if constexpr (T.wgmma) {
          // The stage's ring slot as a constant (one copy of the stage's math per slot): its
          // shared-memory addresses, the wgmma descriptors above all, are then constant offsets from
          // the dynamic shared-memory base, which ptxas keeps in uniform registers; with the slot
          // in a register each wgmma took an add and two moves to uniform registers.
          with_constant_slot(slot, [&]<int kSlot>() {
            const uint8_t* stage = smem + kSlot * L.smem_bytes_per_stage();  // `st`, a constant offset
            const uint64_t xdesc = wgmma::smem_desc_k_major_sw128(ptx::smem_addr(stage + L.act_offset()));
            uint32_t a[kFragBuffers][kMB][4];  // a fragment stays live until its wgmma has read it
            for_each_k16_step(stage, [&](int kk, int t, const uint4(&wq)[kMB], const uint4(&sq)[kMB]) {
                const int q = kk * 4 + t, buf = q % kFragBuffers;
                const uint64_t desc = wgmma::smem_desc_advance(xdesc, kk * (T.nt * 128) + t * 32);
#pragma unroll
                for (int b = 0; b < kMB; ++b) {
                  dequant_fragment(wq[b], sq[b], t, (kk % 2) * 4 + t, p.scale_add2, a[buf][b]);
#pragma unroll
                  for (int r = 0; r < 4; ++r) wgmma::fence_operand(a[buf][b][r]);
                }
                wgmma::fence();
                // the item's first step overwrites the accumulators (no zeroing instructions in the pipeline)
#pragma unroll
                for (int b = 0; b < kMB; ++b)
                  wgmma::mma_rs<NU>(reinterpret_cast<float(&)[NU / 2]>(acc[b]), a[buf][b], desc, kt > kt0 || q > 0);
                wgmma::commit_group();
                wgmma::wait_group<kFragBuffers - 1>();  // every wgmma but the last kFragBuffers - 1 is done
                if (q == kFragBuffers - 2 && pending >= 0) release(pending), pending = -1;  // the previous stage's are
            });
          });
          pending = slot;
        } else {
          // mma.sync: each warp multiplies its own rows; the slot is free once its reads are in registers.
          const uint8_t* xst = st + L.act_offset();
          for_each_k16_step(st, [&](int kk, int t, const uint4(&wq)[kMB], const uint4(&sq)[kMB]) {
              uint32_t a[kMB][4];
#pragma unroll
              for (int b = 0; b < kMB; ++b) dequant_fragment(wq[b], sq[b], t, (kk % 2) * 4 + t, p.scale_add2, a[b]);
              const uint8_t* xatom = xst + kk * (T.nt * 128) + ((((t * 2 + ld_khalf) ^ (lane % 8))) * 16);
#pragma unroll
              for (int jn = 0; jn < NU / 8; jn += 2) {
                const bool pair = jn + 1 < NU / 8;  // else the last n8 tile of an odd count (NU = 8 or 24)
                uint32_t bf[4];
                if (pair) ptx::ldmatrix_x4(bf, xatom + (jn * 8 + ld_row) * 128);
                else ptx::ldmatrix_x2(bf, xatom + (jn * 8 + ld_row) * 128);  // lanes 0..15: rows lane % 8
#pragma unroll
                for (int b = 0; b < kMB; ++b) {
                  float* c = acc[b];
                  if constexpr (kAccSets == 2)
                    if (t & 1) c = acc_odd[b];
                  ptx::mma_bf16_16816(c + jn * 4, a[b], bf);
                  if (pair) ptx::mma_bf16_16816(c + (jn + 1) * 4, a[b], bf + 2);
                }
              }
          });
          release(slot);
        }
        if (++slot == stages) slot = 0, phase ^= 1;
      }
    };
    if constexpr (T.narrows_k_loop()) {
      if (rows <= T.k_loop_width(0)) k_loop.template operator()<T.k_loop_width(0)>();
      else if (rows <= T.k_loop_width(1)) k_loop.template operator()<T.k_loop_width(1)>();
      else if (T.k_loop_width(2) < T.nt && rows <= T.k_loop_width(2)) k_loop.template operator()<T.k_loop_width(2)>();
      else k_loop.template operator()<T.nt>();
    } else {
      k_loop.template operator()<T.nt>();
    }
    if constexpr (T.wgmma) {
      wgmma::wait_group<0>();
#pragma unroll
      for (int b = 0; b < kMB; ++b)
#pragma unroll
        for (int i = 0; i < T.nt / 2; ++i) wgmma::fence_operand(acc[b][i]);
      if (pending >= 0) release(pending), pending = -1;
    } else if constexpr (kAccSets == 2) {
#pragma unroll
      for (int b = 0; b < kMB; ++b)
#pragma unroll
        for (int i = 0; i < T.nt / 2; ++i) acc[b][i] += acc_odd[b][i], acc_odd[b][i] = 0.f;
    }
    const int parts = kRecomputeItem ? splits() : parts_kept;
    const WorkItem w = kRecomputeItem ? item(it, parts) : w_kept;
    // A split item: the CTA whose part arrives last sums the parts and writes the tile.
    bool write_tile = true;
    if constexpr (T.splits_k())
      write_tile = parts == 1 || sum_split_partials(reinterpret_cast<float(&)[kMB * T.nt / 2]>(acc), p, it / parts,
                                                    it % parts, parts, tid - kProducerThreads, kConsumerWarps * 32,
                                                    kAllConsumersBarrier, split_last);
    if (write_tile && p.probe != GemmProbe::no_output) {
      // ---- epilogue of this warpgroup's m64 blocks, kEpiTokens tokens per pass (the producer streams on meanwhile) ----
      const int f = wg_warp * 16 + lane / 4;
#pragma unroll
      for (int b = 0; b < kMB; ++b) {
        const int group = cg * kMB + b;  // 64-row staging group of the tile
        float* group_epi = epi + group * (L.epilogue_group_bytes() / 4);
        const float gs = dequant_scale_of(p, w.expert, int64_t(w.ntile) * T.bm + group * 64 + f);
#pragma unroll
        for (int pass = 0; pass < T.nt / kEpiTokens; ++pass) {
          WorkItem part = w;  // this pass's tokens
          part.row0 = w.row0 + pass * kEpiTokens;
          part.rows = min(kEpiTokens, w.rows - pass * kEpiTokens);
          if (part.rows <= 0) break;                              // uniform across the warpgroup
          async::named_barrier(kFirstConsumerBarrier + cg, 128);  // the previous pass has read the staging tile
#pragma unroll
          for (int jn = 0; jn < kEpiTokens / 8; ++jn) {
            const int jj = pass * (kEpiTokens / 8) + jn;
            const float v[4] = {acc[b][jj * 4], acc[b][jj * 4 + 1], acc[b][jj * 4 + 2], acc[b][jj * 4 + 3]};
            stage_fragment(group_epi, kEpiStride, f, jn * 8 + (lane % 4) * 2, v, gs);
          }
          async::named_barrier(kFirstConsumerBarrier + cg, 128);
          write_staged_tile<64, 128>(p, part, group_epi, kEpiStride, int64_t(w.ntile) * T.bm + group * 64, gtid);
        }
      }
    }
    if constexpr (!T.wgmma) {  // wgmma overwrites them at the next item's first step
#pragma unroll
      for (int b = 0; b < kMB; ++b)
#pragma unroll
        for (int i = 0; i < T.nt / 2; ++i) acc[b][i] = 0.f;
    }
  }
  }
  // A CTA leaves only when no peer can still copy into its shared memory or arrive on its barriers.
  if constexpr (kCluster > 1) async::cluster_sync();
#else
  (void)p, (void)maps;
  __trap();  // the planner accepts warp-specialized tiles only on sm_90
#endif
}

template <int I>
struct WarpSpecializedKernel {
  static constexpr KernelFn pick() {
    if constexpr (plan::kGemmTiles[I].warp_specialized) return &fp4_grouped_gemm_ws_kernel<I>;
    else return nullptr;
  }
  static constexpr KernelFn fn = pick();
};
constexpr auto kWsKernels = tile_kernel_table<WarpSpecializedKernel>();

}  // namespace

KernelFn ws_kernel(int tile) {
  FP4MOE_CHECK(tile >= 0 && tile < plan::kNumGemmTiles && kWsKernels[static_cast<size_t>(tile)],
               "tile " << tile << " is not a warp-specialized tile");
  return kWsKernels[static_cast<size_t>(tile)];
}

}  // namespace fp4moe::kernels
