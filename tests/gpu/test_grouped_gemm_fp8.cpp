// The FP8 (W4A8) grouped GEMM against the CPU reference of the identical
// arithmetic: the activations quantized to e4m3 per row by the host's
// quantize_rows_e4m3 (which the device row copy matches bitwise), the weights
// exact (the MXFP4 fold into e4m3 is exact), the sum in double. The device's
// rows come through its own FP8 row copy, gathered into expert order. Fresh
// random inputs, outputs poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
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
#include "runtime/gemm_step.hpp"

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

// GEMM2's FP8 row copy done by GEMM1 (GemmOperands::out_e4m3: in the
// epilogue, or on a tile whose epilogue does not, by a row copy after it):
// the codes and scales are bitwise the row copy of GEMM1's own output, and
// the codes past N/2 zero. The GEMM step as the layer runs it, `rounds`
// times, codes and scales poisoned before each: a chunk counter left nonzero
// by one launch would leave the next one's rows unquantized. Returns the
// chunk counters after the last.
std::vector<int32_t> expect_output_quantized_as_the_row_copy(const Fp8Experts& w, int64_t n, int64_t k,
                                                             const std::vector<int>& counts, int tile, int k_splits,
                                                             bool clamped, uint64_t seed, int rounds = 2) {
  const std::string what = plan::gemm_tile_name(tile) + (k_splits > 1 ? " split K" : "") + (clamped ? " clamped" : "");
  const int64_t E = int64_t(counts.size());
  const int64_t P = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t half = n / 2, out_cols = half + 32;
  std::vector<int32_t> offsets(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) offsets[size_t(e + 1)] = offsets[size_t(e)] + counts[size_t(e)];
  const test::Bf16Matrix x = test::random_bf16(P * k, seed);
  DeviceBuffer<uint16_t> dx(x.bits), dy(size_t(P * half));
  DeviceBuffer<int32_t> doff(offsets);
  DeviceBuffer<uint8_t> codes(size_t(P * k)), fused(size_t(P * out_cols)), copied(size_t(P * out_cols));
  DeviceBuffer<float> xscale(static_cast<size_t>(P)), fused_scale(static_cast<size_t>(P)), copied_scale(static_cast<size_t>(P));
  DeviceBuffer<int32_t> counters(size_t(plan::max_token_chunks(P, plan::kGemmTiles[tile].chunk(), E)));
  DeviceBuffer<uint8_t> split_workspace(k_splits > 1 ? size_t(plan::kSplitKWorkspaceBytes) : 0);
  std::vector<float> bias(size_t(E * n));
  std::mt19937_64 rng(seed + 1);
  for (float& b : bias) b = float(int(rng() % 201) - 100) / 400.f;
  DeviceBuffer<float> dbias(bias);
  counters.fill_bytes(0);
  if (k_splits > 1) split_workspace.fill_bytes(0);

  ProjectionView v;
  v.weights = w.weights.get(), v.scales = w.scales.get(), v.row_scale = w.row_scale.get();
  v.format = Fp4Format::mxfp4, v.activations = plan::ActivationType::e4m3;
  v.n = n, v.k = k, v.experts = E;
  if (clamped) v.bias = dbias.get();
  GemmOperands io;
  io.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  io.rows = P;
  io.offsets = doff.get();
  io.epilogue = kernels::GemmEpilogue::swiglu;
  if (clamped) io.activation = kernels::GemmActivation::clamped_swiglu;
  io.y = reinterpret_cast<__nv_bfloat16*>(dy.get());
  io.row_copy_e4m3 = codes.get(), io.row_scales = xscale.get();
  io.out_e4m3 = fused.get(), io.out_scales = fused_scale.get(), io.out_e4m3_cols = out_cols;
  io.chunk_counters = counters.get(), io.chunk_counter_count = int64_t(counters.size());
  if (k_splits > 1) io.split_workspace = split_workspace.get(), io.split_workspace_bytes = int64_t(split_workspace.bytes());
  const GemmStepLaunch step = prepare_gemm_step(v, io, {.tile = tile, .k_splits = k_splits}, device_limits(0));
  EXPECT_EQ(step.quantizes_output_after, !plan::kGemmTiles[tile].can_quantize_output()) << what;
  for (int round = 0; round < rounds; ++round) {
    fused.fill_bytes(0xFF), fused_scale.fill_bytes(0xFF), dy.fill_bytes(0xFF);
    enqueue_gemm_step(step, nullptr);
    kernels::QuantizeRowsFp8Args c{.x = reinterpret_cast<const __nv_bfloat16*>(dy.get()), .count = P, .cols = half,
                                   .codes = copied.get(), .out_cols = out_cols, .scales = copied_scale.get()};
    kernels::launch_quantize_rows_fp8(c, nullptr);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = fused.download(), want = copied.download();
    const std::vector<float> got_scale = fused_scale.download(), want_scale = copied_scale.download();
    int64_t code_diffs = 0, scale_diffs = 0, nonzero_pad = 0;
    for (int64_t i = 0; i < P * out_cols; ++i) {
      code_diffs += got[size_t(i)] != want[size_t(i)];
      nonzero_pad += i % out_cols >= half && got[size_t(i)] != 0;
    }
    for (int64_t p = 0; p < P; ++p)
      scale_diffs += std::memcmp(&got_scale[size_t(p)], &want_scale[size_t(p)], sizeof(float)) != 0;
    EXPECT_EQ(code_diffs, 0) << what << " round " << round << ": codes that differ from the row copy's";
    EXPECT_EQ(scale_diffs, 0) << what << " round " << round << ": row scales that differ";
    EXPECT_EQ(nonzero_pad, 0) << what << " round " << round << ": codes past N/2 not zero";
  }
  return counters.download();
}

