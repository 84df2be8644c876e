// The FP8 (W4A8) grouped GEMM against the CPU reference of the identical
// arithmetic: the activations quantized to e4m3 per row by the host's
// quantize_rows_e4m3 (which the device row copy matches bitwise), the weights
// exact (the MXFP4 fold into e4m3 is exact), the sum in double. The device's
// rows come through its own FP8 row copy, gathered into expert order. Fresh
// random inputs, outputs poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "format/fp8_rows.hpp"
#include "format/prepare_fp8.hpp"
#include "format/prepare_gemm.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "gpu_test_util.hpp"
#include "kernels/grouped_gemm_launch.hpp"
#include "kernels/quantize_rows_fp8.hpp"
#include "plan/gemm_plan.hpp"
#include "reference/detail.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/device_limits.hpp"

namespace fp4moe {
namespace {

struct Fp8Result {
  double rel_err = 0, worst_row_rel_err = 0;
  int64_t unwritten = 0;
};

struct Fp8Experts {
  Fp4Format format = Fp4Format::mxfp4;
  std::vector<Fp4Matrix> experts;
  PreparedFp8Weights prepared;
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> row_scale;
};
// NVFP4: the rounded fold (opted in).
Fp8Experts fp8_experts(int64_t E, int64_t n, int64_t k, uint64_t seed, Fp4Format format = Fp4Format::mxfp4) {
  Fp8Experts s;
  s.format = format;
  s.experts = test::random_fp4_matrices(format, E, n, k, seed, [](int64_t e) { return 0.02f * float(1 + e % 3); });
  s.prepared = prepare_fp8_gemm_weights(prepare_gemm_weights(s.experts), format == Fp4Format::nvfp4);
  s.weights.upload(s.prepared.weights);
  s.scales.upload(s.prepared.scales);
  s.row_scale.upload(s.prepared.row_scale);
  return s;
}

// The biased instance's epilogues: per-feature biases [E][n] with the store,
// or with gpt-oss's clamped SwiGLU (rows alternate 16 gate, 16 up).
struct Fp8Bias {
  kernels::GemmEpilogue epilogue = kernels::GemmEpilogue::store;
  std::vector<float> bias;  // empty: none
};
constexpr float kLimit = 7.0f, kAlpha = 1.702f;
double clamped_swiglu(double g, double u) {
  g = std::min(g, double(kLimit));
  u = std::clamp(u, -double(kLimit), double(kLimit));
  return g / (1.0 + std::exp(-double(kAlpha) * g)) * (u + 1.0);
}

// Biases [E][n] of a few units (the products are O(1): some cross the clamp).
std::vector<float> random_biases(int64_t count, uint64_t seed) { return test::random_bf16(count, seed, 4.f).values; }

// Expert e gets counts[e] rows, each a random token of X [T, K].
Fp8Result run_fp8_case(const Fp8Experts& w, int64_t n, int64_t k, const std::vector<int>& counts, int tile, uint64_t seed,
                       int k_splits = 1, int promotion_stages = 0, bool outliers = true, const Fp8Bias& bias = {}) {
  const bool swiglu = bias.epilogue == kernels::GemmEpilogue::swiglu;
  const int64_t out_cols = swiglu ? n / 2 : n;
  const int64_t E = int64_t(counts.size());
  const int64_t P = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t T = std::max<int64_t>(1, P / 2 + 3);
  test::Bf16Matrix x = test::random_bf16(T * k, seed + 7);
  for (int64_t t = 0; t < T && outliers; ++t)  // outlier channels, as hidden states have
    for (int64_t c = 5; c < k; c += 211) x.values[size_t(t * k + c)] *= 20.f, x.bits[size_t(t * k + c)] = bf16_from_float(x.values[size_t(t * k + c)]);
  std::vector<int32_t> offsets(size_t(E + 1), 0), gather(size_t(std::max<int64_t>(P, 1)));
  for (int64_t e = 0; e < E; ++e) offsets[size_t(e + 1)] = offsets[size_t(e)] + counts[size_t(e)];
  std::mt19937_64 rng(seed);
  for (auto& g : gather) g = int32_t(rng() % uint64_t(T));

  DeviceBuffer<uint16_t> dx(x.bits), dy(size_t(std::max<int64_t>(P, 1) * out_cols));
  DeviceBuffer<float> dbias(bias.bias);
  DeviceBuffer<int32_t> doff(offsets), dgather(gather);
  DeviceBuffer<uint8_t> codes(size_t(std::max<int64_t>(P, 1) * k));
  DeviceBuffer<float> xscale(size_t(std::max<int64_t>(P, 1)));
  const bool splits = k_splits > 1 || k_splits == plan::kBalancedKSplit;
  DeviceBuffer<int32_t> split_workspace(splits ? size_t(plan::kSplitKWorkspaceBytes / 4) : 0);
  if (splits) split_workspace.fill_bytes(0);
  dy.fill_bytes(0xFF);
  codes.fill_bytes(0xFF);
  kernels::QuantizeRowsFp8Args q;
  q.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  q.rows = dgather.get();
  q.count = P, q.cols = k, q.group = 0;
  q.codes = codes.get(), q.scales = xscale.get();
  kernels::launch_quantize_rows_fp8(q, nullptr);

  kernels::GroupedGemmArgs a;
  a.weights = w.weights.get(), a.scales = w.scales.get(), a.weight_row_scale = w.row_scale.get();
  a.format = w.format;
  a.num_experts = E, a.n = n, a.k = k;
  a.x_e4m3 = codes.get(), a.x_scale = xscale.get();
  a.permuted_rows = P;
  a.expert_offsets = doff.get();
  a.y = reinterpret_cast<__nv_bfloat16*>(dy.get());
  if (splits) a.split_workspace = split_workspace.get(), a.split_workspace_bytes = int64_t(split_workspace.bytes());
  a.fp8_promotion_stages = promotion_stages;
  if (!bias.bias.empty()) {
    a.bias = dbias.get();
    a.epilogue = bias.epilogue;
    if (swiglu) a.activation = kernels::GemmActivation::clamped_swiglu, a.swiglu_limit = kLimit, a.swiglu_alpha = kAlpha;
  }
  kernels::GemmLaunch launch;
  launch.tile = tile;
  launch.k_splits = k_splits;
  const kernels::PreparedGemm g = kernels::prepare_grouped_gemm(a, launch, device_limits(0));
  kernels::enqueue_grouped_gemm(g, nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> ybits = dy.download();

  // the host's e4m3 rows of the same gathered values, and the exact sum in double
  std::vector<float> gathered(size_t(P * k));
  for (int64_t p = 0; p < P; ++p)
    std::copy_n(x.values.begin() + int64_t(gather[size_t(p)]) * k, k, gathered.begin() + p * k);
  const Fp8Rows qx = quantize_rows_e4m3(gathered.data(), P, k, 0);
  std::vector<double> z(size_t(P * n));  // products plus biases, in double
  detail::parallel_for(E, [&](int64_t e) {
    const Fp4Matrix& m = w.experts[size_t(e)];
    std::vector<double> wrow(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      // the weights as the fold gives them (NVFP4: rounded to e4m3)
      for (int64_t c = 0; c < k; ++c)
        wrow[size_t(c)] = fp8_folded_weight(m.code(r, c), m.scale(r, c / m.block_size())) * double(m.weight_scale_2);
      const double b = bias.bias.empty() ? 0.0 : double(bias.bias[size_t(e * n + r)]);
      for (int64_t p = offsets[size_t(e)]; p < offsets[size_t(e + 1)]; ++p) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += double(e4m3_decode(qx.codes[size_t(p * k + c)])) * wrow[size_t(c)];
        z[size_t(p * n + r)] = acc * double(qx.scales[size_t(p)]) + b;
      }
    }
  });
  std::vector<float> ref(size_t(P * out_cols)), got(size_t(P * out_cols));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < out_cols; ++j) {
      const int64_t gate = (j / 16) * 32 + j % 16;  // swiglu: output j's gate row; its up row is gate + 16
      ref[size_t(p * out_cols + j)] =
          float(swiglu ? clamped_swiglu(z[size_t(p * n + gate)], z[size_t(p * n + gate + 16)]) : z[size_t(p * n + j)]);
    }
  for (int64_t i = 0; i < P * out_cols; ++i) got[size_t(i)] = bf16_to_float(ybits[size_t(i)]);
  Fp8Result r;
  r.rel_err = test::rel_frobenius(got, ref, &r.unwritten);
  for (int64_t p = 0; p < P; ++p)
    r.worst_row_rel_err = std::max(r.worst_row_rel_err, test::rel_frobenius(got.data() + p * out_cols, ref.data() + p * out_cols,
                                                                            size_t(out_cols), nullptr));
  return r;
}

plan::SmemBudget device_capacity() { return device_limits(0).budget; }

std::vector<int> fp8_tiles() {
  std::vector<int> t;
  for (int i = 0; i < plan::kNumGemmTiles; ++i)
    if (plan::kGemmTiles[i].fp8()) t.push_back(i);
  return t;
}

// The token counts of the bf16 test, and chunks that take each narrowed K loop.
const std::vector<int> kCounts = {0, 1, 2, 3, 7, 8, 15, 16, 31, 33, 64, 65, 128, 20, 24, 40, 90, 100, 250};

// The error against the identical arithmetic in double is the FP8 tensor
// cores' own: about 1e-2 at K = 2048 to 2944 with outlier channels, the same
// on every tile and whether or not partial sums are promoted every stage
// (docs/fp8.md, "Accumulation"); a wrong code, scale or row would be far above.
constexpr double kFp8GemmTolerance = 2e-2, kFp8WorstRowTolerance = 8e-2;

// Every output written, the whole and its worst row within the tolerances.
void expect_fp8_result(const Fp8Result& r, const std::string& what) {
  EXPECT_EQ(r.unwritten, 0) << what;
  EXPECT_LT(r.rel_err, kFp8GemmTolerance) << what;
  EXPECT_LT(r.worst_row_rel_err, kFp8WorstRowTolerance) << what;
}

TEST(GpuGroupedGemmFp8, EveryTileEveryTokenCount) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  // K = 2944: 23 stages of 128, an odd count of k32 pairs per weight granule's scale granule
  for (const int64_t k : {int64_t(2048), int64_t(2944)}) {
    const int64_t n = 256;
    const Fp8Experts w = fp8_experts(int64_t(kCounts.size()), n, k, 31 + uint64_t(k));
    for (int tile : fp8_tiles()) {
      // (stages of 256 k at K = 2048 only here; PartialLastKStageAndNTile runs them on a partial stage)
      if (k % plan::kGemmTiles[tile].bk) continue;
      ASSERT_TRUE(plan::fit_gemm_tile(tile, n, k, device_capacity(), 0, plan::ActivationType::e4m3).fits)
          << plan::plan_gemm_tile(tile, n, k, device_capacity(), 0, plan::ActivationType::e4m3).explanation;
      const std::string name = plan::gemm_tile_name(tile);
      const Fp8Result r = run_fp8_case(w, n, k, kCounts, tile, 100 + uint64_t(tile));
      EXPECT_EQ(r.unwritten, 0) << name;
      EXPECT_LT(r.rel_err, kFp8GemmTolerance) << name << " K " << k;
      EXPECT_LT(r.worst_row_rel_err, kFp8WorstRowTolerance) << name << " K " << k;
      // without outlier channels: the largest product of a k32 group no longer 20x the others
      const Fp8Result plain = run_fp8_case(w, n, k, kCounts, tile, 100 + uint64_t(tile), 1, 0, /*outliers=*/false);
      EXPECT_EQ(plain.unwritten, 0) << name;
      EXPECT_LT(plain.rel_err, kFp8GemmTolerance) << name << " K " << k << " without outliers";
      std::printf("  %-34s K %5lld rel err %.3e (worst row %.3e); without outlier channels %.3e", name.c_str(),
                  (long long)k, r.rel_err, r.worst_row_rel_err, plain.rel_err);
      if (plan::kGemmTiles[tile].promotes_partial_sums()) {  // partial sums promoted every 128 of K
        const Fp8Result every = run_fp8_case(w, n, k, kCounts, tile, 100 + uint64_t(tile), 1, /*promotion_stages=*/1);
        EXPECT_EQ(every.unwritten, 0) << name;
        EXPECT_LT(every.rel_err, kFp8GemmTolerance) << name << " K " << k << " promoted every stage";
        std::printf("; promoted every stage %.3e (worst row %.3e)", every.rel_err, every.worst_row_rel_err);
      }
      std::printf("\n");
    }
  }
}

