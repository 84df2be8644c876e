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
#include <mutex>
#include <utility>

#include "format/gemm_pack.hpp"
#include "format/prepare_gemm.hpp"
#include "fp4moe/device.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/grouped_gemm_ws.hpp"
#include "kernels/mma_sm80.cuh"
#include "kernels/routing_kernels.hpp"
#include "kernels/wgmma_sm90.cuh"
#include "plan/arch.hpp"
#include "plan/gemm_layout.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device_limits.hpp"

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

struct DeviceState : DeviceLimits {
  // Per tile: the dynamic shared memory the kernel attribute allows, and the
  // CTAs resident on the whole device at that size, measured once (launches stay cheap on the host).
  std::array<int64_t, plan::kNumGemmTiles> attr_bytes{};
  std::array<int64_t, plan::kNumGemmTiles> occupancy_bytes{};
  std::array<int, plan::kNumGemmTiles> occupancy{};
};

DeviceState& current_device() {
  static thread_local DeviceState s;
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  if (s.device != dev) {
    s = DeviceState{};
    static_cast<DeviceLimits&>(s) = device_limits(dev);
  }
  return s;
}

// CTAs of tile `tile` with `smem` bytes resident on the whole device (kernel
// attribute raised and occupancy measured once per tile and size).
int resident_ctas(DeviceState& ds, int tile, int64_t smem) {
  const KernelFn fn = plan::kGemmTiles[tile].warp_specialized ? ws_kernel(tile) : kKernels[static_cast<size_t>(tile)];
  const size_t ti = static_cast<size_t>(tile);
  if (ds.attr_bytes[ti] < smem) {
    FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    ds.attr_bytes[ti] = smem;
  }
  const int cluster = plan::kGemmTiles[tile].cluster_n;
  if (ds.occupancy_bytes[ti] != smem) {
    if (cluster > 1) {
      // clusters: as many CTAs as whole clusters can be resident at once (GPCs place them)
      cudaLaunchAttribute attr = cluster_dimension(static_cast<unsigned>(cluster));
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(static_cast<unsigned>(cluster * ds.sm_count));
      cfg.blockDim = dim3(static_cast<unsigned>(plan::kGemmTiles[tile].threads()));
      cfg.dynamicSmemBytes = static_cast<size_t>(smem);
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg));
      ds.occupancy[ti] = clusters * cluster;
    } else {
      int per_sm = 0;
      FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, plan::kGemmTiles[tile].threads(),
                                                                      static_cast<size_t>(smem)));
      ds.occupancy[ti] = per_sm * ds.sm_count;
    }
    ds.occupancy_bytes[ti] = smem;
  }
  FP4MOE_CHECK(ds.occupancy[ti] >= 1,
               "grouped GEMM: tile " << plan::gemm_tile_name(tile) << " with " << smem << " bytes of shared memory cannot be resident");
  return ds.occupancy[ti];
}

// The planner's verdict on a launch; a launch it rejects is an error carrying its explanation.
plan::GemmTileFit checked_fit(const GemmLaunch& launch, int64_t n, int64_t k, const plan::SmemBudget& budget) {
  const plan::GemmTileFit fit = plan::fit_gemm_tile(launch.tile, n, k, budget, launch.stages);
  FP4MOE_CHECK(fit.fits, "grouped GEMM: the planner rejects this launch: "
                             << plan::plan_gemm_tile(launch.tile, n, k, budget, launch.stages).explanation);
  return fit;
}

// The split of a warp-specialized launch of `grid` CTAs: forced, or the planner's.
plan::SplitKPlan k_split_plan(const GroupedGemmArgs& a, const GemmLaunch& launch, int grid) {
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  plan::SplitKPlan sp;
  sp.tile = launch.tile;
  if (launch.k_splits > 0) {
    sp.splits = launch.k_splits;
    sp.why = plan::SplitKPlan::Why::given;
  } else if (!tile.splits_k() || !a.split_workspace) {
    sp.why = tile.splits_k() ? plan::SplitKPlan::Why::no_workspace : plan::SplitKPlan::Why::tile_does_not_split;
  } else {
    sp = plan::plan_k_splits(launch.tile, a.n, a.k,
                             plan::expected_token_chunks(a.permuted_rows, a.num_experts, tile.chunk(), tile.nt), grid,
                             a.split_workspace_bytes);
  }
  return sp;
}

