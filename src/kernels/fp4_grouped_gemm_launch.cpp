// The FP4 grouped GEMM's host launcher: the planner's verdict on a launch,
// the grid (resident CTAs, measured once per tile and size), the split-K and
// tensor-map parameters, made once (prepare_grouped_gemm); then the kernel of
// the tile, queued as prepared (enqueue_grouped_gemm).
#include <array>
#include <cmath>

#include "format/gemm_pack.hpp"
#include "format/prepare_gemm.hpp"
#include "fp4moe/error.hpp"
#include "kernels/dependent_launch.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "kernels/grouped_gemm_kernels.hpp"
#include "kernels/grouped_gemm_launch.hpp"
#include "kernels/routing_kernels.hpp"
#include "plan/gemm_layout.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

using detail::EpilogueInstance;
using detail::KernelFn;
using detail::KernelParams;
using detail::TensorMaps;
using plan::GemmSmemLayout;

// A tile's kernel instance: its epilogue, and for e4m3 tiles of NVFP4 weights the rounded fold.
struct KernelInstance {
  EpilogueInstance epilogue = EpilogueInstance::plain;
  bool rounded_fold = false;
  size_t index() const { return static_cast<size_t>(epilogue) + (rounded_fold ? 2 : 0); }
};

struct DeviceState : plan::DeviceLimits {
  // Per tile: the dynamic shared memory the kernel attribute allows (per
  // kernel instance), and the CTAs resident on the whole device at that size,
  // measured once (launches stay cheap on the host).
  std::array<std::array<int64_t, plan::kNumGemmTiles>, 4> attr_bytes{};
  std::array<int64_t, plan::kNumGemmTiles> occupancy_bytes{};
  std::array<int, plan::kNumGemmTiles> occupancy{};
};

// The launcher's per-device state on this thread, for `device` (the current device).
DeviceState& state_of(const plan::DeviceLimits& device) {
  static thread_local DeviceState s;
  if (s.device != device.device) {
    s = DeviceState{};
    static_cast<plan::DeviceLimits&>(s) = device;
  }
  return s;
}

// Tile `tile`'s kernel, instance e.
KernelFn tile_kernel(int tile, KernelInstance e) {
  return plan::kGemmTiles[tile].warp_specialized ? ws_kernel(tile, e.epilogue, e.rounded_fold)
                                                 : all_warps_kernel(tile, e.epilogue);
}

// Raises instance e of tile `tile` to `smem` bytes of dynamic shared memory, once.
void allow_smem(DeviceState& ds, int tile, KernelInstance e, int64_t smem) {
  int64_t& allowed = ds.attr_bytes[e.index()][static_cast<size_t>(tile)];
  if (allowed >= smem) return;
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(tile_kernel(tile, e)),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  allowed = smem;
}

// CTAs of tile `tile` with `smem` bytes resident on the whole device (kernel
// attribute raised and occupancy measured once per tile and size; every
// instance of a tile takes the same shared memory: the plain one's stands for all).
int resident_ctas(DeviceState& ds, int tile, int64_t smem) {
  const KernelFn fn = tile_kernel(tile, {});
  const size_t ti = static_cast<size_t>(tile);
  allow_smem(ds, tile, {}, smem);
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
      FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(fn), &cfg));
      ds.occupancy[ti] = clusters * cluster;
    } else {
      int per_sm = 0;
      FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(fn), plan::kGemmTiles[tile].threads(),
                                                                      static_cast<size_t>(smem)));
      ds.occupancy[ti] = per_sm * ds.sm_count;
    }
    ds.occupancy_bytes[ti] = smem;
  }
  FP4MOE_CHECK(ds.occupancy[ti] >= 1,
               "grouped GEMM: tile " << plan::gemm_tile_name(tile) << " with " << smem << " bytes of shared memory cannot be resident");
  return ds.occupancy[ti];
}

// A launch with biases or the clamped SwiGLU runs the biased epilogue instance.
bool is_biased(const GroupedGemmArgs& a) { return a.bias || a.activation != GemmActivation::silu; }

// The planner's verdict on a launch; a launch it rejects is an error carrying its explanation.
plan::GemmTileFit checked_fit(const GemmLaunch& launch, const GroupedGemmArgs& a, const plan::SmemBudget& budget) {
  const plan::GemmTileFit fit =
      plan::fit_gemm_tile(launch.tile, a.n, a.k, budget, launch.stages, a.activations());
  FP4MOE_CHECK(fit.fits, "grouped GEMM: the planner rejects this launch: "
                             << plan::plan_gemm_tile(launch.tile, a.n, a.k, budget, launch.stages,
                                                     a.activations())
                                    .explanation);
  return fit;
}

