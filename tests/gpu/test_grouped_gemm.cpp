// The FP4 grouped GEMM against the CPU reference (exact dequantization,
// double accumulation) on fresh random inputs, outputs poisoned before each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>

#include "format/prepare_gemm.hpp"
#include "fp4moe/reference.hpp"
#include "gpu_reference.hpp"
#include "gpu_test_util.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "runtime/device_limits.hpp"
#include "runtime/gemm_step.hpp"
#include "kernels/routing_kernels.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"
#include "reference/detail.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

struct CaseResult {
  double rel_err = 0;
  // the largest relative Frobenius error of one output row (a token-expert pair):
  // a single wrong row of thousands hides in rel_err, not here
  double worst_row_rel_err = 0;
  int64_t unwritten = 0;
  int64_t written_past_stop = 0;  // with stop_at: output elements of rows at or past it that were written
  // with a split-K workspace: the output of a second launch differs somewhere, and arrival counters left nonzero
  bool repeat_differs = false;
  int64_t counters_left = 0;
  // the parts the launch should run with (the device runs 1 where items x parts overflow the slots)
  // and the slot words it wrote (the slots start poisoned)
  int effective_splits = 1;
  int64_t slot_words_written = 0;
};

// How the kernel finds each permuted row's activations.
enum class Rows {
  gathered,    // row p reads X[gather[p]], X has T rows (warp-specialized tiles: copied into expert order, then TMA)
  contiguous,  // row p reads X[p], X has P rows (warp-specialized tiles: nt-row TMA boxes)
};

// A GEMM step of prepared weights and activation rows on the device
// (runtime/gemm_step.hpp); routing, outputs and row count are the caller's.
struct GemmCase {
  ProjectionView w;
  GemmOperands io;
};
GemmCase weights_and_rows(const DeviceBuffer<uint8_t>& w, const DeviceBuffer<uint8_t>& s, const DeviceBuffer<float>& gs,
                          Fp4Format format, int64_t experts, int64_t n, int64_t k, const DeviceBuffer<uint16_t>& x) {
  GemmCase c;
  c.w = {w.get(), s.get(), gs.get(), nullptr, 1, format, n, k, experts};
  c.io.x = reinterpret_cast<const __nv_bfloat16*>(x.get());
  return c;
}

// Above this many multiply-adds the GPU reference checks a case (the CPU's
// took minutes on the prefill shapes); below it the CPU reference in double.
constexpr double kCpuReferenceMacs = 1 << 27;

// E experts of random [n, k] weights quantized in `format`, prepared and on the
// device, made once per (format, shape, count, seed) in a run: the prefill
// tests run every tile on the same large weights (fresh activations each time).
struct ExpertSet {
  std::vector<Fp4Matrix> experts;
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> dequant_scale;
  std::vector<std::unique_ptr<test::DeviceFp4Matrix>> device_experts;  // for the GPU reference
};
const ExpertSet& expert_set(Fp4Format format, int64_t n, int64_t k, int64_t E, uint64_t seed) {
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, uint64_t>, std::unique_ptr<ExpertSet>> sets;
  std::unique_ptr<ExpertSet>& set = sets[{int(format), n, k, E, seed}];
  if (set) return *set;
  set = std::make_unique<ExpertSet>();
  set->experts = test::random_fp4_matrices(format, E, n, k, seed, [](int64_t e) { return 0.02f * float(1 + e % 3); });
  const PreparedExpertWeights prepared = prepare_gemm_weights(set->experts);
  set->weights.upload(prepared.weights);
  set->scales.upload(prepared.scales);
  set->dequant_scale.upload(prepared.dequant_scale);
  for (const Fp4Matrix& m : set->experts) set->device_experts.push_back(std::make_unique<test::DeviceFp4Matrix>(m));
  return *set;
}

