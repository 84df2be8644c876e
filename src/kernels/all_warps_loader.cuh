// The all-warps kernel's loader: every thread issues cp.async copies of a
// stage (a [bm x bk] slice of one expert's prepared weights and block scales,
// and the item's activation rows, gathered by index) into the ring slot, one
// stage ahead per barrier. The CTA's (item, K stage, slot) cursor advances
// without divisions; the gathered row indices of the next item are staged in
// shared memory while the current one is loaded.
#pragma once
#include <cstdint>

#include "format/gemm_pack.hpp"
#include "kernels/gemm_scheduler.cuh"
#include "kernels/grouped_gemm_params.hpp"
#include "kernels/mma_sm80.cuh"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

template <int TileIndex>
struct AllWarpsLoader {
  static constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  static constexpr int kThreads = T.threads();
  static constexpr int kRowGroups = T.bm / 16;
  static constexpr int kWGranPerStage = T.bk / 64;   // weight granules per row group per stage
  static constexpr int kSGranPerStage = T.bk / 128;  // scale granules per row group per stage

  const KernelParams& p;
  uint8_t* smem;
  int32_t* item_rows;           // two buffers of nt gathered row indices
  const int32_t* tile_prefix;   // token chunks per expert, prefix-summed
  int E, total_chunks, n_tiles, my_items, KT, stages, tid;
  int64_t w_expert_bytes, s_expert_bytes, w_rowgroup_bytes, s_rowgroup_bytes;
  struct Cursor {
    int j = 0, kt = 0, slot = 0;  // item, K stage, ring slot
  } ld;
  WorkItem load_item;

  // Chunk-minor order: the chunks of one expert and N tile run side by side, so
  // its weights come from DRAM once and from L2 for the other chunks.
  __device__ __forceinline__ WorkItem work_item(int j) const {
    return detail::work_item<T.chunk(), false>(blockIdx.x + j * gridDim.x, tile_prefix, p.expert_offsets, E, total_chunks,
                                               n_tiles);
  }
  // The gathered activation rows of item j (-1 past its rows), for the loader.
  __device__ __forceinline__ void stage_rows(int j) const {
    const WorkItem w = work_item(j);
    int32_t* dst = item_rows + (j & 1) * T.nt;
    for (int r = tid; r < T.nt; r += kThreads) dst[r] = r < w.rows ? (p.gather ? p.gather[w.row0 + r] : w.row0 + r) : -1;
  }

  __device__ __forceinline__ void load_stage() const {
    constexpr plan::GemmSmemLayout L{T};
    // Entering item j >= 1: stage the rows of item j+1 into the buffer item j-1
    // used; item j-1's last loads were issued before the barrier just passed.
    if (ld.kt == 0 && ld.j > 0 && ld.j + 1 < my_items) stage_rows(ld.j + 1);
    uint8_t* st = smem + ld.slot * L.smem_bytes_per_stage();
    const uint8_t* wsrc = p.weights + load_item.expert * w_expert_bytes +
                          int64_t(load_item.ntile) * kRowGroups * w_rowgroup_bytes + int64_t(ld.kt) * kWGranPerStage * 512;
    const uint8_t* ssrc = p.scales + load_item.expert * s_expert_bytes +
                          int64_t(load_item.ntile) * kRowGroups * s_rowgroup_bytes + int64_t(ld.kt) * kSGranPerStage * 128;
    constexpr int kWChunks = kRowGroups * kWGranPerStage * 32;  // 16-byte pieces
#pragma unroll
    for (int i = tid; i < kWChunks; i += kThreads) {
      const int rg = i / (kWGranPerStage * 32), rem = i % (kWGranPerStage * 32);
      ptx::cp_async_16(st + L.weight_offset() + int64_t(i) * 16, wsrc + rg * w_rowgroup_bytes + rem * 16);
    }
    constexpr int kSChunks = kRowGroups * kSGranPerStage * 8;
#pragma unroll
    for (int i = tid; i < kSChunks; i += kThreads) {
      const int rg = i / (kSGranPerStage * 8), rem = i % (kSGranPerStage * 8);
      ptx::cp_async_16(st + L.scale_offset() + int64_t(i) * 16, ssrc + rg * s_rowgroup_bytes + rem * 16);
    }
    const int32_t* rows = item_rows + (ld.j & 1) * T.nt;
    constexpr int kXPiecesPerRow = T.bk * 2 / 16;
#pragma unroll
    for (int i = tid; i < T.nt * kXPiecesPerRow; i += kThreads) {
      const int r = i / kXPiecesPerRow, piece = i % kXPiecesPerRow;
      const int32_t xrow = rows[r];
      // wgmma: [piece/8 atom][nt rows][128 bytes], 16-byte chunk c of row r stored at c ^ (r % 8)
      const int dst = T.wgmma ? (piece / 8) * (T.nt * 128) + r * 128 + (((piece % 8) ^ (r % 8)) * 16)
                              : r * int(L.act_row_stride()) + piece * 16;
      ptx::cp_async_16(st + L.act_offset() + dst,
                       p.x + int64_t(xrow < 0 ? 0 : xrow) * p.k + int64_t(ld.kt) * T.bk + piece * 8, xrow < 0 ? 0 : 16);
    }
  }
  __device__ __forceinline__ void advance() {
    if (++ld.slot == stages) ld.slot = 0;
    if (++ld.kt == KT) {
      ld.kt = 0;
      if (++ld.j < my_items) load_item = work_item(ld.j);
    }
  }
};

}  // namespace fp4moe::kernels::detail