// The split of a warp-specialized launch of `grid` CTAs: forced, or the planner's.
plan::SplitKPlan k_split_plan(const GroupedGemmArgs& a, const GemmLaunch& launch, int grid) {
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  plan::SplitKPlan sp;
  sp.tile = launch.tile;
  if (launch.k_splits == plan::kBalancedKSplit) {
    sp.balanced_split = true;
    sp.why = plan::SplitKPlan::Why::given;
  } else if (launch.k_splits > 0) {
    sp.splits = launch.k_splits;
    sp.why = plan::SplitKPlan::Why::given;
  } else if (!tile.splits_k() || !a.split_workspace) {
    sp.why = tile.splits_k() ? plan::SplitKPlan::Why::no_workspace : plan::SplitKPlan::Why::tile_does_not_split;
  } else {
    sp = plan::plan_k_splits(launch.tile, a.n, a.k,
                             plan::expected_token_chunks(a.permuted_rows, a.num_experts, tile.chunk(), tile.nt), grid,
                             a.split_workspace_bytes, launch.balance_k);
  }
  return sp;
}

// The balanced split's parameters (plan/split_k.hpp): one slot per CTA, the
// CTAs all resident (a CTA that sums an item waits for parts of CTAs after it).
void set_balanced_split(KernelParams& kp, const GroupedGemmArgs& a, const GemmLaunch& launch, int grid, int resident) {
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  FP4MOE_CHECK(a.split_workspace && plan::SplitKWorkspace::slots(tile, a.split_workspace_bytes) >= grid,
               "grouped GEMM: the balanced split of " << grid << " CTAs needs split_workspace of at least "
                                                      << plan::SplitKWorkspace::kCounterBytes +
                                                             grid * plan::SplitKWorkspace::slot_bytes(tile)
                                                      << " bytes (" << a.split_workspace_bytes << " given)");
  FP4MOE_CHECK(grid <= resident, "grouped GEMM: the balanced split needs every CTA resident: grid = "
                                     << grid << " is more than the " << resident << " CTAs of tile "
                                     << plan::gemm_tile_name(launch.tile) << " the device holds at once");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.split_workspace) % 16 == 0, "grouped GEMM: split_workspace is not 16-byte aligned");
  kp.balanced_split = 1;
  kp.split_slots = plan::SplitKWorkspace::slots(tile, a.split_workspace_bytes);
  kp.split_counters = static_cast<int32_t*>(a.split_workspace);
  kp.split_partials = reinterpret_cast<float*>(static_cast<uint8_t*>(a.split_workspace) + plan::SplitKWorkspace::kCounterBytes);
}

// Split-K parameters of a warp-specialized launch that runs `splits` parts (plan/split_k.hpp).
void set_k_splits(KernelParams& kp, const GroupedGemmArgs& a, const GemmLaunch& launch, int splits) {
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  const int64_t kt = tile.k_steps(a.k);
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
  if (splits <= 1) return;
  kp.k_splits = splits;
  kp.split_slots = plan::SplitKWorkspace::slots(tile, a.split_workspace_bytes);
  kp.split_counters = static_cast<int32_t*>(a.split_workspace);
  kp.split_partials = reinterpret_cast<float*>(static_cast<uint8_t*>(a.split_workspace) + plan::SplitKWorkspace::kCounterBytes);
}

