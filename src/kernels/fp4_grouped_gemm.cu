// Decode grouped GEMM: Y = X . dequant(W_e)^T for the few tokens of each expert.
//
// Why it is shaped this way (see docs/kernels.md for the numbers):
// - Memory-bound: the weights are the big operand, so each CTA streams a
//   [bm x K] slice of one expert's FP4 weights through a cp.async ring of
//   `stages` shared-memory stages exactly once, for all of that expert's tokens
//   (up to nt of them), and the tokens' activation rows are gathered by index
//   into the same stages.
// - Swap AB: the weight rows are the mma's M (16 per m16 tile), tokens its N
//   (8 per n8 tile), so 1..64 tokens waste at most 7 columns.
// - FP4 -> bf16 with shifts and masks (gemm_pack.hpp), times the block scale
//   in bf16x2 (exact), fp32 accumulation; the per-expert global scale is
//   applied once in the epilogue.
// - Persistent grid over (token chunk, N tile) work items, scheduled from the
//   device-side expert offsets: no host read-back, graph-capture safe.
#include <cuda_bf16.h>

#include <array>
#include <utility>

#include "format/gemm_pack.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/grouped_gemm_kernels.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/wgmma_sm90.cuh"
#include "plan/gemm_layout.hpp"
#include "runtime/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using plan::GemmSmemLayout;

using namespace detail;