// Expert e gets counts[e] rows; each row gathers a random token of X [T, K]
// (weights from weight_seed when given: tests that run every tile on one shape
// share them; the activations and the rows follow seed)
// (or, contiguous, reads row p of X [P, K]).
CaseResult run_case(Fp4Format format, int64_t n, int64_t k, const std::vector<int>& counts, int tile,
                    const plan::SmemBudget& capacity, uint64_t seed, Rows rows_mode = Rows::gathered,
                    int64_t stop_at = -1, int k_splits = -1, bool behind_another = false, uint64_t weight_seed = 0,
                    bool balanced = false) {
  const int64_t E = static_cast<int64_t>(counts.size());
  const int64_t P = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const bool contiguous = rows_mode != Rows::gathered;
  const int64_t T = contiguous ? std::max<int64_t>(1, P) : std::max<int64_t>(1, P / 2 + 3);
  std::mt19937_64 rng(seed);

  const ExpertSet& set = expert_set(format, n, k, E, weight_seed ? weight_seed : seed);
  const std::vector<Fp4Matrix>& experts = set.experts;
  const test::Bf16Matrix x = test::random_bf16(T * k, seed + 7);

  std::vector<int32_t> offsets(size_t(E + 1), 0), gather(size_t(std::max<int64_t>(P, 1)));
  for (int64_t e = 0; e < E; ++e) offsets[size_t(e + 1)] = offsets[size_t(e)] + counts[size_t(e)];
  std::uniform_int_distribution<int32_t> tok(0, int32_t(T - 1));
  for (auto& g : gather) g = tok(rng);
  if (contiguous) std::iota(gather.begin(), gather.end(), 0);

  DeviceBuffer<uint16_t> dx(x.bits), dy(size_t(std::max<int64_t>(P, 1) * n));
  DeviceBuffer<int32_t> doff(offsets), dgather(gather);
  dy.fill_bytes(0xFF);  // bf16 NaN: every element must be overwritten

  GemmCase args = weights_and_rows(set.weights, set.scales, set.dequant_scale, format, E, n, k, dx);
  args.io.gather = contiguous ? nullptr : dgather.get();
  args.io.rows = stop_at >= 0 ? stop_at : P;  // stop_at < P: a caller's P below expert_offsets[E]
  DeviceBuffer<uint16_t> workspace(size_t(std::max<int64_t>(P, 1) * k));
  args.io.row_copy = reinterpret_cast<__nv_bfloat16*>(workspace.get());
  args.io.offsets = doff.get();
  args.io.y = reinterpret_cast<__nv_bfloat16*>(dy.get());
  kernels::GemmLaunch launch;
  launch.tile = tile;
  launch.stages = plan::plan_gemm_tile(tile, n, k, capacity).stages;
  // k_splits >= 0: with a split-K workspace (0: the planner's split, n: n parts; balanced: the balanced split)
  DeviceBuffer<int32_t> split_workspace(k_splits >= 0 ? size_t(plan::kSplitKWorkspaceBytes / 4) : 0);
  CaseResult r;
  if (k_splits >= 0) {
    split_workspace.fill_bytes(0xFF);  // slots poisoned, then the arrival counters zeroed
    FP4MOE_CUDA_CHECK(cudaMemset(split_workspace.get(), 0, size_t(plan::SplitKWorkspace::kCounterBytes)));
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    args.io.split_workspace = split_workspace.get();
    args.io.split_workspace_bytes = int64_t(split_workspace.bytes());
    launch.k_splits = balanced ? plan::kBalancedKSplit : k_splits;
    const plan::GemmTile& t = plan::kGemmTiles[tile];
    int64_t chunks = 0;
    for (int c : counts) chunks += t.chunks_of(c);
    const kernels::PreparedGemm prepared = prepare_gemm_step(args.w, args.io, launch, device_limits(0)).gemm;
    const int planned = prepared.k_split.splits;
    r.effective_splits = chunks * t.n_tiles(n) * planned <= plan::SplitKWorkspace::slots(t, args.io.split_workspace_bytes) ? planned : 1;
    if (balanced) {  // the most parts of one item, as every CTA computes them (plan::BalancedSplit)
      EXPECT_TRUE(prepared.k_split.balanced_split);
      const plan::BalancedSplit b{chunks * t.n_tiles(n), t.k_steps(k), prepared.grid};
      r.effective_splits = 1;
      for (int64_t c = 0; c < prepared.grid; ++c)
        for (int64_t i = b.first_item(c); i < b.end_item(c); ++i)
          r.effective_splits = std::max<int>(r.effective_splits, int(b.segment(c, i).parts));
    }
  }
  // behind_another: each launch reads its schedule and starts loading weights
  // early, queued right behind a launch of the same GEMM into a decoy output
  // (dependent launch: it may start while that one runs)
  args.io.offsets_ready_at_launch = behind_another;
  DeviceBuffer<uint16_t> decoy(behind_another ? dy.size() : 0);
  cudaStream_t stream = nullptr;  // the legacy stream, or with behind_another a stream of its own (freed on any exit)
  if (behind_another) FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(stream, cudaStreamDestroy);
  // (a tile that loads its rows by TMA gets the gathered rows copied in expert order first, as the layer does)
  auto launch_one = [&](const GemmCase& g) { launch_gemm_step(g.w, g.io, launch, stream); };
  auto launch_gemm = [&] {
    if (behind_another) {
      GemmCase first = args;
      first.io.y = reinterpret_cast<__nv_bfloat16*>(decoy.get());
      launch_one(first);
    }
    launch_one(args);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  };
  launch_gemm();
  const std::vector<uint16_t> ybits = dy.download();
  if (k_splits >= 0) {  // again on poisoned outputs: the parts are summed in split order, whoever arrives last
    dy.fill_bytes(0xFF);
    launch_gemm();
    r.repeat_differs = dy.download() != ybits;
    const std::vector<int32_t> ws = split_workspace.download();
    for (int64_t i = 0; i < plan::SplitKWorkspace::kCounters; ++i) r.counters_left += ws[size_t(i)] != 0;
    for (size_t i = size_t(plan::SplitKWorkspace::kCounters); i < ws.size(); ++i) r.slot_words_written += ws[i] != -1;
  }

  // Reference, expert by expert over the gathered rows: the CPU's in double, or
  // for large problems the GPU's (tests/gpu/gpu_reference.hpp, checked against it).
  std::vector<float> ref(size_t(P * n)), got(size_t(P * n));
  if (double(P) * double(n) * double(k) > kCpuReferenceMacs) {
    std::vector<const test::DeviceFp4Matrix*> on_device;
    for (const auto& m : set.device_experts) on_device.push_back(m.get());
    ref = test::grouped_gemm_reference_gpu(on_device, x.values, k, offsets, contiguous ? std::vector<int32_t>{} : gather);
    ref.resize(size_t(P * n));
  } else {
    detail::parallel_for(E, [&](int64_t e) {
      const int64_t rows = counts[size_t(e)];
      if (!rows) return;
      std::vector<float> xr(size_t(rows * k));
      for (int64_t row = 0; row < rows; ++row)
        std::copy_n(x.values.begin() + int64_t(gather[size_t(offsets[size_t(e)] + row)]) * k, k, xr.begin() + row * k);
      expert_gemm_reference(experts[size_t(e)], xr.data(), rows, ref.data() + int64_t(offsets[size_t(e)]) * n);
    });
  }
  for (int64_t i = 0; i < P * n; ++i) got[size_t(i)] = bf16_to_float(ybits[size_t(i)]);
  if (stop_at >= 0) {  // rows before it are checked; rows from it on must keep the poison
    for (int64_t i = stop_at * n; i < P * n; ++i) r.written_past_stop += ybits[size_t(i)] != 0xFFFF;
    got.resize(size_t(stop_at * n));
    ref.resize(size_t(stop_at * n));
  }
  r.rel_err = test::rel_frobenius(got, ref, &r.unwritten);
  for (size_t row = 0; row < got.size() / size_t(n); ++row)
    r.worst_row_rel_err = std::max(
        r.worst_row_rel_err, test::rel_frobenius(got.data() + row * size_t(n), ref.data() + row * size_t(n), size_t(n), nullptr));
  return r;
}

