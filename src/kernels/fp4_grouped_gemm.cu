// FP4 grouped GEMM, every thread loading and multiplying (sm_80, sm_90a,
// sm_120a): Y = X . dequant(W_e)^T for the tokens of each expert. Its pieces:
//   all_warps_loader.cuh     the cp.async stage loads and their cursor
//   all_warps_mainloop.cuh   the math on a stage (mma.sync or wgmma) and the staging of an item
//   gemm_scheduler.cuh, gemm_epilogue.cuh (shared with the warp-specialized kernel)
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
#include "format/prepared_layout.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/all_warps_loader.cuh"
#include "kernels/all_warps_mainloop.cuh"
#include "kernels/async_sm90.cuh"
#include "kernels/grouped_gemm_kernels.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/wgmma_sm90.cuh"
#include "plan/gemm_layout.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using plan::GemmSmemLayout;

using namespace detail;

template <int TileIndex, EpilogueInstance Epi>
__global__ void __launch_bounds__(plan::kGemmTiles[TileIndex].threads(), plan::kGemmTiles[TileIndex].ctas_per_sm)
    fp4_grouped_gemm_kernel(const KernelParams p, const __grid_constant__ TensorMaps /*unused: cp.async loads*/) {
  constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  constexpr GemmSmemLayout L{T};
  constexpr int kThreads = T.threads();
  using Mainloop = AllWarpsMainloop<TileIndex>;

  extern __shared__ __align__(128) uint8_t smem[];
  const int stages = p.stages;
  int32_t* tile_prefix = reinterpret_cast<int32_t*>(smem + L.prefix_offset(stages));
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
  AllWarpsLoader<TileIndex> loader{p, smem, reinterpret_cast<int32_t*>(smem + L.row_index_offset(stages)), tile_prefix, E,
                                   total_chunks, n_tiles, my_items, KT, stages, tid, p.n * p.k / 2, pack::scale_bytes(p.n, p.k),
                                   (p.k / 64) * pack::kWeightGranuleBytes,
                                   pack::scale_granules(p.k) * pack::kScaleGranuleBytes};
  loader.load_item = loader.work_item(0);
  typename Mainloop::Acc acc;
  Mainloop::clear(acc);

  // ---- prologue: stages-1 loads in flight (the planner keeps stages-1 <= KT) ----
  loader.stage_rows(0);
  if (my_items > 1) loader.stage_rows(1);
  __syncthreads();
  for (int s = 0; s < stages - 1; ++s) {
    if (s < total_steps && p.probe != GemmProbe::math_only) loader.load_stage();
    ptx::cp_async_commit();
    loader.advance();
  }

  int slot = 0, kt = 0, j = 0;  // compute cursor
  for (int step = 0; step < total_steps; ++step) {
    ptx::cp_async_wait_dynamic(stages - 2);
    // cp.async wrote the stage through the generic proxy; wgmma reads it through the async proxy.
    if constexpr (T.wgmma) async::fence_proxy_async_shared();
    __syncthreads();
    if (step + stages - 1 < total_steps && p.probe != GemmProbe::math_only) loader.load_stage();
    ptx::cp_async_commit();
    loader.advance();

    const uint8_t* st = smem + slot * L.smem_bytes_per_stage();
    if (p.probe != GemmProbe::loads_only) {
      if constexpr (T.wgmma) Mainloop::wgmma_stage(st, acc, warp, lane, p.scale_add2);
      else Mainloop::mma_stage(st, acc, warp, lane, p.scale_add2);
    }
    if (++slot == stages) slot = 0;
    if (++kt < KT) continue;
    kt = 0;
    // ---- epilogue of item j: scale, stage fp32 [nt][bm], then store / SwiGLU / scatter whole rows ----
    // (the loader is already streaming the next item's first stages)
    const WorkItem w = loader.work_item(j++);
    if (p.probe != GemmProbe::no_output) Mainloop::stage_item(p, w, acc, epi, warp, lane);
    Mainloop::clear(acc);
    __syncthreads();
    if (p.probe != GemmProbe::no_output)
      write_staged_tile<T.bm, kThreads, Epi, T.swiglu_in_bias_pass, false>(p, w, epi, static_cast<int>(L.epilogue_row_stride() / 4),
                                                                   int64_t(w.ntile) * T.bm, tid, [] { __syncthreads(); });
    // The staging tile is rewritten KT barriers later; nothing else waits here.
  }
  ptx::cp_async_wait<0>();
}

// Warp-specialized tiles come from fp4_grouped_gemm_ws_sm90.cu (ws_kernel).
template <EpilogueInstance Epi>
struct AllWarpsKernels {
  template <int I>
  struct Pick {
    static constexpr KernelFn pick() {
      constexpr plan::GemmTile T = plan::kGemmTiles[I];
      if constexpr (T.warp_specialized) return nullptr;
      else return &fp4_grouped_gemm_kernel<I, Epi>;
    }
    static constexpr KernelFn fn = pick();
  };
};
constexpr auto kKernels = tile_kernel_table<AllWarpsKernels<EpilogueInstance::plain>::Pick>();
constexpr auto kBiasedKernels = tile_kernel_table<AllWarpsKernels<EpilogueInstance::biased>::Pick>();

}  // namespace

KernelFn all_warps_kernel(int tile, EpilogueInstance e) {
  FP4MOE_CHECK(tile >= 0 && tile < plan::kNumGemmTiles && kKernels[static_cast<size_t>(tile)],
               "tile " << tile << " is not an all-warps tile");
  return (e == EpilogueInstance::biased ? kBiasedKernels : kKernels)[static_cast<size_t>(tile)];
}

}  // namespace fp4moe::kernels