template <int TileIndex>
__global__ void __launch_bounds__(plan::kGemmTiles[TileIndex].threads(), plan::kGemmTiles[TileIndex].ctas_per_sm)
    fp4_grouped_gemm_kernel(const KernelParams p, const __grid_constant__ TensorMaps /*unused: cp.async loads*/) {
  constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  constexpr GemmSmemLayout L{T};
  constexpr int kThreads = T.threads();
  constexpr int MT = T.warp_m_tiles;
  constexpr int NT8 = T.n8_tiles();
  constexpr int kRowGroups = T.bm / 16;
  constexpr int kWGranPerStage = T.bk / 64;    // weight granules per row group per stage
  constexpr int kSGranPerStage = T.bk / 128;   // scale granules per row group per stage
  constexpr int kAccSets = T.accumulator_sets();

  extern __shared__ __align__(128) uint8_t smem[];
  const int stages = p.stages;
  int32_t* tile_prefix = reinterpret_cast<int32_t*>(smem + L.prefix_offset(stages));
  // Two buffers of gathered row indices: the loader runs up to one item ahead.
  int32_t* item_rows = reinterpret_cast<int32_t*>(smem + L.row_index_offset(stages));
  float* epi = reinterpret_cast<float*>(smem + L.epilogue_offset(stages));

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int E = p.num_experts;
  wait_for_prior_grid();
  allow_dependent_grids();

  // ---- scheduler: token chunks per expert, prefix-summed in shared memory ----
  if (warp == 0) build_chunk_prefix<T.chunk(), T.nt>(tile_prefix, p.expert_offsets, E, lane);
  __syncthreads();
  const int total_chunks = tile_prefix[E];
  const int n_tiles = static_cast<int>(p.n / T.bm);
  const int total_items = total_chunks * n_tiles;
  if (blockIdx.x >= total_items) return;
  const int KT = static_cast<int>(p.k / T.bk);
  const int my_items = (total_items - 1 - blockIdx.x) / gridDim.x + 1;
  const int total_steps = my_items * KT;  // the CTA's (item, k-stage) sequence
  const int64_t w_expert_bytes = p.n * p.k / 2, s_expert_bytes = p.n * p.k / 16;
  const int64_t w_rowgroup_bytes = (p.k / 64) * pack::kWeightGranuleBytes;
  const int64_t s_rowgroup_bytes = (p.k / 128) * pack::kScaleGranuleBytes;

  // Chunk-minor order: the chunks of one expert and N tile run side by side, so
  // its weights come from DRAM once and from L2 for the other chunks.
  auto work_item = [&](int j) {
    return detail::work_item<T.chunk(), false>(blockIdx.x + j * gridDim.x, tile_prefix, p.expert_offsets, E,
                                               total_chunks, n_tiles);
  };
  auto stage_rows = [&](int j) {  // gathered activation rows of item j, for the loader
    const WorkItem w = work_item(j);
    int32_t* dst = item_rows + (j & 1) * T.nt;
    for (int r = tid; r < T.nt; r += kThreads)
      dst[r] = r < w.rows ? (p.gather ? p.gather[w.row0 + r] : w.row0 + r) : -1;
  };

  // Loader cursor: (item j, k-stage kt, ring slot), advanced without divisions.
  struct Cursor {
    int j = 0, kt = 0, slot = 0;
  };
  Cursor ld;
  WorkItem load_item = work_item(0);
  auto load_stage = [&] {
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
  };
  auto advance_loader = [&] {
    if (++ld.slot == stages) ld.slot = 0;
    if (++ld.kt == KT) {
      ld.kt = 0;
      if (++ld.j < my_items) load_item = work_item(ld.j);
    }
  };

  float acc[kAccSets][MT][NT8][4];
  auto clear_acc = [&] {
#pragma unroll
    for (int a = 0; a < kAccSets; ++a)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[a][mt][j][q] = 0.f;
  };
  clear_acc();

  // ---- prologue: stages-1 loads in flight (the planner keeps stages-1 <= KT) ----
  stage_rows(0);
  if (my_items > 1) stage_rows(1);
  __syncthreads();
  for (int s = 0; s < stages - 1; ++s) {
    if (s < total_steps && p.probe != GemmProbe::math_only) load_stage();
    ptx::cp_async_commit();
    advance_loader();
  }

  int slot = 0, kt = 0, j = 0;  // compute cursor
  for (int step = 0; step < total_steps; ++step) {
    ptx::cp_async_wait_dynamic(stages - 2);
    // cp.async wrote the stage through the generic proxy; wgmma reads it through the async proxy.
    if constexpr (T.wgmma) wgmma::fence_proxy_async_shared();
    __syncthreads();
    if (step + stages - 1 < total_steps && p.probe != GemmProbe::math_only) load_stage();
    ptx::cp_async_commit();
    advance_loader();

    const uint8_t* st = smem + slot * L.smem_bytes_per_stage();
    const uint8_t* wst = st + L.weight_offset();
    const uint8_t* sst = st + L.scale_offset();
    const uint8_t* xst = st + L.act_offset();

    if constexpr (T.wgmma) {
      if (p.probe != GemmProbe::loads_only) {
        const uint64_t xdesc = wgmma::smem_desc_k_major_sw128(ptx::smem_addr(xst));
        uint32_t a[2][4];  // double-buffered A: the fragment of step s is live until its wgmma completes
#pragma unroll
        for (int kk = 0; kk < kWGranPerStage; ++kk) {
          const uint4 wq = *reinterpret_cast<const uint4*>(wst + (warp * kWGranPerStage + kk) * 512 + lane * 16);
          const uint4 sq = *reinterpret_cast<const uint4*>(sst + (warp * kSGranPerStage + kk / 2) * 128 + (lane / 4) * 16);
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int step8 = (kk % 2) * 4 + t, buf = (kk * 4 + t) % 2;
            dequant_fragment(wq, sq, t, step8, p.scale_add2, a[buf]);
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
    } else {
    if (p.probe != GemmProbe::loads_only) {
#pragma unroll
      for (int kk = 0; kk < kWGranPerStage; ++kk) {
        uint4 wq[MT], sq[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int rg = warp * MT + mt;
          wq[mt] = *reinterpret_cast<const uint4*>(wst + (rg * kWGranPerStage + kk) * 512 + lane * 16);
          sq[mt] = *reinterpret_cast<const uint4*>(sst + (rg * kSGranPerStage + kk / 2) * 128 + (lane / 4) * 16);
        }
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int step8 = (kk % 2) * 4 + t;  // k16 step inside the k128 scale granule
          const int set = kAccSets == 2 ? (t & 1) : 0;
          uint32_t a[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            dequant_fragment(wq[mt], sq[mt], t, step8, p.scale_add2, a[mt]);
          }
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

    }
    if (++slot == stages) slot = 0;
    if (++kt < KT) continue;
    kt = 0;
    // ---- epilogue of item j: scale, stage fp32 [nt][bm], then store / SwiGLU / scatter whole rows ----
    // (the loader is already streaming the next item's first stages)
    const WorkItem w = work_item(j++);
    constexpr int kEpiStride = static_cast<int>(L.epilogue_row_stride() / 4);
#pragma unroll
    for (int mt = 0; mt < MT && p.probe != GemmProbe::no_output; ++mt) {
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
    clear_acc();
    __syncthreads();
    if (p.probe != GemmProbe::no_output) write_staged_tile<T.bm, kThreads>(p, w, epi, kEpiStride, int64_t(w.ntile) * T.bm, tid);
    // The staging tile is rewritten KT barriers later; nothing else waits here.
  }
  ptx::cp_async_wait<0>();
}

// Warp-specialized tiles come from fp4_grouped_gemm_ws_sm90.cu (ws_kernel).
template <int I>
struct AllWarpsKernel {
  static constexpr KernelFn pick() {
    if constexpr (plan::kGemmTiles[I].warp_specialized) return nullptr;
    else return &fp4_grouped_gemm_kernel<I>;
  }
  static constexpr KernelFn fn = pick();
};
constexpr auto kKernels = tile_kernel_table<AllWarpsKernel>();

}  // namespace

KernelFn all_warps_kernel(int tile) {
  FP4MOE_CHECK(tile >= 0 && tile < plan::kNumGemmTiles && kKernels[static_cast<size_t>(tile)],
               "tile " << tile << " is not an all-warps tile");
  return kKernels[static_cast<size_t>(tile)];
}

}  // namespace fp4moe::kernels

