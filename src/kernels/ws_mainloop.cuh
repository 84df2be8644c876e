// The warp-specialized kernel's mainloops: a consumer warpgroup's K loop over
// one item's stages, by token width NU (the columns multiplied; the tile's
// K-loop widths, GemmTile::k_loop_width). Each consumer warpgroup owns 64 x
// warp_m_tiles weight rows; every MMA step (k16 bf16, k32 e4m3) it builds its
// A fragments in registers (dequant_fragment.cuh) and then
// - wgmma tiles: issues one wgmma m64 x NU x k per m64 block with the tokens
//   from shared memory. Two A buffers keep one wgmma in flight across steps and
//   stages: a slot is released right after the next stage's first wait, never
//   by draining the tensor cores at a stage boundary;
// - mma.sync tiles (few tokens: the tensor cores idle, the issue slots are the
//   limit): each warp multiplies its 16-row groups by ldmatrix fragments of the
//   same swizzled stage and releases the slot when its reads are done.
#pragma once
#include <cstdint>
#include <utility>

#include "kernels/dequant_fragment.cuh"
#include "kernels/mma_sm80.cuh"
#include "kernels/wgmma_sm90.cuh"
#include "kernels/ws_pipeline.cuh"
#include "kernels/ws_tile.cuh"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

// RoundedFold: e4m3 tiles of NVFP4 weights (fp8::rounded_fold_table).
template <int TileIndex, bool RoundedFold>
struct WsMainloop : WsTile<TileIndex> {
  using WsTile<TileIndex>::T;
  using WsTile<TileIndex>::L;
  using WsTile<TileIndex>::kMB;
  static constexpr int kWGranPerStage = T.bk / 64;
  static constexpr int kAccSets = T.accumulator_sets();
  static constexpr int kFragBuffers = plan::GemmTile::kFragmentBuffers;
  static constexpr int kStepsPerGranule = 64 / T.mma_k();  // MMA steps per 64-k weight granule
  static_assert(kFragBuffers >= 2 && (T.bk / T.mma_k()) % kFragBuffers == 0,
                "a stage's MMA steps cycle through two or more fragment buffers");
  static_assert(!T.fp8() || T.wgmma, "e4m3 activations are multiplied by wgmma only");
  using Acc = float[kMB][T.nt / 2];
  using AccOdd = float[kAccSets == 2 ? kMB : 1][kAccSets == 2 ? T.nt / 2 : 1];

  const KernelParams& p;
  uint8_t* smem;
  const StageRing<T.cluster_n>& ring;
  RingCursor& cursor;
  int& pending;  // wgmma: the previous stage's slot, released once its wgmma are done (-1: none)
  Acc& acc;
  AccOdd& acc_odd;
  int cg, wg_warp, lane;
  // ldmatrix rows of this lane: token r = (lane % 8) + 8 * (lane / 16) (+ 8 jn), k half (lane / 8) % 2;
  // in the swizzled layout chunk c of token r sits at c ^ (r % 8), and r % 8 = lane % 8.
  int ld_row, ld_khalf;

  __device__ __forceinline__ void release(int slot) const { ring.release(slot); }