plan::SmemBudget device_capacity() {
  const auto d = list_devices();
  if (d.empty()) return {};
  return {d[0].smem_optin_per_block, d[0].smem_per_sm, d[0].smem_reserved_per_block, d[0].cc};
}

// The counts, and chunks that take each narrowed K loop (3/4 of nt = 24, 48, 96 tokens: 20, 24, 40, 90)
const std::vector<int> kCounts = {0, 1, 2, 3, 7, 8, 15, 16, 31, 33, 64, 65, 128, 20, 24, 40, 90, 100, 250};

// The warp-specialized tiles the planner accepts for [n, k] on this device; on sm_90 at least one must.
std::vector<int> warp_specialized_tiles(int64_t n, int64_t k, const plan::SmemBudget& budget) {
  std::vector<int> tiles;
  for (int t = 0; t < plan::kNumGemmTiles; ++t)
    if (plan::kGemmTiles[t].warp_specialized && plan::plan_gemm_tile(t, n, k, budget).fits) tiles.push_back(t);
  if (budget.has_wgmma()) {
    EXPECT_FALSE(tiles.empty()) << "no warp-specialized tile fits this sm_90 device";
  }
  return tiles;
}

TEST(GpuGroupedGemm, EveryTileEveryTokenCount) {
  FP4MOE_REQUIRE_GPU();
  int ran = 0;
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    const int64_t n = 256 * plan::kGemmTiles[tile].cluster_n;  // a cluster's CTAs take adjacent N tiles
    if (!plan::plan_gemm_tile(tile, n, 2048, device_capacity()).fits) {
      // Refused before launch, with the planner's explanation.
      EXPECT_THROW(run_case(Fp4Format::nvfp4, n, 2048, {1}, tile, device_capacity(), 1), Error);
      continue;
    }
    ++ran;
    for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
      const CaseResult r = run_case(f, n, 2048, kCounts, tile, device_capacity(), 11 + tile, Rows::gathered, -1, -1, false,
                                    /*weight_seed=*/11);
      EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile) << " " << to_string(f);
      EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile) << " " << to_string(f);
      EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile) << " " << to_string(f);
      std::printf("  %-22s %-5s rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), to_string(f), r.rel_err);
    }
    if (plan::kGemmTiles[tile].warp_specialized)
    {
      const CaseResult r = run_case(Fp4Format::nvfp4, n, 2048, kCounts, tile, device_capacity(), 19 + tile, Rows::contiguous,
                                    -1, -1, false, /*weight_seed=*/19);
      EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile) << " contiguous rows";
      EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile) << " contiguous rows";
      EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile) << " contiguous rows";
      std::printf("  %-22s contiguous rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), r.rel_err);
    }
  }
  int bf16_tiles = 0;  // (the e4m3 tiles: test_grouped_gemm_fp8.cpp)
  for (const plan::GemmTile& t : plan::kGemmTiles) bf16_tiles += !t.fp8();
  EXPECT_GE(ran, bf16_tiles - 2) << "the planner rejects most GEMM tiles on this GPU";
}

// N and K in steps of 64 that the tile does not divide (gpt-oss's 2880): the
// warp-specialized bf16 tiles run a partial last K stage (zero-filled past K)
// and a partial last N tile (zero-filled past the expert's rows, not written),
// against the reference; every other tile refuses the shape by name.
TEST(GpuGroupedGemm, PartialLastKStageAndNTile) {
  FP4MOE_REQUIRE_GPU();
  const int64_t n = 448, k = 448;  // 256-row tiles: 2 (the last of 192 rows); 256-k stages: 2 (the last of 192 k)
  int ran = 0;
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    if (plan::kGemmTiles[tile].fp8()) continue;
    if (!plan::kGemmTiles[tile].takes_tails()) {
      EXPECT_FALSE(plan::plan_gemm_tile(tile, n, k, device_capacity()).fits) << plan::gemm_tile_name(tile);
      continue;
    }
    if (!plan::plan_gemm_tile(tile, n, k, device_capacity()).fits) continue;  // (not on this GPU)
    ++ran;
    for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
      const CaseResult r = run_case(f, n, k, kCounts, tile, device_capacity(), 31 + tile, Rows::gathered, -1, -1, false,
                                    /*weight_seed=*/31);
      EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile) << " " << to_string(f);
      EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile) << " " << to_string(f);
      EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile) << " " << to_string(f);
      std::printf("  %-34s %-5s N %lld K %lld rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), to_string(f),
                  (long long)n, (long long)k, r.rel_err);
    }
  }
  EXPECT_GT(ran, 10);
  // gpt-oss's own shape on the prefill tile it ranks first
  const int wide = plan::rank_gemm_tiles(2880, 2880, device_capacity(), 64.0, 32, 132);
  ASSERT_GE(wide, 0);
  const CaseResult r = run_case(Fp4Format::mxfp4, 2880, 2880, {64, 0, 70, 129, 1}, wide, device_capacity(), 37);
  EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(wide);
  EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(wide);
  EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(wide);
  std::printf("  %-34s N 2880 K 2880 rel err %.3e\n", plan::gemm_tile_name(wide).c_str(), r.rel_err);
}