// Every argument a launch needs, whatever its tile.
void check_args(const GroupedGemmArgs& a) {
  FP4MOE_CHECK(a.num_experts >= 1 && a.num_experts <= GemmSmemLayout::kMaxExperts,
               "grouped GEMM: num_experts = " << a.num_experts << " is outside 1.." << GemmSmemLayout::kMaxExperts);
  if (a.activations() == plan::ActivationType::e4m3) {
    FP4MOE_CHECK(a.weights && a.scales && a.weight_row_scale && a.x_scale && a.expert_offsets && !a.x && !a.gather,
                 "grouped GEMM: e4m3 activations need weights, scales, weight_row_scale, x_scale and expert_offsets, "
                 "and the rows in expert order (x and gather null)");
  } else {
    FP4MOE_CHECK(a.weights && a.scales && a.dequant_scale && a.x && a.expert_offsets,
                 "grouped GEMM: a device pointer is null (weights, scales, dequant_scale, x and expert_offsets are required)");
  }
  FP4MOE_CHECK(a.scale_parts == 1 || a.scale_parts == 2, "grouped GEMM: scale_parts = " << a.scale_parts << " is not 1 or 2");
  if (a.epilogue == GemmEpilogue::scatter_add) {
    FP4MOE_CHECK(a.accumulate && a.permuted_pair && a.topk_weights && a.top_k >= 1,
                 "grouped GEMM: scatter_add needs accumulate, permuted_pair, topk_weights and top_k");
    FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.accumulate) % 16 == 0,
                 "grouped GEMM: accumulate is not 16-byte aligned (the epilogue adds 4 floats at a time)");
  } else {
    FP4MOE_CHECK(a.y, "grouped GEMM: y is null");
  }
  FP4MOE_CHECK(a.fp8_promotion_stages >= 0,
               "grouped GEMM: fp8_promotion_stages = " << a.fp8_promotion_stages << " is negative");
  FP4MOE_CHECK(a.permuted_rows >= 0, "grouped GEMM: permuted_rows = " << a.permuted_rows << " is negative");
  if (a.epilogue == GemmEpilogue::swiglu)
    FP4MOE_CHECK(a.n % 32 == 0, "grouped GEMM: SwiGLU needs N = " << a.n << " to be a multiple of 32 (16 gate + 16 up rows)");
  FP4MOE_CHECK(a.activation == GemmActivation::silu || a.activation == GemmActivation::clamped_swiglu,
               "grouped GEMM: activation = " << static_cast<int>(a.activation) << " is not silu or clamped_swiglu");
  FP4MOE_CHECK(a.activation == GemmActivation::silu || (a.epilogue == GemmEpilogue::swiglu && a.swiglu_limit > 0 &&
                                                         std::isfinite(a.swiglu_limit) && std::isfinite(a.swiglu_alpha)),
               "grouped GEMM: the clamped SwiGLU needs the swiglu epilogue and a positive finite limit (limit = "
                   << a.swiglu_limit << ", alpha = " << a.swiglu_alpha << ")");
}

// The kernel's parameters for the launch (split-K and the early schedule are set by the caller).
KernelParams kernel_params(const GroupedGemmArgs& a, const GemmLaunch& launch, int stages) {
  return {.weights = a.weights,
          .scales = a.scales,
          .dequant_scale = a.dequant_scale,
          .x = a.x,
          .gather = a.gather,
          .expert_offsets = a.expert_offsets,
          .y = a.y,
          .accumulate = a.accumulate,
          .permuted_pair = a.permuted_pair,
          .topk_weights = a.topk_weights,
          .n = a.n,
          .k = a.k,
          .epilogue = static_cast<int>(a.epilogue),
          .scale_parts = a.scale_parts,
          .top_k = a.top_k,
          .num_experts = static_cast<int>(a.num_experts),
          .stages = stages,
          .scale_add2 = pack::scale_add2(prepared_scale_exponent_add(a.format)),
          .probe = launch.probe,
          .permuted_rows = a.permuted_rows,
          .offsets_ready_at_launch = 0,
          .k_splits = 1,
          .balanced_split = 0,
          .split_slots = 0,
          .split_partials = nullptr,
          .split_counters = nullptr,
          .x_scale = a.x_scale,
          .row_scale = a.weight_row_scale,
          .fp8_promotion_stages = a.fp8_promotion_stages,
          .bias = a.bias,
          .clamped_swiglu = a.activation == GemmActivation::clamped_swiglu,
          .swiglu_limit = a.swiglu_limit,
          .swiglu_alpha = a.swiglu_alpha};
}

}  // namespace