  // This warp's 16-byte weight and scale pieces of granule kk, per m64 block.
  __device__ __forceinline__ void load_weight_granules(const uint8_t* st, int kk, uint4 (&wq)[kMB], uint4 (&sq)[kMB]) const {
#pragma unroll
    for (int b = 0; b < kMB; ++b)  // 16-row group (cg kMB + b) 4 + wg_warp of the tile
      load_granule<T.bk>(st + L.weight_offset(), st + L.scale_offset(), (cg * kMB + b) * 4 + wg_warp, kk, lane, wq[b], sq[b]);
  }
  // step(kk, t, wq, sq) for MMA step t of every 64-k granule kk of a stage,
  // with this warp's weight and scale pieces of the granule.
  template <class Step>
  __device__ __forceinline__ void for_each_mma_step(const uint8_t* st, Step&& step) const {
#pragma unroll
    for (int kk = 0; kk < kWGranPerStage; ++kk) {
      uint4 wq[kMB], sq[kMB];
      load_weight_granules(st, kk, wq, sq);
#pragma unroll
      for (int t = 0; t < kStepsPerGranule; ++t) step(kk, t, wq, sq);
    }
  }
  // A lane's A fragment of MMA step t of granule kk: dequantized to bf16, or as e4m3.
  __device__ __forceinline__ void a_fragment(const uint4& wq, const uint4& sq, int kk, int t, uint32_t (&a)[4]) const {
    if constexpr (T.fp8()) fp8_fragment<RoundedFold>(wq, sq, t, (kk % 2) * 4 + 2 * t, a);
    else dequant_fragment(wq, sq, t, (kk % 2) * 4 + t, p.scale_add2, a);
  }
  // The byte offset in a stage's activations of MMA step t of granule kk: its
  // K offset in bytes, in 128-byte swizzle atoms of nt rows.
  static constexpr uint32_t activation_step_offset(int kk, int t) {
    const uint32_t bytes = uint32_t(kk * 64 + t * T.mma_k()) * T.activation_bytes();
    return bytes / 128 * (T.nt * 128) + bytes % 128;
  }

  // The accumulators a wgmma of m64 block b adds to: the fp32 set, or the
  // partial sums' set where the tile promotes them.
  __device__ __forceinline__ float* mma_target(int b) const {
    if constexpr (T.promotes_partial_sums()) return acc_odd[b];
    else return acc[b];
  }

  // One stage of wgmma at ring slot Slot, a constant: its shared-memory
  // addresses, the wgmma descriptors above all, are then constant offsets from
  // the dynamic shared-memory base, which ptxas keeps in uniform registers (with
  // the slot in a register each wgmma took an add and two moves to them).
  template <int NU, int Slot>
  __device__ __forceinline__ void wgmma_stage(bool accumulate_first) const {
    const uint8_t* stage = smem + Slot * L.smem_bytes_per_stage();
    const uint64_t xdesc = wgmma::smem_desc_k_major_sw128(ptx::smem_addr(stage + L.act_offset()));
    uint32_t a[kFragBuffers][kMB][4];  // a fragment stays live until its wgmma has read it
    for_each_mma_step(stage, [&](int kk, int t, const uint4(&wq)[kMB], const uint4(&sq)[kMB]) {
      const int q = kk * kStepsPerGranule + t, buf = q % kFragBuffers;
      const uint64_t desc = wgmma::smem_desc_advance(xdesc, activation_step_offset(kk, t));
#pragma unroll
      for (int b = 0; b < kMB; ++b) {
        a_fragment(wq[b], sq[b], kk, t, a[buf][b]);
#pragma unroll
        for (int r = 0; r < 4; ++r) wgmma::fence_operand(a[buf][b][r]);
      }
      wgmma::fence();
      // the item's first step overwrites the accumulators (no zeroing instructions in the pipeline);
      // where partial sums are promoted, the first step after a promotion overwrites their set
#pragma unroll
      for (int b = 0; b < kMB; ++b) {
        wgmma::mma_rs<NU, T.fp8()>(reinterpret_cast<float(&)[NU / 2]>(*mma_target(b)), a[buf][b], desc,
                                   accumulate_first || q > 0);
      }
      wgmma::commit_group();
      wgmma::wait_group<kFragBuffers - 1>();  // every wgmma but the last kFragBuffers - 1 is done
      if (q == kFragBuffers - 2 && pending >= 0) release(pending), pending = -1;  // the previous stage's are
    });
  }
  // wgmma_stage<NU, S> for S == slot (slots run below the tile's most stages,
  // to which the planner holds every launch's stage count).
  template <int NU, int... S>
  __device__ __forceinline__ void wgmma_stage_at(int slot, bool accumulate_first, std::integer_sequence<int, S...>) const {
    ((slot == S ? (wgmma_stage<NU, S>(accumulate_first), 0) : 0), ...);
  }