// More experts than one pass of the schedule's prefix sum (256 per pass, 8 per lane):
// the carry between passes, lanes past E, and runs of empty experts. One tile of each
// kernel (all-warps, warp-specialized mma.sync, warpgroup MMA) where it fits.
TEST(GpuGroupedGemm, ScheduleOfMoreExpertsThanOnePrefixPass) {
  FP4MOE_REQUIRE_GPU();
  std::mt19937 rng(2026);
  std::vector<int> counts(601);
  for (size_t e = 0; e < counts.size(); ++e) counts[e] = (e / 40) % 3 == 1 ? 0 : int(rng() % 4);  // runs of 40 empty ones
  counts[255] = 9, counts[256] = 17, counts[511] = 33, counts[600] = 70;  // around the pass boundaries, and the last
  int ran = 0;
  for (const int kind : {0, 1, 2}) {  // the first fitting tile of each kernel
    int tile = -1;
    for (int i = 0; i < plan::kNumGemmTiles && tile < 0; ++i) {
      const plan::GemmTile& t = plan::kGemmTiles[i];
      const int k = !t.warp_specialized ? 0 : t.wgmma ? 2 : 1;
      if (k == kind && t.cluster_n == 1 && plan::plan_gemm_tile(i, 256, 2048, device_capacity()).fits) tile = i;
    }
    if (tile < 0) continue;  // (warp-specialized tiles: sm_90 only)
    ++ran;
    const CaseResult r = run_case(Fp4Format::nvfp4, 256, 2048, counts, tile, device_capacity(), 77 + tile);
    EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile);
    EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile);
    EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile);
    std::printf("  %-22s %zu experts rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), counts.size(), r.rel_err);
  }
  EXPECT_GE(ran, 1);
}

TEST(GpuGroupedGemm, ModelShapes) {
  FP4MOE_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{2048, 6144}, {4096, 6144}, {6144, 2048},
                                                           {7168, 2048}, {256, 7168}, {7168, 7168}};
  const std::vector<int> counts = {1, 16, 0, 33, 64};
  for (auto [n, k] : shapes) {
    const int tile = plan::rank_gemm_tiles(n, k, device_capacity(), 20.0, 4, 132);
    ASSERT_GE(tile, 0);
    const CaseResult r = run_case(Fp4Format::nvfp4, n, k, counts, tile, device_capacity(), uint64_t(n + k));
    EXPECT_EQ(r.unwritten, 0) << n << "x" << k;
    EXPECT_LT(r.rel_err, 1e-2) << n << "x" << k;
    EXPECT_LT(r.worst_row_rel_err, 1e-2) << n << "x" << k;
    std::printf("  N %5lld K %5lld %-22s rel err %.3e\n", (long long)n, (long long)k, plan::gemm_tile_name(tile).c_str(), r.rel_err);
  }
}

TEST(GpuGroupedGemm, Sm120PlanOnThisGpu) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget kSm120 = plan::budget_of(plan::find_arch("sm_120"));
  int ran = 0;
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    const plan::SmemPlan p = plan::plan_gemm_tile(tile, 2048, 2048, kSm120);
    if (!p.fits) continue;
    ASSERT_LE(p.smem_bytes, kSm120.optin_per_block);
    const CaseResult r = run_case(Fp4Format::nvfp4, 2048, 2048, {3, 0, 64, 17, 1}, tile, kSm120, 99 + tile);
    EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile);
    EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile);
    EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile);
    std::printf("  sm_120 plan %-22s %d stages %lld bytes rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), p.stages,
                (long long)p.smem_bytes, r.rel_err);
    ++ran;
  }
  EXPECT_GE(ran, 1) << "no GEMM tile fits the sm_120 budget";
}

TEST(GpuGroupedGemm, SkewedRoutingManyExperts) {
  FP4MOE_REQUIRE_GPU();
  // Zipf-like: a few hot experts, a long tail of empty ones.
  std::vector<int> counts(64);
  for (int e = 0; e < 64; ++e) counts[size_t(e)] = e < 40 ? int(150 / (e + 1)) : 0;
  const int tile = plan::rank_gemm_tiles(512, 2048, device_capacity(), 8.0, 40, 132);
  const CaseResult r = run_case(Fp4Format::nvfp4, 512, 2048, counts, tile, device_capacity(), 5);
  EXPECT_EQ(r.unwritten, 0);
  EXPECT_LT(r.rel_err, 1e-2);
  EXPECT_LT(r.worst_row_rel_err, 1e-2);
}

