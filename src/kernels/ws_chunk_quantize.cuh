// GEMM2's FP8 row copy, done by GEMM1 (e4m3 tiles; GroupedGemmArgs::y_e4m3).
// A row's scale is the amax of all its N/2 columns, which n / bm CTAs write,
// so no one CTA can quantize its own tile. Each CTA, once its consumers have
// written an item's tile, counts itself in on the item's token chunk; the CTA
// whose arrival completes the chunk reads the chunk's rows back (from L2,
// where the others just wrote them) and quantizes them, a warp per row, with
// the row copy's arithmetic (e4m3_rows.cuh), and zeroes the counter for the
// next launch. Against the separate pass this saves a launch and its tail
// and reads the rows from L2 instead of HBM (docs/fp8.md has the A/B).
#pragma once
#include <cstdint>

#include "kernels/async_sm90.cuh"
#include "kernels/e4m3_rows.cuh"
#include "kernels/gemm_scheduler.cuh"
#include "kernels/grouped_gemm_params.hpp"
#include "kernels/ws_tile.cuh"

namespace fp4moe::kernels::detail {

template <int TileIndex>
struct WsChunkQuantize : WsTile<TileIndex> {
  using WsTile<TileIndex>::kConsumerThreads;

  const KernelParams& p;
  volatile int32_t* last_flag;  // shared memory: the arrival's verdict, for every consumer
  int ctid;                     // the consumer thread, 0 .. kConsumerThreads - 1
  int barrier_id;               // a named barrier of all consumer threads

  // Every consumer thread calls it after item w's tile is written; `chunk` is
  // the item's chunk and `arrivals` the CTAs that write one (its N tiles).
  __device__ __forceinline__ void after_tile(const WorkItem& w, int chunk, int arrivals) const {
    __threadfence();  // this thread's stores are visible device-wide before the count says so
    async::named_barrier(barrier_id, kConsumerThreads);
    if (ctid == 0) {
      const bool last = atomicAdd(p.chunk_counters + chunk, 1) == arrivals - 1;
      if (last) p.chunk_counters[chunk] = 0;  // every tile of the chunk is in: zero for the next launch
      *last_flag = last;
    }
    async::named_barrier(barrier_id, kConsumerThreads);
    if (!*last_flag) return;
    __threadfence();
    const int pieces = static_cast<int>(p.n / 16);  // 8 bf16 per piece, N/2 columns
    const int out_pieces = static_cast<int>(p.y_e4m3_cols / 8);
    const uint4* y = reinterpret_cast<const uint4*>(p.y);
#pragma unroll 1
    for (int r = ctid / 32; r < w.rows; r += kConsumerThreads / 32) {
      const int64_t row = w.row0 + r;
      quantize_row_e4m3_by_warp(y + row * pieces, pieces, out_pieces,
                                reinterpret_cast<uint2*>(p.y_e4m3 + row * p.y_e4m3_cols), p.y_scale + row, ctid % 32);
    }
  }
};

}  // namespace fp4moe::kernels::detail