TEST(GpuGroupedGemmFp8, SplitKSumsThePartsOfFp8Items) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const int64_t n = 256, k = 4096;
  const std::vector<int> counts = {3, 0, 8, 1};
  const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 5);
  for (int tile : fp8_tiles()) {
    if (!plan::kGemmTiles[tile].splits_k()) continue;
    const Fp8Result r = run_fp8_case(w, n, k, counts, tile, 7, /*k_splits=*/4);
    EXPECT_EQ(r.unwritten, 0) << plan::gemm_tile_name(tile);
    EXPECT_LT(r.rel_err, kFp8GemmTolerance) << plan::gemm_tile_name(tile);
    std::printf("  %-34s 4 K parts rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), r.rel_err);
  }
}

// The balanced split (plan/split_k.hpp) on every FP8 tile that balances, with
// the plain store and the biased clamped SwiGLU: the same arithmetic in double.
TEST(GpuGroupedGemmFp8, BalancedSplitOfFp8Items) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const int64_t n = 512, k = 4096;
  const std::vector<int> counts = {3, 0, 8, 1, 70};
  const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 15);
  const Fp8Bias swiglu{kernels::GemmEpilogue::swiglu, random_biases(int64_t(counts.size()) * n, 17)};
  int ran = 0;
  for (int tile : fp8_tiles()) {
    if (!plan::kGemmTiles[tile].balances_k()) continue;
    for (const Fp8Bias* b : {static_cast<const Fp8Bias*>(nullptr), &swiglu}) {
      const Fp8Result r = b ? run_fp8_case(w, n, k, counts, tile, 19, plan::kBalancedKSplit, 0, true, *b)
                            : run_fp8_case(w, n, k, counts, tile, 19, plan::kBalancedKSplit);
      const std::string what = plan::gemm_tile_name(tile) + (b ? " biased clamped SwiGLU" : " store");
      expect_fp8_result(r, what + " balanced");
      std::printf("  %-34s balanced split %s rel err %.3e\n", plan::gemm_tile_name(tile).c_str(), b ? "swiglu" : "store",
                  r.rel_err);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "no FP8 tile balances";
}

// The biased instance of every FP8 tile: biases with the store, and with the
// clamped SwiGLU (in the bias pass or the write loop, as the tile says), against
// the same arithmetic in double (biases of a few units: some values past the clamp).
TEST(GpuGroupedGemmFp8, BiasesAndClampedSwigluOnEveryTile) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const int64_t n = 256, k = 2048;
  const std::vector<int> counts = {5, 0, 17, 64, 1, 130};
  const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 41);
  const Fp8Bias store{kernels::GemmEpilogue::store, random_biases(int64_t(counts.size()) * n, 43)};
  const Fp8Bias swiglu{kernels::GemmEpilogue::swiglu, store.bias};
  for (int tile : fp8_tiles()) {
    const std::string name = plan::gemm_tile_name(tile);
    for (const Fp8Bias* c : {&store, &swiglu}) {
      const Fp8Result r = run_fp8_case(w, n, k, counts, tile, 200 + uint64_t(tile), 1, 0, true, *c);
      const char* what = c == &store ? "store" : "clamped SwiGLU";
      expect_fp8_result(r, name + " " + what);
      std::printf("  %-34s biased %-14s rel err %.3e (worst row %.3e)\n", name.c_str(), what, r.rel_err, r.worst_row_rel_err);
    }
  }
}