// Split-K parameters of a warp-specialized launch of `grid` CTAs (plan/split_k.hpp).
void set_k_splits(KernelParams& kp, const GroupedGemmArgs& a, const GemmLaunch& launch, int grid) {
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  const int64_t kt = a.k / tile.bk;
  FP4MOE_CHECK(launch.k_splits <= kt, "grouped GEMM: k_splits = " << launch.k_splits << " is more than the " << kt
                                                                 << " K stages of tile " << plan::gemm_tile_name(launch.tile));
  if (launch.k_splits > 1)
    FP4MOE_CHECK(a.split_workspace && plan::SplitKWorkspace::slots(tile, a.split_workspace_bytes) >= launch.k_splits,
                 "grouped GEMM: k_splits = " << launch.k_splits << " needs split_workspace ("
                                            << a.split_workspace_bytes << " bytes given, at least "
                                            << plan::SplitKWorkspace::kCounterBytes +
                                                   launch.k_splits * plan::SplitKWorkspace::slot_bytes(tile)
                                            << ")");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.split_workspace) % 16 == 0, "grouped GEMM: split_workspace is not 16-byte aligned");
  const int splits = k_split_plan(a, launch, grid).splits;
  if (splits <= 1) return;
  kp.k_splits = splits;
  kp.split_slots = plan::SplitKWorkspace::slots(tile, a.split_workspace_bytes);
  kp.split_counters = static_cast<int32_t*>(a.split_workspace);
  kp.split_partials = reinterpret_cast<float*>(static_cast<uint8_t*>(a.split_workspace) + plan::SplitKWorkspace::kCounterBytes);
}

}  // namespace

plan::SplitKPlan gemm_launch_k_splits(const GroupedGemmArgs& a, const GemmLaunch& launch) {
  DeviceState& dev = current_device();
  const plan::GemmTileFit fit = checked_fit(launch, a.n, a.k, dev.budget);
  return k_split_plan(a, launch, launch.grid > 0 ? launch.grid : resident_ctas(dev, launch.tile, fit.smem_bytes));
}

int gemm_launch_grid(const GemmLaunch& launch) {
  FP4MOE_CHECK(launch.grid > 0 || launch.stages >= 1,
               "gemm_launch_grid: launch.stages = " << launch.stages << " (the planner's count is needed to size the grid)");
  return launch.grid > 0 ? launch.grid : resident_ctas(current_device(), launch.tile, gemm_launch_smem_bytes(launch));
}

int64_t gemm_launch_smem_bytes(const GemmLaunch& launch) {
  FP4MOE_CHECK(launch.tile >= 0 && launch.tile < plan::kNumGemmTiles,
               "GEMM tile index " << launch.tile << " is outside 0.." << plan::kNumGemmTiles - 1);
  return plan::gemm_layout(launch.tile).total_bytes(launch.stages);
}