TEST(GpuGroupedGemm, RejectsWhatThePlannerRejects) {
  FP4MOE_REQUIRE_GPU();
  GemmCase args;  // null pointers: refused before any launch
  kernels::GemmLaunch launch;
  args.w.experts = 1, args.w.n = 256, args.w.k = 2048;
  EXPECT_THROW(launch_gemm_step(args.w, args.io, launch, nullptr), Error);
  launch.tile = 99;
  EXPECT_THROW(launch_gemm_step(args.w, args.io, launch, nullptr), Error);
  // A negative row count is named before anything is launched (the pointers are never dereferenced).
  alignas(16) static uint8_t dummy[16];
  args.w.weights = args.w.scales = dummy;
  args.w.dequant_scale = reinterpret_cast<const float*>(dummy);
  args.io.x = reinterpret_cast<const __nv_bfloat16*>(dummy);
  args.io.offsets = reinterpret_cast<const int32_t*>(dummy);
  args.io.y = reinterpret_cast<__nv_bfloat16*>(dummy);
  args.io.rows = -1;
  launch.tile = 0;
  try {
    launch_gemm_step(args.w, args.io, launch, nullptr);
    ADD_FAILURE() << "permuted_rows = -1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("permuted_rows = -1"), std::string::npos) << e.what();
  }
  // A warp-specialized tile needs the row count for its tensor map, and a workspace for gathered rows.
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    if (!plan::kGemmTiles[tile].warp_specialized || !plan::plan_gemm_tile(tile, 256, 2048, device_capacity()).fits) continue;
    args.io.rows = 0;
    launch.tile = tile;
    try {
      launch_gemm_step(args.w, args.io, launch, nullptr);
      ADD_FAILURE() << "permuted_rows = 0 was accepted by " << plan::gemm_tile_name(tile);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs permuted_rows"), std::string::npos) << e.what();
    }
    args.io.rows = 1;
    args.io.gather = reinterpret_cast<const int32_t*>(dummy);
    try {
      launch_gemm_step(args.w, args.io, launch, nullptr);
      ADD_FAILURE() << "gathered rows without a row copy were accepted by " << plan::gemm_tile_name(tile)
                    << ", which loads them by TMA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("copied in expert order"), std::string::npos) << e.what();
    }
    break;
  }
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

// The warpgroup-MMA tiles (sm_90a) at prefill sizes: 65..4096 tokens per
// expert, ragged counts (129..144 and 257..272: a chunk of 128 with up to 16
// more rows on the tile whose last chunk takes them), both formats, and a GLM-5 shape.
TEST(GpuGroupedGemm, WarpgroupTilesAtPrefillSizes) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  int ran = 0;
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    if (!plan::kGemmTiles[tile].wgmma) continue;
    const int64_t n0 = 256 * plan::kGemmTiles[tile].cluster_n;  // (a cluster's CTAs take adjacent N tiles)
    const plan::SmemPlan p = plan::plan_gemm_tile(tile, n0, 2048, budget);
    if (!p.fits) {
      std::printf("  %s not run here: %s\n", p.config.c_str(), p.explanation.c_str());
      continue;
    }
    ++ran;
    const plan::GemmTile& t = plan::kGemmTiles[tile];
    // MXFP4 and the large shapes on the tiles meant for these sizes (64+ tokens), to keep the test short
    const bool prefill_tile = t.nt >= 64;
    for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
      if (f == Fp4Format::mxfp4 && !prefill_tile) continue;
      const CaseResult r = run_case(f, n0, 2048, {65, 0, 100, 128, 129, 255, 256, 1000, 4096, 3, 168, 144, 145, 272, 273, 140, 280, 281}, tile, budget, 41 + tile,
                                    Rows::gathered, -1, -1, false, /*weight_seed=*/41);
      EXPECT_EQ(r.unwritten, 0) << p.config;
      EXPECT_LT(r.rel_err, 1e-2) << p.config << " " << to_string(f);
      EXPECT_LT(r.worst_row_rel_err, 1e-2) << p.config << " " << to_string(f);
      std::printf("  %-30s %-5s rel err %.3e\n", p.config.c_str(), to_string(f), r.rel_err);
    }
    if (!prefill_tile) continue;
    const CaseResult big = run_case(Fp4Format::nvfp4, 4096, 6144, {300, 0, 129}, tile, budget, 77 + tile, Rows::gathered,
                                    -1, -1, false, /*weight_seed=*/77);
    EXPECT_EQ(big.unwritten, 0) << p.config;
    EXPECT_LT(big.rel_err, 1e-2) << p.config << " N 4096 K 6144";
    EXPECT_LT(big.worst_row_rel_err, 1e-2) << p.config << " N 4096 K 6144";
    std::printf("  %-30s N 4096 K 6144 rel err %.3e\n", p.config.c_str(), big.rel_err);
    if (plan::kGemmTiles[tile].warp_specialized) {
      const CaseResult tma = run_case(Fp4Format::nvfp4, 6144, 2048, {257, 0, 1024, 65}, tile, budget, 78 + tile,
                                      Rows::contiguous, -1, -1, false, /*weight_seed=*/78);
      EXPECT_EQ(tma.unwritten, 0) << p.config;
      EXPECT_LT(tma.rel_err, 1e-2) << p.config << " N 6144 K 2048, contiguous rows";
      EXPECT_LT(tma.worst_row_rel_err, 1e-2) << p.config << " N 6144 K 2048, contiguous rows";
      std::printf("  %-30s N 6144 K 2048 contiguous rows rel err %.3e\n", p.config.c_str(), tma.rel_err);
    }
  }
  if (budget.has_wgmma()) {
    EXPECT_GE(ran, 1) << "no warpgroup tile fits this sm_90 device";
  }
}

