// The FP8 (W4A8) grouped GEMM against the CPU reference of the identical
// arithmetic: the activations quantized to e4m3 per row by the host's
// quantize_rows_e4m3 (which the device row copy matches bitwise), the weights
// exact (the MXFP4 fold into e4m3 is exact), the sum in double. The device's
// rows come through its own FP8 row copy, gathered into expert order. Fresh
// random inputs, outputs poisoned.
#include <gtest/gtest.h>

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
  std::vector<Fp4Matrix> experts;
  PreparedFp8Weights prepared;
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> row_scale;
};
Fp8Experts fp8_experts(int64_t E, int64_t n, int64_t k, uint64_t seed) {
  Fp8Experts s;
  s.experts = test::random_fp4_matrices(Fp4Format::mxfp4, E, n, k, seed, [](int64_t e) { return 0.02f * float(1 + e % 3); });
  s.prepared = prepare_fp8_gemm_weights(prepare_gemm_weights(s.experts));
  s.weights.upload(s.prepared.weights);
  s.scales.upload(s.prepared.scales);
  s.row_scale.upload(s.prepared.row_scale);
  return s;
}

// Expert e gets counts[e] rows, each a random token of X [T, K].
Fp8Result run_fp8_case(const Fp8Experts& w, int64_t n, int64_t k, const std::vector<int>& counts, int tile, uint64_t seed,
                       int k_splits = 1, int promotion_stages = 0, bool outliers = true) {
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

  DeviceBuffer<uint16_t> dx(x.bits), dy(size_t(std::max<int64_t>(P, 1) * n));
  DeviceBuffer<int32_t> doff(offsets), dgather(gather);
  DeviceBuffer<uint8_t> codes(size_t(std::max<int64_t>(P, 1) * k));
  DeviceBuffer<float> xscale(size_t(std::max<int64_t>(P, 1)));
  DeviceBuffer<int32_t> split_workspace(k_splits > 1 ? size_t(plan::kSplitKWorkspaceBytes / 4) : 0);
  if (k_splits > 1) split_workspace.fill_bytes(0);
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
  a.format = Fp4Format::mxfp4;
  a.num_experts = E, a.n = n, a.k = k;
  a.x_e4m3 = codes.get(), a.x_scale = xscale.get();
  a.permuted_rows = P;
  a.expert_offsets = doff.get();
  a.y = reinterpret_cast<__nv_bfloat16*>(dy.get());
  if (k_splits > 1) a.split_workspace = split_workspace.get(), a.split_workspace_bytes = int64_t(split_workspace.bytes());
  a.fp8_promotion_stages = promotion_stages;
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
  std::vector<float> ref(size_t(P * n)), got(size_t(P * n));
  detail::parallel_for(E, [&](int64_t e) {
    const Fp4Matrix& m = w.experts[size_t(e)];
    std::vector<double> wrow(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) wrow[size_t(c)] = m.dequant(r, c);
      for (int64_t p = offsets[size_t(e)]; p < offsets[size_t(e + 1)]; ++p) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += double(e4m3_decode(qx.codes[size_t(p * k + c)])) * wrow[size_t(c)];
        ref[size_t(p * n + r)] = float(acc * double(qx.scales[size_t(p)]));
      }
    }
  });
  for (int64_t i = 0; i < P * n; ++i) got[size_t(i)] = bf16_to_float(ybits[size_t(i)]);
  Fp8Result r;
  r.rel_err = test::rel_frobenius(got, ref, &r.unwritten);
  for (int64_t p = 0; p < P; ++p)
    r.worst_row_rel_err =
        std::max(r.worst_row_rel_err, test::rel_frobenius(got.data() + p * n, ref.data() + p * n, size_t(n), nullptr));
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

TEST(GpuGroupedGemmFp8, EveryTileEveryTokenCount) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  // K = 2944: 23 stages of 128, an odd count of k32 pairs per weight granule's scale granule
  for (const int64_t k : {int64_t(2048), int64_t(2944)}) {
    const int64_t n = 256;
    const Fp8Experts w = fp8_experts(int64_t(kCounts.size()), n, k, 31 + uint64_t(k));
    for (int tile : fp8_tiles()) {
      if (k % plan::kGemmTiles[tile].bk) continue;  // (stages of 256 k: K = 2048 only)
      ASSERT_TRUE(plan::fit_gemm_tile(tile, n, k, device_capacity(), 0, false, plan::ActivationType::e4m3).fits)
          << plan::plan_gemm_tile(tile, n, k, device_capacity(), 0, false, plan::ActivationType::e4m3).explanation;
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

// A bf16 GEMM is never launched on an FP8 tile (nor the reverse): the planner says why.
TEST(GpuGroupedGemmFp8, ActivationTypesNeverMeetTheOtherTiles) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const int tile = fp8_tiles().front();
  const plan::SmemPlan p = plan::plan_gemm_tile(tile, 256, 2048, device_capacity());
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.explanation.find("multiplies e4m3 activations; this GEMM's are bf16"), std::string::npos) << p.explanation;
  const int bf16 = plan::gemm_tile_index("bm256_nt64_bk128_mt1_c1_ws");
  EXPECT_FALSE(plan::fit_gemm_tile(bf16, 256, 2048, device_capacity(), 0, false, plan::ActivationType::e4m3).fits);
}

}  // namespace
}  // namespace fp4moe