// An N and a K that the tiles do not divide, in steps of 64: every FP8 tile
// at N = K = 448 (a last N tile of 192 rows, its last 64-row group past N on
// the 256-row tiles; 3.5 stages of 128 k, 1.75 of 256), then gpt-oss's own
// GEMMs (N = 5760 with the clamped SwiGLU, 2880 with the store, both biased;
// K = 2880, 22.5 stages of 128) on the tiles the planner ranks at decode and
// prefill sizes. The zero fill past K must add nothing, and no row past N may
// be written (the outputs are exactly [P, n]).
TEST(GpuGroupedGemmFp8, PartialLastKStageAndNTile) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  {
    const int64_t n = 448, k = 448;
    const std::vector<int> counts = {5, 0, 17, 64, 1, 130};
    const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 61);
    for (int tile : fp8_tiles()) {
      const std::string name = plan::gemm_tile_name(tile);
      ASSERT_TRUE(plan::fit_gemm_tile(tile, n, k, device_capacity(), 0, plan::ActivationType::e4m3).fits)
          << plan::plan_gemm_tile(tile, n, k, device_capacity(), 0, plan::ActivationType::e4m3).explanation;
      const Fp8Result r = run_fp8_case(w, n, k, counts, tile, 300 + uint64_t(tile));
      expect_fp8_result(r, name + " N = K = 448");
      std::printf("  %-34s N = K = 448 rel err %.3e (worst row %.3e)\n", name.c_str(), r.rel_err, r.worst_row_rel_err);
    }
  }
  const std::vector<int> counts = {3, 0, 9, 1, 40};
  for (const auto& [n, epilogue] : {std::pair<int64_t, kernels::GemmEpilogue>{5760, kernels::GemmEpilogue::swiglu},
                                    {2880, kernels::GemmEpilogue::store}}) {
    const int64_t k = 2880;
    const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 71 + uint64_t(n));
    const Fp8Bias bias{epilogue, random_biases(int64_t(counts.size()) * n, 73 + uint64_t(n))};
    std::vector<int> ranked;
    for (double tpe : {1.0, 16.0, 128.0}) {
      const int t = plan::rank_gemm_tiles(n, k, device_capacity(), tpe, 128, 132, plan::ActivationType::e4m3);
      ASSERT_GE(t, 0) << n << " x " << k << " at " << tpe << " tokens per expert";
      if (std::find(ranked.begin(), ranked.end(), t) == ranked.end()) ranked.push_back(t);
    }
    for (int tile : ranked) {
      const std::string name = plan::gemm_tile_name(tile);
      const Fp8Result r = run_fp8_case(w, n, k, counts, tile, 400 + uint64_t(tile), 1, 0, true, bias);
      expect_fp8_result(r, name + " N " + std::to_string(n) + " K 2880");
      std::printf("  %-34s N %lld K 2880 biased rel err %.3e (worst row %.3e)\n", name.c_str(), (long long)n, r.rel_err,
                  r.worst_row_rel_err);
    }
  }
}