// The prefill tiles (128+ tokens, warp-specialized) at the other model shapes:
// K = 7168, N = 2048 and 7168, ragged counts from 65 rows. One shape per tile,
// in turn, so every shape runs on some tile; tiles in clusters take N = K =
// 7168 (28 N tiles, 14 clusters).
TEST(GpuGroupedGemm, PrefillTilesAtTheOtherModelShapes) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  const std::pair<int64_t, int64_t> shapes[] = {{7168, 7168}, {2048, 7168}, {7168, 2048}};
  int ran = 0, prefill_tiles = 0;
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    const plan::GemmTile& t = plan::kGemmTiles[tile];
    // (e4m3 tiles run at their own shapes in test_grouped_gemm_fp8.cpp)
    if (!t.wgmma || !t.warp_specialized || t.nt < 128 || t.fp8()) continue;
    {
      const auto [n, k] = t.cluster_n > 1 ? shapes[0] : shapes[prefill_tiles % 3];
      ++prefill_tiles;
      const plan::SmemPlan p = plan::plan_gemm_tile(tile, n, k, budget);
      if (!p.fits) continue;
      ++ran;
      const CaseResult r = run_case(Fp4Format::nvfp4, n, k, {65, 0, 130, 281}, tile, budget, 5 + tile, Rows::contiguous, -1,
                                    -1, false, /*weight_seed=*/uint64_t(500 + n + k));
      EXPECT_EQ(r.unwritten, 0) << p.config << " N " << n << " K " << k;
      EXPECT_LT(r.rel_err, 1e-2) << p.config << " N " << n << " K " << k;
      EXPECT_LT(r.worst_row_rel_err, 1e-2) << p.config << " N " << n << " K " << k;
      std::printf("  %-38s N %5ld K %5ld rel err %.3e\n", p.config.c_str(), long(n), long(k), r.rel_err);
    }
  }
  if (budget.has_wgmma()) {
    EXPECT_EQ(ran, prefill_tiles) << "every prefill tile should fit its shape on sm_90";
    EXPECT_GE(ran, 3) << "every shape should run";
  }
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

// Small enough for compute-sanitizer (memcheck, racecheck) on the warpgroup and
// warp-specialized paths: two N tiles even for bm = 256, and fewer rows in x
// than one activation box holds.
TEST(GpuGroupedGemm, WarpgroupTilesSmallCase) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    if (!plan::kGemmTiles[tile].swizzled_activations() || !plan::plan_gemm_tile(tile, 512, 256, budget).fits) continue;
    for (Rows m : {Rows::gathered, Rows::contiguous}) {
      if (m != Rows::gathered && !plan::kGemmTiles[tile].warp_specialized) continue;
      for (const std::vector<int>& counts : {std::vector<int>{65, 0, 3, 130, 270, 281}, std::vector<int>{3, 0, 2}}) {
        const CaseResult r = run_case(Fp4Format::nvfp4, 512, 256, counts, tile, budget, 5 + tile, m);
        EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile) << " rows " << int(m) << ", " << counts[0] << " rows first";
        EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile) << " rows " << int(m) << ", " << counts[0] << " rows first";
        EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile) << " rows " << int(m) << ", " << counts[0] << " rows first";
      }
    }
  }
}

// A caller whose P (permuted_rows) is below expert_offsets[E]: warp-specialized
// tiles compute the rows before P and read or write nothing from P on.
TEST(GpuGroupedGemm, WarpSpecializedTilesStopAtPermutedRows) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (int tile : warp_specialized_tiles(512, 256, budget)) {
    for (Rows m : {Rows::gathered, Rows::contiguous}) {
      const CaseResult r = run_case(Fp4Format::nvfp4, 512, 256, {65, 0, 3, 130}, tile, budget, 31 + tile, m, 100);
      EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile) << " rows " << int(m);
      EXPECT_LT(r.rel_err, 1e-2) << plan::gemm_tile_name(tile) << " rows " << int(m);
      EXPECT_LT(r.worst_row_rel_err, 1e-2) << plan::gemm_tile_name(tile) << " rows " << int(m);
      EXPECT_EQ(r.written_past_stop, 0) << plan::gemm_tile_name(tile) << " rows " << int(m);
    }
  }
}

// A split-K case: every element written, within the tolerance, a second launch
// bitwise the same, every arrival counter back at zero, and slots written
// exactly when the launch split (so a silent fallback to one part shows).
void expect_split_sums_right(const CaseResult& r, const std::string& what) {
  EXPECT_EQ(r.unwritten, 0) << what;
  EXPECT_LT(r.rel_err, 1e-2) << what;
  EXPECT_LT(r.worst_row_rel_err, 1e-2) << what;
  EXPECT_FALSE(r.repeat_differs) << what;
  EXPECT_EQ(r.counters_left, 0) << what;
  EXPECT_EQ(r.slot_words_written > 0, r.effective_splits > 1) << what << ": " << r.slot_words_written
                                                              << " slot words written, " << r.effective_splits << " parts";
}

// Split-K: every warp-specialized tile with its items split 2, 3 and 8 ways
// and as the planner splits them (one row per expert: few items, so it does),
// against the reference; a second launch is bitwise the same (the parts are
// summed in split order) and leaves every arrival counter at zero.
TEST(GpuGroupedGemm, SplitKPartsSumInSplitOrder) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (int tile : warp_specialized_tiles(512, 2048, budget)) {
    for (int splits : {0, 2, 3, 8}) {
      if (splits > 1 && !plan::kGemmTiles[tile].splits_k()) continue;  // refused (SplitKRejectsWhatItCannotRun)
      for (const std::vector<int>& counts : {std::vector<int>{65, 0, 3, 130}, std::vector<int>{1, 1, 0, 1, 1, 1, 1, 1, 1}}) {
        const Rows m = splits == 3 ? Rows::contiguous : Rows::gathered;
        const std::string what = plan::gemm_tile_name(tile) + " k_splits " + std::to_string(splits) + ", " +
                                 std::to_string(counts.size()) + " experts";
        expect_split_sums_right(run_case(Fp4Format::nvfp4, 512, 2048, counts, tile, budget, 61 + tile, m, -1, splits), what);
      }
    }
  }
}