void launch_fp4_grouped_gemm(const GroupedGemmArgs& a, const GemmLaunch& launch, cudaStream_t stream) {
  DeviceState& dev = current_device();
  FP4MOE_CHECK(a.num_experts >= 1 && a.num_experts <= GemmSmemLayout::kMaxExperts,
               "grouped GEMM: num_experts = " << a.num_experts << " is outside 1.." << GemmSmemLayout::kMaxExperts);
  FP4MOE_CHECK(a.weights && a.scales && a.dequant_scale && a.x && a.expert_offsets,
               "grouped GEMM: a device pointer is null (weights, scales, dequant_scale, x and expert_offsets are required)");
  FP4MOE_CHECK(a.scale_parts == 1 || a.scale_parts == 2, "grouped GEMM: scale_parts = " << a.scale_parts << " is not 1 or 2");
  if (a.epilogue == GemmEpilogue::scatter_add) {
    FP4MOE_CHECK(a.accumulate && a.permuted_pair && a.topk_weights && a.top_k >= 1,
                 "grouped GEMM: scatter_add needs accumulate, permuted_pair, topk_weights and top_k");
    FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.accumulate) % 16 == 0,
                 "grouped GEMM: accumulate is not 16-byte aligned (the epilogue adds 4 floats at a time)");
  }
  else
    FP4MOE_CHECK(a.y, "grouped GEMM: y is null");
  FP4MOE_CHECK(a.permuted_rows >= 0, "grouped GEMM: permuted_rows = " << a.permuted_rows << " is negative");
  if (a.epilogue == GemmEpilogue::swiglu)
    FP4MOE_CHECK(a.n % 32 == 0, "grouped GEMM: SwiGLU needs N = " << a.n << " to be a multiple of 32 (16 gate + 16 up rows)");
  // The planner decides whether this launch may run; nothing it rejects is launched.
  const plan::GemmTileFit pl = checked_fit(launch, a.n, a.k, dev.budget);
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  const KernelFn fn = tile.warp_specialized ? ws_kernel(launch.tile) : kKernels[static_cast<size_t>(launch.tile)];
  const int64_t smem = pl.smem_bytes;
  const int grid = launch.grid > 0 ? launch.grid : resident_ctas(dev, launch.tile, smem);
  FP4MOE_CHECK(grid % tile.cluster_n == 0, "grouped GEMM: grid = " << grid << " CTAs is not a whole number of tile "
                                                                 << plan::gemm_tile_name(launch.tile) << "'s clusters of "
                                                                 << tile.cluster_n);
  KernelParams kp{a.weights, a.scales, a.dequant_scale, a.x, a.gather, a.expert_offsets, a.y,
                  a.accumulate, a.permuted_pair, a.topk_weights, a.n, a.k, static_cast<int>(a.epilogue),
                  a.scale_parts, a.top_k, static_cast<int>(a.num_experts), pl.stages,
                  pack::scale_add2(prepared_scale_exponent_add(a.format)),
                  launch.probe, a.permuted_rows, 0, 1, 0, nullptr, nullptr};
  FP4MOE_CHECK(launch.k_splits >= 0 && launch.k_splits <= plan::kMaxKSplits,
               "grouped GEMM: k_splits = " << launch.k_splits << " is outside 0.." << plan::kMaxKSplits);
  FP4MOE_CHECK(tile.splits_k() || launch.k_splits <= 1,
               "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile) << " does not split K (k_splits = "
                                    << launch.k_splits << "); warp-specialized tiles of up to 128 accumulators per thread do");
  // Warp-specialized tiles load every operand through a tensor map (TMA).
  TensorMaps maps{};
  if (tile.warp_specialized) {
    FP4MOE_CHECK(a.permuted_rows > 0, "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile)
                                          << " loads the rows by TMA and needs permuted_rows (P = expert_offsets[E]), got "
                                          << a.permuted_rows);
    if (a.gather) {
      // A tensor map cannot gather rows on sm_90 (one-row boxes and in-kernel
      // cp.async both measured slower than this copy; docs/kernels.md).
      FP4MOE_CHECK(a.gather_workspace, "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile)
                                                            << " copies gathered rows into gather_workspace [" << a.permuted_rows
                                                            << ", " << a.k << "] first; it is null");
      kp.x = a.gather_workspace;
      kp.gather = nullptr;
    }
    // Every map is encoded (and checked) before anything is queued.
    maps.weights = weight_tensor_map(a.weights, a.num_experts, a.n, a.k, tile);
    maps.scales = scale_tensor_map(a.scales, a.num_experts, a.n, a.k, tile);
    maps.x = activation_tensor_map(kp.x, a.permuted_rows, a.k, tile.nt);
    set_k_splits(kp, a, launch, grid);
    // (only where the launch may overlap its predecessor: without dependent
    // launch nothing is gained, and isolated launches measured slower with it)
    kp.offsets_ready_at_launch = a.offsets_ready_at_launch && dependent_launch_enabled(reinterpret_cast<const void*>(fn));
    if (a.gather) launch_gather_rows({a.x, a.gather, a.permuted_rows, a.k, a.gather_workspace}, stream);
  }
  launch_dependent_in_clusters(fn, grid, tile.threads(), static_cast<size_t>(smem), static_cast<unsigned>(tile.cluster_n),
                               stream, kp, maps);
  FP4MOE_CHECK_LAUNCH("fp4_grouped_gemm");
}

}  // namespace fp4moe::kernels