  // One stage of mma.sync: each warp multiplies its own rows.
  template <int NU>
  __device__ __forceinline__ void mma_sync_stage(const uint8_t* st) const {
    const uint8_t* xst = st + L.act_offset();
    for_each_mma_step(st, [&](int kk, int t, const uint4(&wq)[kMB], const uint4(&sq)[kMB]) {
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
  }

  // Tiles that promote partial sums: those of the stages since the last promotion added
  // to the fp32 accumulators (the first promotion of an item sets them), once
  // their wgmma are done; the stage's slot goes back with them.
  template <int NU>
  __device__ __forceinline__ void promote(bool first) const {
    wgmma::wait_group<0>();
#pragma unroll
    for (int b = 0; b < kMB; ++b)
#pragma unroll
      for (int i = 0; i < NU / 2; ++i) {
        wgmma::fence_operand(acc_odd[b][i]);
        acc[b][i] = first ? acc_odd[b][i] : acc[b][i] + acc_odd[b][i];
      }
    if (pending >= 0) release(pending), pending = -1;
  }

  // The K loop over stages [kt0, kt1) of one item, NU token columns.
  template <int NU>
  __device__ __forceinline__ void k_loop(int kt0, int kt1) const {
    int since_promotion = 0;  // e4m3: stages in the partial sums
    for (int kt = kt0; kt < kt1; ++kt) {
      ring.wait_full(cursor);
      const uint8_t* st = smem + cursor.slot * L.smem_bytes_per_stage();
      if (p.probe == GemmProbe::loads_only) {
        release(cursor.slot);
      } else if constexpr (T.promotes_partial_sums()) {
        wgmma_stage_at<NU>(cursor.slot, since_promotion > 0, std::make_integer_sequence<int, T.max_stages>{});
        pending = cursor.slot;
        // every fp8_promotion_stages stages (0: once, at the item's end)
        if (++since_promotion == p.fp8_promotion_stages || kt + 1 == kt1) {
          promote<NU>(kt + 1 - kt0 == since_promotion);
          since_promotion = 0;
        }
      } else if constexpr (T.wgmma) {
        wgmma_stage_at<NU>(cursor.slot, kt > kt0, std::make_integer_sequence<int, T.max_stages>{});
        pending = cursor.slot;
      } else {
        mma_sync_stage<NU>(st);
        // This warp read the slot through the generic proxy (ld.shared, ldmatrix), the
        // producer refills it through the async one, which the arrival alone does not
        // order: the refill could land before those reads are done (docs/kernels.md).
        async::fence_proxy_async_shared();
        release(cursor.slot);
      }
      cursor.advance(ring.stages);
    }
  }

  // The item's K loop multiplies the smallest of the tile's widths that covers
  // its rows (GemmTile::k_loop_columns; ragged routing leaves many short chunks,
  // and columns past the rows are never stored). Chosen once per item, around
  // the whole pipeline: a branch around each wgmma would make ptxas serialize
  // them (C7520).
  __device__ __forceinline__ void k_loop_for_rows(int rows, int kt0, int kt1) const {
    constexpr plan::GemmTile tile = T;  // a local copy: device code cannot take kGemmTiles' address
    k_loop_of_width(tile.k_loop_columns(rows), kt0, kt1, std::make_integer_sequence<int, plan::GemmTile::kKLoopWidths>{});
  }
  template <int... I>
  __device__ __forceinline__ void k_loop_of_width(int columns, int kt0, int kt1, std::integer_sequence<int, I...>) const {
    // the first width equal to `columns` (a tile's list may repeat nt)
    (void)((columns == T.k_loop_width(I) ? (k_loop<T.k_loop_width(I)>(kt0, kt1), true) : false) || ...);
  }

  // After an item's K loop: its wgmma done and the last slot released, or the
  // alternate accumulator set folded in.
  __device__ __forceinline__ void drain() const {
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
  }
};

}  // namespace fp4moe::kernels::detail
