// The warp-specialized kernel's epilogue of one item: each consumer warpgroup
// stages its m64 blocks' accumulators (times the expert's dequantization
// scale) in its own part of the staging tile, GemmTile::epilogue_rows() tokens
// per pass, and writes them (gemm_epilogue.cuh: store, SwiGLU or scatter-add);
// the producer streams the next item's stages meanwhile, and warpgroups never
// wait for each other.
#pragma once
#include "kernels/async_sm90.cuh"
#include "kernels/gemm_epilogue.cuh"
#include "kernels/ws_tile.cuh"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

template <int TileIndex, EpilogueInstance Epi>
struct WsEpilogue : WsTile<TileIndex> {
  using WsTile<TileIndex>::T;
  using WsTile<TileIndex>::L;
  using WsTile<TileIndex>::kMB;
  static constexpr int kEpiStride = static_cast<int>(L.epilogue_row_stride() / 4);
  static constexpr int kEpiTokens = T.epilogue_rows();
  static constexpr int kFirstBarrier = 1;  // named barriers: + consumer warpgroup index

  const KernelParams& p;
  float* epi;
  int cg, wg_warp, lane, gtid;  // consumer warpgroup, its warp, the lane, the thread in the warpgroup

  __device__ __forceinline__ void write(const WorkItem& w, const float (&acc)[kMB][T.nt / 2]) const {
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
        if (part.rows <= 0) break;                      // uniform across the warpgroup
        async::named_barrier(kFirstBarrier + cg, 128);  // the previous pass has read the staging tile
#pragma unroll
        for (int jn = 0; jn < kEpiTokens / 8; ++jn) {
          const int jj = pass * (kEpiTokens / 8) + jn;
          const float v[4] = {acc[b][jj * 4], acc[b][jj * 4 + 1], acc[b][jj * 4 + 2], acc[b][jj * 4 + 3]};
          stage_fragment(group_epi, kEpiStride, f, jn * 8 + (lane % 4) * 2, v, gs);
        }
        async::named_barrier(kFirstBarrier + cg, 128);
        write_staged_tile<64, 128, Epi>(p, part, group_epi, kEpiStride, int64_t(w.ntile) * T.bm + group * 64, gtid);
      }
    }
  }
};

}  // namespace fp4moe::kernels::detail
