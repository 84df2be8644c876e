// The all-warps kernel's math on one loaded stage, and its item epilogue.
// Swap AB: the weight rows are the MMA's M (16 per m16 tile), tokens its N (8
// per n8 tile), so 1..64 tokens waste at most 7 columns. Each warp owns
// warp_m_tiles 16-row groups; every k16 step it dequantizes its A fragments
// (dequant_fragment.cuh) and multiplies them by the tokens' ldmatrix fragments
// (mma.sync), or, on wgmma tiles, each warp is a quarter of an m64 wgmma whose
// tokens come from the 128-byte-swizzled stage.
#pragma once
#include <cstdint>

#include "kernels/dequant_fragment.cuh"
#include "kernels/gemm_epilogue.cuh"
#include "kernels/mma_sm80.cuh"
#include "kernels/wgmma_sm90.cuh"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

template <int TileIndex>
struct AllWarpsMainloop {
  static constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  static constexpr int MT = T.warp_m_tiles;
  static constexpr int NT8 = T.n8_tiles();
  static constexpr int kWGranPerStage = T.bk / 64;
  static constexpr int kAccSets = T.accumulator_sets();
  using Acc = float[kAccSets][MT][NT8][4];

  __device__ __forceinline__ static void clear(Acc& acc) {
#pragma unroll
    for (int a = 0; a < kAccSets; ++a)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[a][mt][j][q] = 0.f;
  }

  // wgmma: warp w is rows 16 w .. 16 w + 15 of the m64 block.
  __device__ __forceinline__ static void wgmma_stage(const uint8_t* st, Acc& acc, int warp, int lane, uint32_t scale_add2) {
    constexpr plan::GemmSmemLayout L{T};
    const uint8_t* wst = st + L.weight_offset();
    const uint8_t* sst = st + L.scale_offset();
    const uint64_t xdesc = wgmma::smem_desc_k_major_sw128(ptx::smem_addr(st + L.act_offset()));
    uint32_t a[2][4];  // double-buffered A: the fragment of step s is live until its wgmma completes
#pragma unroll
    for (int kk = 0; kk < kWGranPerStage; ++kk) {
      uint4 wq, sq;
      load_granule<T.bk>(wst, sst, warp, kk, lane, wq, sq);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int step8 = (kk % 2) * 4 + t, buf = (kk * 4 + t) % 2;
        dequant_fragment(wq, sq, t, step8, scale_add2, a[buf]);
#pragma unroll
        for (int q = 0; q < 4; ++q) wgmma::fence_operand(a[buf][q]);
        // k16 step kk*4+t of the stage: 64-element atom (kk*4+t)/4 = kk, 32 bytes per k16 inside it.
        const uint64_t desc = wgmma::smem_desc_advance(xdesc, kk * (T.nt * 128) + t * 32);
        wgmma::fence();
        wgmma::mma_rs<T.nt>(reinterpret_cast<float(&)[T.nt / 2]>(acc[0][0][0][0]), a[buf], desc);
        wgmma::commit_group();
        wgmma::wait_group<1>();  // the previous step's wgmma is done: its A buffer may be rewritten
      }
    }
    wgmma::wait_group<0>();  // every read of this stage is done before the next barrier frees it
#pragma unroll
    for (int jn = 0; jn < NT8; ++jn)
#pragma unroll
      for (int q = 0; q < 4; ++q) wgmma::fence_operand(acc[0][0][jn][q]);
  }

  // mma.sync: activation rows padded by 16 bytes, so ldmatrix's 8 row addresses hit 8 bank groups.
  __device__ __forceinline__ static void mma_stage(const uint8_t* st, Acc& acc, int warp, int lane, uint32_t scale_add2) {
    constexpr plan::GemmSmemLayout L{T};
    const uint8_t* wst = st + L.weight_offset();
    const uint8_t* sst = st + L.scale_offset();
    const uint8_t* xst = st + L.act_offset();
#pragma unroll
    for (int kk = 0; kk < kWGranPerStage; ++kk) {
      uint4 wq[MT], sq[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) load_granule<T.bk>(wst, sst, warp * MT + mt, kk, lane, wq[mt], sq[mt]);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int step8 = (kk % 2) * 4 + t;  // k16 step inside the k128 scale granule
        const int set = kAccSets == 2 ? (t & 1) : 0;
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) dequant_fragment(wq[mt], sq[mt], t, step8, scale_add2, a[mt]);
        const int kofs = kk * 64 + t * 16;
#pragma unroll
        for (int jn = 0; jn < NT8; jn += 2) {
          uint32_t b[4];
          if constexpr (NT8 == 1) {
            const int r = lane % 8, kh = (lane / 8) % 2;
            ptx::ldmatrix_x2(b, xst + r * L.act_row_stride() + (kofs + kh * 8) * 2);
          } else {
            const int r = jn * 8 + (lane % 8) + (lane / 16) * 8, kh = (lane / 8) % 2;
            ptx::ldmatrix_x4(b, xst + r * L.act_row_stride() + (kofs + kh * 8) * 2);
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            ptx::mma_bf16_16816(acc[set][mt][jn], a[mt], b);
            if constexpr (NT8 > 1) ptx::mma_bf16_16816(acc[set][mt][jn + 1], a[mt], b + 2);
          }
        }
      }
    }
  }

  // Item epilogue, first half: the accumulators (both sets summed) times the
  // expert's dequantization scale into the fp32 staging tile [nt][bm].
  __device__ __forceinline__ static void stage_item(const KernelParams& p, const WorkItem& w, const Acc& acc, float* epi,
                                                    int warp, int lane) {
    constexpr plan::GemmSmemLayout L{T};
    constexpr int kEpiStride = static_cast<int>(L.epilogue_row_stride() / 4);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int f = (warp * MT + mt) * 16 + lane / 4;
      // rows f and f+8 share a 16-row group, hence a dequant scale part
      const float gs = dequant_scale_of(p, w.expert, int64_t(w.ntile) * T.bm + f);
#pragma unroll
      for (int jn = 0; jn < NT8; ++jn) {
        float v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] = kAccSets == 2 ? acc[0][mt][jn][q] + acc[kAccSets - 1][mt][jn][q] : acc[0][mt][jn][q];
        stage_fragment(epi, kEpiStride, f, jn * 8 + (lane % 4) * 2, v, gs);
      }
    }
  }
};

}  // namespace fp4moe::kernels::detail