// The balanced split (plan/split_k.hpp): every tile that balances, on few
// and many items, K of one to eight stages (one: fewer units than CTAs, so
// most CTAs take none), gathered and contiguous rows, alone and queued behind
// another launch that starts early: against the reference, a second launch
// bitwise the same, every counter back at zero, slots written exactly where an
// item is cut between CTAs.
TEST(GpuGroupedGemm, BalancedSplitSumsThePartsInOrder) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  int ran = 0;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{512, 2048}, {256, 256}, {2880, 2880}}) {
    for (int tile : warp_specialized_tiles(n, k, budget)) {
      if (!plan::kGemmTiles[tile].balances_k()) continue;
      for (const std::vector<int>& counts :
           {std::vector<int>{65, 0, 3, 130}, std::vector<int>{1, 1, 0, 1, 1, 1, 1, 1, 1}, std::vector<int>{1}}) {
        for (bool behind_another : {false, true}) {
          const Rows m = behind_another ? Rows::contiguous : Rows::gathered;
          const std::string what = plan::gemm_tile_name(tile) + " N " + std::to_string(n) + " K " + std::to_string(k) +
                                   ", " + std::to_string(counts.size()) + " experts" + (behind_another ? ", behind another" : "");
          expect_split_sums_right(
              run_case(Fp4Format::mxfp4, n, k, counts, tile, budget, 131 + tile, m, -1, 0, behind_another, 77, true), what);
          ++ran;
        }
      }
    }
  }
  if (budget.has_wgmma()) {
    EXPECT_GT(ran, 0) << "no tile balances";
  }
}

// A tile that does not balance refuses the balanced split by name.
TEST(GpuGroupedGemm, BalancedSplitRefusedWhereTheTileDoesNotBalance) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    if (plan::kGemmTiles[tile].balances_k() || !plan::plan_gemm_tile(tile, 512, 2048, budget).fits) continue;
    EXPECT_THROW(run_case(Fp4Format::nvfp4, 512, 2048, {3, 1}, tile, budget, 3, Rows::gathered, -1, 0, false, 0, true),
                 Error)
        << plan::gemm_tile_name(tile);
  }
}

// Small enough for compute-sanitizer: the split hand-over (slots, fence,
// counter, the last CTA's sum) and the balanced split's on one tile of each
// consumer kind, alone and queued behind another launch, starting early
// (offsets_ready_at_launch).
TEST(GpuGroupedGemm, SplitKSmallCase) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (const char* name : {"bm128_nt64_bk128_mt1_c1_ws", "bm128_nt8_bk256_mt1_c2_ws_sync"}) {
    int tile = -1;
    for (int t = 0; t < plan::kNumGemmTiles; ++t)
      if (plan::gemm_tile_name(t) == name) tile = t;
    ASSERT_GE(tile, 0) << name;
    if (!plan::plan_gemm_tile(tile, 256, 512, budget).fits) continue;
    for (bool behind_another : {false, true}) {
      const CaseResult r = run_case(Fp4Format::nvfp4, 256, 512, {3, 0, 70}, tile, budget, 8, Rows::gathered, -1, 2, behind_another);
      expect_split_sums_right(r, name);
      EXPECT_EQ(r.effective_splits, 2) << name;
      // the balanced split's hand-over (a later part's slot, the counter, part 0's wait and sum)
      const CaseResult b =
          run_case(Fp4Format::nvfp4, 256, 512, {3, 0, 70}, tile, budget, 8, Rows::gathered, -1, 0, behind_another, 0, true);
      expect_split_sums_right(b, std::string(name) + " balanced");
    }
  }
}

// offsets_ready_at_launch: the schedule is read and the first stages' weights
// requested before the previous launch has finished (dependent launch); with
// and without split-K, gathered and contiguous rows, ragged and one-row experts.
TEST(GpuGroupedGemm, EarlyStartBehindAnotherLaunch) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (int tile : warp_specialized_tiles(512, 2048, budget)) {
    for (int splits : {-1, 0, 3}) {
      if (splits > 1 && !plan::kGemmTiles[tile].splits_k()) continue;
      for (const std::vector<int>& counts : {std::vector<int>{65, 0, 3, 130}, std::vector<int>{1, 1, 0, 1, 1, 1, 1, 1, 1}}) {
        const Rows m = splits == 0 ? Rows::contiguous : Rows::gathered;
        const std::string what = plan::gemm_tile_name(tile) + " k_splits " + std::to_string(splits) + ", " +
                                 std::to_string(counts.size()) + " experts";
        const CaseResult r = run_case(Fp4Format::nvfp4, 512, 2048, counts, tile, budget, 91 + tile, m, -1, splits, true);
        EXPECT_LT(r.rel_err, 1e-2) << what;
        EXPECT_LT(r.worst_row_rel_err, 1e-2) << what;
        EXPECT_EQ(r.unwritten, 0) << what;
        if (splits >= 0) expect_split_sums_right(r, what);
      }
    }
  }
}