TEST(GpuGroupedGemmFp8, Gemm1QuantizesItsOutputAsTheRowCopyDoes) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  // N = 1024: 4 to 8 N tiles arrive per chunk; experts of 0 rows to many chunks
  const int64_t n = 1024, k = 1024;
  const std::vector<int> counts = {0, 1, 3, 8, 9, 16, 33, 64, 65, 130, 0, 257, 2};
  const Fp8Experts w = fp8_experts(int64_t(counts.size()), n, k, 41);
  const auto all_zero = [](const std::vector<int32_t>& v) { return std::count(v.begin(), v.end(), 0) == int64_t(v.size()); };
  for (int tile : fp8_tiles()) {
    const plan::GemmTile& t = plan::kGemmTiles[tile];
    EXPECT_TRUE(all_zero(expect_output_quantized_as_the_row_copy(w, n, k, counts, tile, 1, false, 50 + uint64_t(tile))))
        << t.name << ": chunk counters left nonzero";
    if (t.biased_instance) expect_output_quantized_as_the_row_copy(w, n, k, counts, tile, 1, true, 60 + uint64_t(tile));
    if (t.splits_k()) {  // only the split that finishes an item writes it, and counts once
      EXPECT_TRUE(all_zero(expect_output_quantized_as_the_row_copy(w, n, k, {3, 0, 8, 1}, tile, 4, false, 70 + uint64_t(tile))))
          << t.name << " split K: chunk counters left nonzero";
    }
  }
}

// The epilogue's quantization is refused where it cannot run, naming why.
TEST(GpuGroupedGemmFp8, EpilogueQuantizationRefusals) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "the FP8 tiles need sm_90a";
  const int64_t n = 256, k = 1024, P = 40;
  const Fp8Experts w = fp8_experts(2, n, k, 3);
  DeviceBuffer<int32_t> doff(std::vector<int32_t>{0, 20, 40}), counters(2);
  DeviceBuffer<uint8_t> codes(size_t(P * k)), out(size_t(P * n / 2));
  DeviceBuffer<float> xscale(static_cast<size_t>(P)), out_scale(static_cast<size_t>(P));
  DeviceBuffer<uint16_t> dy(size_t(P * n));
  kernels::GroupedGemmArgs a;
  a.weights = w.weights.get(), a.scales = w.scales.get(), a.weight_row_scale = w.row_scale.get();
  a.format = Fp4Format::mxfp4;
  a.num_experts = 2, a.n = n, a.k = k;
  a.x_e4m3 = codes.get(), a.x_scale = xscale.get();
  a.permuted_rows = P;
  a.expert_offsets = doff.get();
  a.y = reinterpret_cast<__nv_bfloat16*>(dy.get());
  a.epilogue = kernels::GemmEpilogue::swiglu;
  a.y_e4m3 = out.get(), a.y_scale = out_scale.get(), a.y_e4m3_cols = n / 2;
  a.chunk_counters = counters.get(), a.chunk_counter_count = 2;
  const int tile = plan::gemm_tile_index("bm256_nt8_bk128_mt1_c1_ws_fp8");
  const auto refusal = [&](const kernels::GroupedGemmArgs& args) {
    try {
      kernels::prepare_grouped_gemm(args, {.tile = tile}, device_limits(0));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  // P = 40 rows over 2 experts make up to 40 / 8 + 2 chunks of this tile's 8 rows
  EXPECT_NE(refusal(a).find("2 chunk counters for up to 7 token chunks"), std::string::npos) << refusal(a);
  a.chunk_counter_count = 7;
  EXPECT_EQ(refusal(a), "(accepted)");
  const int no_epilogue_quantization = plan::gemm_tile_index("bm128_nt128_bk128_mt1_c1_ws_fp8");
  ASSERT_FALSE(plan::kGemmTiles[no_epilogue_quantization].can_quantize_output());
  try {
    kernels::prepare_grouped_gemm(a, {.tile = no_epilogue_quantization}, device_limits(0));
    ADD_FAILURE() << "y_e4m3 accepted on a tile whose epilogue does not quantize";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not quantize its output to e4m3 in its epilogue"), std::string::npos) << e.what();
  }
  kernels::GroupedGemmArgs b = a;
  b.epilogue = kernels::GemmEpilogue::store;
  EXPECT_NE(refusal(b).find("needs e4m3 activations and the swiglu epilogue"), std::string::npos) << refusal(b);
  b = a;
  b.y_e4m3_cols = n / 2 - 16;
  EXPECT_NE(refusal(b).find("y_e4m3_cols = 112 must be a multiple of 16 and at least N/2 = 128"), std::string::npos)
      << refusal(b);
  b = a;
  b.y_scale = nullptr;
  EXPECT_NE(refusal(b).find("y_e4m3 needs y_scale and chunk_counters"), std::string::npos) << refusal(b);
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