// NVFP4 weights, opted into the rounded fold: every FP8 tile's rounded-fold
// instance, plain and biased with the clamped SwiGLU, at a whole shape and at
// one with a partial last K stage and N tile, against the same arithmetic in
// double (the weights rounded as fp8_folded_weight rounds them).
TEST(GpuGroupedGemmFp8, Nvfp4RoundedFoldOnEveryTile) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const std::vector<int> counts = {5, 0, 17, 64, 1, 130};
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{256, 2048}, {448, 448}}) {
    const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 81 + uint64_t(k), Fp4Format::nvfp4);
    const Fp8Bias swiglu{kernels::GemmEpilogue::swiglu, random_biases(int64_t(counts.size()) * n, 83)};
    for (int tile : fp8_tiles()) {
      const std::string name = plan::gemm_tile_name(tile) + " nvfp4 N " + std::to_string(n) + " K " + std::to_string(k);
      const Fp8Result r = run_fp8_case(w, n, k, counts, tile, 500 + uint64_t(tile));
      expect_fp8_result(r, name);
      const Fp8Result b = run_fp8_case(w, n, k, counts, tile, 600 + uint64_t(tile), 1, 0, true, swiglu);
      expect_fp8_result(b, name + " clamped SwiGLU");
      std::printf("  %-60s rel err %.3e, biased SwiGLU %.3e\n", name.c_str(), r.rel_err, b.rel_err);
    }
  }
}

// A bf16 GEMM is never launched on an FP8 tile (nor the reverse): the planner says why.
TEST(GpuGroupedGemmFp8, ActivationTypesNeverMeetTheOtherTiles) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const int tile = fp8_tiles().front();
  const plan::SmemPlan p = plan::plan_gemm_tile(tile, 256, 2048, device_capacity());
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.explanation.find("multiplies e4m3 activations; this GEMM's are bf16"), std::string::npos) << p.explanation;
  const int bf16 = plan::gemm_tile_index("bm256_nt64_bk128_mt1_c1_ws");
  EXPECT_FALSE(plan::fit_gemm_tile(bf16, 256, 2048, device_capacity(), 0, plan::ActivationType::e4m3).fits);
}

}  // namespace
}  // namespace fp4moe