// The layer's hazard for early start, built on purpose: permute writes the
// offsets, a GEMM on other offsets follows, and the GEMM under test (early
// start, rows in order, as the layer's GEMM2) reads permute's offsets before
// it waits for that GEMM. The offsets start zeroed (no rows): a read from
// before permute completed would leave the output poisoned.
TEST(GpuGroupedGemm, EarlyStartSeesOffsetsWrittenTwoLaunchesBack) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  const int64_t n = 256, k = 512, E = 8, T = 48, top_k = 2, P = T * top_k;
  std::vector<Fp4Matrix> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const test::Bf16Matrix w = test::random_bf16(n * k, 500 + e, 0.02f);
    experts[size_t(e)] = quantize(Fp4Format::nvfp4, w.values.data(), n, k);
  }
  const PreparedExpertWeights prepared = prepare_gemm_weights(experts);
  const test::Bf16Matrix x = test::random_bf16(P * k, 77);  // rows already in expert order
  std::mt19937_64 rng(9);
  std::vector<int32_t> ids(static_cast<size_t>(P));
  std::vector<int32_t> counts(size_t(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t a = int32_t(rng() % E), b = int32_t((a + 1 + rng() % (E - 1)) % E);  // two distinct experts
    ids[size_t(t * top_k)] = a, ids[size_t(t * top_k + 1)] = b;
    ++counts[size_t(a)], ++counts[size_t(b)];
  }
  std::vector<int32_t> decoy_offsets(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) decoy_offsets[size_t(e + 1)] = decoy_offsets[size_t(e)] + int32_t(P / E);

  DeviceBuffer<uint8_t> dw(prepared.weights), ds(prepared.scales);
  DeviceBuffer<float> dgs(prepared.dequant_scale);
  DeviceBuffer<uint16_t> dx(x.bits), dy(size_t(P * n)), decoy(size_t(P * n));
  DeviceBuffer<int32_t> dids(ids), doff(static_cast<size_t>(E + 1)), ddecoy_off(decoy_offsets), pair(static_cast<size_t>(P)),
      token(static_cast<size_t>(P)), pos(static_cast<size_t>(P)), status(static_cast<size_t>(1));
  cudaStream_t stream = nullptr;
  FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(stream, cudaStreamDestroy);

  for (int tile : warp_specialized_tiles(n, k, budget)) {
    const std::string name = plan::gemm_tile_name(tile);
    dy.fill_bytes(0xFF);
    doff.fill_bytes(0);
    status.fill_bytes(0);
    kernels::PermuteArgs pa;
    pa.topk_ids = dids.get();
    pa.tokens = T;
    pa.experts = int(E);
    pa.top_k = int(top_k);
    pa.expert_offsets = doff.get();
    pa.permuted_pair = pair.get();
    pa.permuted_token = token.get();
    pa.pair_pos = pos.get();
    pa.status = status.get();
    GemmCase g = weights_and_rows(dw, ds, dgs, Fp4Format::nvfp4, E, n, k, dx);
    g.io.rows = P;
    g.io.offsets_ready_at_launch = true;
    GemmCase first = g;
    first.io.offsets = ddecoy_off.get();
    first.io.y = reinterpret_cast<__nv_bfloat16*>(decoy.get());
    g.io.offsets = doff.get();
    g.io.y = reinterpret_cast<__nv_bfloat16*>(dy.get());
    const kernels::GemmLaunch launch{.tile = tile, .stages = plan::plan_gemm_tile(tile, n, k, budget).stages, .k_splits = 1};
    kernels::launch_permute(pa, stream);
    launch_gemm_step(first.w, first.io, launch, stream);
    launch_gemm_step(g.w, g.io, launch, stream);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));

    const std::vector<int32_t> got_off = doff.download();
    std::vector<float> ref(size_t(P * n)), got(size_t(P * n));
    const std::vector<uint16_t> ybits = dy.download();
    for (int64_t e = 0; e < E; ++e) {
      ASSERT_EQ(got_off[size_t(e + 1)] - got_off[size_t(e)], counts[size_t(e)]) << name << " expert " << e;
      const int64_t r0 = got_off[size_t(e)], rows = counts[size_t(e)];
      if (rows) expert_gemm_reference(experts[size_t(e)], x.values.data() + r0 * k, rows, ref.data() + r0 * n);
    }
    for (int64_t i = 0; i < P * n; ++i) got[size_t(i)] = bf16_to_float(ybits[size_t(i)]);
    int64_t unwritten = 0;
    const double err = test::rel_frobenius(got, ref, &unwritten);
    EXPECT_EQ(unwritten, 0) << name;
    EXPECT_LT(err, 1e-2) << name;
  }
}

// Split-K is for warp-specialized tiles, within the K stages and the workspace: anything else is named.
TEST(GpuGroupedGemm, SplitKRejectsWhatItCannotRun) {
  FP4MOE_REQUIRE_GPU();
  const plan::SmemBudget budget = device_capacity();
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    if (!plan::plan_gemm_tile(tile, 512, 512, budget).fits) continue;
    const std::string name = plan::gemm_tile_name(tile);
    EXPECT_THROW(run_case(Fp4Format::nvfp4, 512, 512, {3, 1}, tile, budget, 3, Rows::gathered, -1, plan::kMaxKSplits + 1),
                 Error)
        << name;
    if (!plan::kGemmTiles[tile].splits_k()) {
      EXPECT_THROW(run_case(Fp4Format::nvfp4, 512, 512, {3, 1}, tile, budget, 3, Rows::gathered, -1, 2), Error) << name;
      continue;
    }
    const int stages = int(512 / plan::kGemmTiles[tile].bk);  // 2 or 4: more parts than K stages
    EXPECT_THROW(run_case(Fp4Format::nvfp4, 512, 512, {3, 1}, tile, budget, 3, Rows::gathered, -1, stages + 1), Error) << name;
  }
}

}  // namespace
}  // namespace fp4moe