PreparedGemm prepare_grouped_gemm(const GroupedGemmArgs& a, const GemmLaunch& launch, const plan::DeviceLimits& device) {
  DeviceState& dev = state_of(device);
  FP4MOE_CHECK(launch.tile >= 0 && launch.tile < plan::kNumGemmTiles,
               "grouped GEMM: tile index " << launch.tile << " is outside 0.." << plan::kNumGemmTiles - 1);
  check_args(a);
  // The planner decides whether this launch may run; nothing it rejects is launched.
  const plan::GemmTileFit pl = checked_fit(launch, a, dev.budget);
  const plan::GemmTile& tile = plan::kGemmTiles[launch.tile];
  const KernelInstance instance{is_biased(a) ? EpilogueInstance::biased : EpilogueInstance::plain,
                                tile.fp8() && a.format == Fp4Format::nvfp4};
  FP4MOE_CHECK(instance.epilogue == EpilogueInstance::plain || a.bias,
               "grouped GEMM: the clamped SwiGLU runs in the biased epilogue, which needs bias [E, N] (zeros for none)");
  PreparedGemm g;
  g.kernel = tile_kernel(launch.tile, instance);
  g.tile = launch.tile;
  g.stages = pl.stages;
  g.smem_bytes = pl.smem_bytes;
  g.threads = tile.threads();
  g.cluster = tile.cluster_n;
  allow_smem(dev, launch.tile, instance, g.smem_bytes);
  g.grid = launch.grid > 0 ? launch.grid : resident_ctas(dev, launch.tile, g.smem_bytes);
  FP4MOE_CHECK(g.grid % tile.cluster_n == 0, "grouped GEMM: grid = " << g.grid << " CTAs is not a whole number of tile "
                                                                     << plan::gemm_tile_name(launch.tile) << "'s clusters of "
                                                                     << tile.cluster_n);
  g.dependent_launch = dependent_launch_enabled(reinterpret_cast<const void*>(g.kernel));
  g.params = kernel_params(a, launch, pl.stages);
  FP4MOE_CHECK((launch.k_splits >= 0 && launch.k_splits <= plan::kMaxKSplits) || launch.k_splits == plan::kBalancedKSplit,
               "grouped GEMM: k_splits = " << launch.k_splits << " is outside 0.." << plan::kMaxKSplits << " (or "
                                           << plan::kBalancedKSplit << ", the balanced split)");
  FP4MOE_CHECK(tile.splits_k() || launch.k_splits <= 1,
               "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile) << " does not split K (k_splits = "
                                    << launch.k_splits << "); warp-specialized tiles of up to 128 accumulators per thread do");
  FP4MOE_CHECK(launch.k_splits != plan::kBalancedKSplit || tile.balances_k(),
               "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile)
                                    << " has no balanced split; warp-specialized tiles outside clusters of up to 32 "
                                       "accumulators per thread on wgmma, 8 on mma.sync, do");
  g.k_split = k_split_plan(a, launch, g.grid);
  // Warp-specialized tiles load every operand through a tensor map (TMA).
  if (tile.warp_specialized) {
    FP4MOE_CHECK(a.permuted_rows > 0, "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile)
                                          << " loads the rows by TMA and needs permuted_rows (P = expert_offsets[E]), got "
                                          << a.permuted_rows);
    FP4MOE_CHECK(!a.gather, "grouped GEMM: tile " << plan::gemm_tile_name(launch.tile)
                                                 << " loads its rows in expert order by TMA; gathered rows must be copied "
                                                    "first (a GEMM step's row copy)");
    g.maps.weights = weight_tensor_map(a.weights, a.num_experts, a.n, a.k, tile);
    g.maps.scales = scale_tensor_map(a.scales, a.num_experts, a.n, a.k, tile);
    const void* x = tile.fp8() ? static_cast<const void*>(a.x_e4m3) : a.x;
    g.maps.x = activation_tensor_map(x, a.permuted_rows, a.k, tile.nt, tile.activations);
    if (tile.narrows_k_loop())  // an item narrower than nt copies its rows in boxes of 8 << j
      for (int j = 0; j < detail::kRowBoxMaps && (8 << j) < tile.nt; ++j)
        g.maps.x_rows[j] = activation_tensor_map(x, a.permuted_rows, a.k, 8 << j, tile.activations);
    if (g.k_split.balanced_split)
      set_balanced_split(g.params, a, launch, g.grid, resident_ctas(dev, launch.tile, g.smem_bytes));
    else
      set_k_splits(g.params, a, launch, g.k_split.splits);
    // (only where the launch may overlap its predecessor: without dependent
    // launch nothing is gained, and isolated launches measured slower with it)
    g.params.offsets_ready_at_launch = a.offsets_ready_at_launch && g.dependent_launch;
  }
  return g;
}

void enqueue_grouped_gemm(const PreparedGemm& g, cudaStream_t stream) {
  launch_dependent_in_clusters(g.kernel, g.dependent_launch, g.grid, g.threads, static_cast<size_t>(g.smem_bytes),
                               static_cast<unsigned>(g.cluster), stream, g.params, g.maps);
  FP4MOE_CHECK_LAUNCH("fp4_grouped_gemm");
}

void rebind_activations(PreparedGemm& g, const __nv_bfloat16* x) {
  FP4MOE_CHECK(x, "grouped GEMM: the activations x are null");
  FP4MOE_CHECK(!plan::kGemmTiles[g.tile].fp8(), "grouped GEMM: tile " << plan::gemm_tile_name(g.tile)
                                                                      << " reads e4m3 rows; bf16 x cannot be bound to it");
  g.params.x = x;
  if (!plan::kGemmTiles[g.tile].warp_specialized) return;
  replace_tensor_map_address(g.maps.x, x);
  for (int j = 0; j < detail::kRowBoxMaps && (8 << j) < plan::kGemmTiles[g.tile].nt; ++j)
    if (plan::kGemmTiles[g.tile].narrows_k_loop()) replace_tensor_map_address(g.maps.x_rows[j], x);
}

}  // namespace fp4moe::kernels
