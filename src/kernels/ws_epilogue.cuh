// The warp-specialized kernel's epilogue of one item: each consumer warpgroup
// stages its m64 blocks' accumulators (times the expert's dequantization
// scale; e4m3 tiles: times each row's scale and each token's) in its own part
// of the staging tile, GemmTile::epilogue_rows() tokens per pass, and writes
// them (gemm_epilogue.cuh: biases, then store, SwiGLU or scatter-add);
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
      const int64_t row = int64_t(w.ntile) * T.bm + group * 64 + f;
      // e4m3 tiles: each output row's power of two (and global scale), each token's activation scale
      float rs[2] = {1.f, 1.f};
      if constexpr (T.fp8()) {
        // (a group past N, in a partial last N tile, is never written: its scales are not read)
        if (row < p.n) rs[0] = p.row_scale[w.expert * p.n + row], rs[1] = p.row_scale[w.expert * p.n + row + 8];
      }
      const float gs = T.fp8() ? 1.f : dequant_scale_of(p, w.expert, row);
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
          float v[4] = {acc[b][jj * 4], acc[b][jj * 4 + 1], acc[b][jj * 4 + 2], acc[b][jj * 4 + 3]};
          if constexpr (T.fp8()) {
            const int tok = jj * 8 + (lane % 4) * 2;  // columns tok, tok + 1 of the item (past its rows: never stored)
            const float xs0 = tok < w.rows ? p.x_scale[w.row0 + tok] : 0.f;
            const float xs1 = tok + 1 < w.rows ? p.x_scale[w.row0 + tok + 1] : 0.f;
            v[0] *= xs0 * rs[0], v[1] *= xs1 * rs[0], v[2] *= xs0 * rs[1], v[3] *= xs1 * rs[1];
          }
          stage_fragment(group_epi, kEpiStride, f, jn * 8 + (lane % 4) * 2, v, gs);
        }
        async::named_barrier(kFirstBarrier + cg, 128);
        write_staged_tile<64, 128, Epi, T.swiglu_in_bias_pass, T.takes_tails()>(p, part, group_epi, kEpiStride, int64_t(w.ntile) * T.bm + group * 64, gtid,
                                        [&] { async::named_barrier(kFirstBarrier + cg, 128); });
      }
    }
  }
};

}  // namespace fp4moe::kernels::detail
