// The grouped GEMM's biased epilogue instance on every tile: per-feature
// biases with the store, with gpt-oss's clamped SwiGLU and with the weighted
// sum (scatter_add), against the CPU reference in double on fresh random
// inputs; outputs poisoned. Biases span +-10 so that the clamp at 7 binds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/reference.hpp"
#include "gpu_test_util.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "runtime/gemm_step.hpp"
#include "plan/gemm_plan.hpp"
#include "reference/detail.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

constexpr int64_t kWidth = 128, kN = 2 * kWidth, kK = 512, kTokens = 37, kTopK = 2;
constexpr float kLimit = 7.0f, kAlpha = 1.702f;
const std::vector<int> kCounts = {0, 1, 9, 16, 33, 5};  // 64 of the 74 pairs of 37 tokens; one expert without rows

plan::SmemBudget device_budget() {
  const auto d = list_devices();
  if (d.empty()) return {};
  return {d[0].smem_optin_per_block, d[0].smem_per_sm, d[0].smem_reserved_per_block, d[0].cc};
}

double clamped_swiglu(double g, double u) {
  g = std::min(g, double(kLimit));
  u = std::clamp(u, -double(kLimit), double(kLimit));
  return g / (1.0 + std::exp(-double(kAlpha) * g)) * (u + 1.0);
}

struct EpilogueCase {
  std::vector<Fp4Matrix> gate, up;
  std::vector<std::vector<float>> gate_bias, up_bias;
  PreparedExpertWeights prepared;
  std::vector<float> bias;  // [E][N] prepared order
  std::vector<int32_t> offsets, pair_of_row;
  std::vector<float> topk_weights;
  test::Bf16Matrix x;       // [P, K], permuted rows in order
  std::vector<double> z;    // [P, N] pre-bias products in prepared row order
};

EpilogueCase make_case(uint64_t seed) {
  EpilogueCase c;
  const int64_t E = int64_t(kCounts.size());
  c.gate = test::random_fp4_matrices(Fp4Format::mxfp4, E, kWidth, kK, seed, [](int64_t) { return 0.05f; });
  c.up = test::random_fp4_matrices(Fp4Format::mxfp4, E, kWidth, kK, seed + 1, [](int64_t) { return 0.05f; });
  std::mt19937_64 rng(seed + 2);
  std::uniform_real_distribution<float> b(-10.f, 10.f);
  std::vector<const std::vector<float>*> gb, ub;
  c.gate_bias.resize(size_t(E)), c.up_bias.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < kWidth; ++i) c.gate_bias[size_t(e)].push_back(b(rng)), c.up_bias[size_t(e)].push_back(b(rng));
    gb.push_back(&c.gate_bias[size_t(e)]), ub.push_back(&c.up_bias[size_t(e)]);
  }
  c.prepared = prepare_gated_gemm_weights(c.gate, c.up);
  c.bias = prepared_gated_bias(gb, ub, kN);
  c.offsets.assign(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) c.offsets[size_t(e + 1)] = c.offsets[size_t(e)] + kCounts[size_t(e)];
  const int64_t P = c.offsets.back();
  // each permuted row is one (token, slot) pair; pairs in a shuffled order
  c.pair_of_row.resize(size_t(P));
  std::iota(c.pair_of_row.begin(), c.pair_of_row.end(), 0);
  std::shuffle(c.pair_of_row.begin(), c.pair_of_row.end(), rng);
  std::uniform_real_distribution<float> w(0.1f, 1.f);
  c.topk_weights.resize(size_t(kTokens * kTopK));
  for (float& v : c.topk_weights) v = w(rng);
  c.x = test::random_bf16(P * kK, seed + 3);
  // z = x . W^T per expert over the interleaved (prepared-order) rows, in double
  c.z.assign(size_t(P * kN), 0.0);
  for (int64_t e = 0; e < E; ++e) {
    const Fp4Matrix* parts[] = {&c.gate[size_t(e)], &c.up[size_t(e)]};
    const std::vector<float> wd = dequantize(stack_rows(parts, pack::kGateUpInterleaveRows));
    for (int64_t p = c.offsets[size_t(e)]; p < c.offsets[size_t(e + 1)]; ++p)
      for (int64_t n = 0; n < kN; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < kK; ++k) acc += double(c.x.values[size_t(p * kK + k)]) * double(wd[size_t(n * kK + k)]);
        c.z[size_t(p * kN + n)] = acc;
      }
  }
  return c;
}

struct DeviceCase {
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> dequant_scale, bias, topk_weights, accumulate;
  DeviceBuffer<int32_t> offsets, pair;
  DeviceBuffer<uint16_t> x, y;
  explicit DeviceCase(const EpilogueCase& c)
      : weights(c.prepared.weights), scales(c.prepared.scales), dequant_scale(c.prepared.dequant_scale), bias(c.bias),
        topk_weights(c.topk_weights), accumulate(static_cast<size_t>(kTokens * kN)), offsets(c.offsets),
        pair(c.pair_of_row), x(c.x.bits), y(static_cast<size_t>(c.offsets.back() * kN)) {}
  ProjectionView projection(const EpilogueCase& c) const {
    return {weights.get(), scales.get(), dequant_scale.get(), bias.get(), c.prepared.scale_parts, c.prepared.format, kN,
            kK, int64_t(kCounts.size())};
  }
  GemmOperands operands(const EpilogueCase& c, kernels::GemmEpilogue epi) const {
    GemmOperands a;
    a.x = reinterpret_cast<const __nv_bfloat16*>(x.get());
    a.rows = c.offsets.back();
    a.offsets = offsets.get();
    a.epilogue = epi;
    a.y = reinterpret_cast<__nv_bfloat16*>(y.get());
    if (epi == kernels::GemmEpilogue::scatter_add) {
      a.accumulate = accumulate.get(), a.permuted_pair = pair.get(), a.topk_weights = topk_weights.get(), a.top_k = kTopK;
    }
    if (epi == kernels::GemmEpilogue::swiglu) {
      a.activation = kernels::GemmActivation::clamped_swiglu, a.swiglu_limit = kLimit, a.swiglu_alpha = kAlpha;
    }
    return a;
  }
};

std::vector<float> bf16_values(const std::vector<uint16_t>& bits, int64_t* unwritten) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    v[i] = bf16_to_float(bits[i]);
    *unwritten += bits[i] == 0xFFFF;
  }
  return v;
}

TEST(GpuGroupedGemmEpilogues, BiasesAndClampedSwigluOnEveryTile) {
  FP4MOE_REQUIRE_GPU();
  const EpilogueCase c = make_case(91);
  DeviceCase d(c);
  const int64_t P = c.offsets.back();
  // references in double
  std::vector<float> ref_store(size_t(P * kN)), ref_swiglu(size_t(P * kWidth)), ref_sum(size_t(kTokens * kN), 0.f);
  int64_t clamped = 0;
  for (int64_t p = 0; p < P; ++p) {
    int64_t e = 0;
    while (c.offsets[size_t(e + 1)] <= p) ++e;
    const double* z = c.z.data() + p * kN;
    const float* b = c.bias.data() + e * kN;
    for (int64_t n = 0; n < kN; ++n) ref_store[size_t(p * kN + n)] = float(z[n] + b[n]);
    for (int64_t j = 0; j < kWidth; ++j) {
      const int64_t g = (j / 16) * 32 + j % 16;
      const double gv = z[g] + b[g], uv = z[g + 16] + b[g + 16];
      clamped += gv > kLimit || std::abs(uv) > kLimit;
      ref_swiglu[size_t(p * kWidth + j)] = float(clamped_swiglu(gv, uv));
    }
    const int32_t pair = c.pair_of_row[size_t(p)];
    for (int64_t n = 0; n < kN; ++n)
      ref_sum[size_t((pair / kTopK) * kN + n)] += float(double(c.topk_weights[size_t(pair)]) * (z[n] + b[n]));
  }
  ASSERT_GT(clamped, P * kWidth / 10) << "the biases should push a good share of the values past the clamp";

  int ran = 0;
  for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
    const std::string name = plan::gemm_tile_name(tile);
    const plan::SmemPlan plan = plan::plan_gemm_tile(tile, kN, kK, device_budget());
    if (!plan.fits) continue;
    ++ran;
    const kernels::GemmLaunch launch{.tile = tile, .stages = plan.stages};
    for (kernels::GemmEpilogue epi :
         {kernels::GemmEpilogue::store, kernels::GemmEpilogue::swiglu, kernels::GemmEpilogue::scatter_add}) {
      d.y.fill_bytes(0xFF);
      d.accumulate.fill_bytes(0);
      launch_gemm_step(d.projection(c), d.operands(c, epi), launch, nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      int64_t unwritten = 0;
      double err = 0;
      if (epi == kernels::GemmEpilogue::scatter_add) {
        err = test::rel_frobenius(d.accumulate.download(), ref_sum, &unwritten);
      } else {
        std::vector<float> got = bf16_values(d.y.download(), &unwritten);
        if (epi == kernels::GemmEpilogue::swiglu) {
          unwritten -= int64_t(got.size()) - P * kWidth;  // y holds P x N/2 of SwiGLU's output; the rest stays poisoned
          got.resize(size_t(P * kWidth));
        }
        err = test::rel_frobenius(got, epi == kernels::GemmEpilogue::swiglu ? ref_swiglu : ref_store, nullptr);
      }
      const char* what = epi == kernels::GemmEpilogue::store ? "store" : epi == kernels::GemmEpilogue::swiglu ? "clamped swiglu" : "scatter_add";
      EXPECT_EQ(unwritten, 0) << name << " " << what;
      EXPECT_LT(err, 1e-2) << name << " " << what;
      std::printf("  %-38s %-15s rel err %.3e\n", name.c_str(), what, err);
    }
  }
  EXPECT_GE(ran, plan::kNumGemmTiles / 2) << "the planner rejects most tiles for [" << kN << ", " << kK << "]";
}

// The clamped activation runs in the biased instance: without a bias, or on
// an epilogue other than SwiGLU, it is refused before launch.
TEST(GpuGroupedGemmEpilogues, ClampedSwigluWithoutBiasIsRefused) {
  FP4MOE_REQUIRE_GPU();
  const EpilogueCase c = make_case(92);
  DeviceCase d(c);
  ProjectionView w = d.projection(c);
  GemmOperands a = d.operands(c, kernels::GemmEpilogue::swiglu);
  w.bias = nullptr;
  int tile = 0;
  while (!plan::plan_gemm_tile(tile, kN, kK, device_budget()).fits) ++tile;
  const kernels::GemmLaunch launch{.tile = tile, .stages = plan::plan_gemm_tile(tile, kN, kK, device_budget()).stages};
  try {
    launch_gemm_step(w, a, launch, nullptr);
    FAIL() << "the clamped SwiGLU without a bias launched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
  a = d.operands(c, kernels::GemmEpilogue::store);
  a.activation = kernels::GemmActivation::clamped_swiglu;
  EXPECT_THROW(launch_gemm_step(d.projection(c), a, launch, nullptr), Error);  // the clamp needs the swiglu epilogue
}

}  // namespace
}  // namespace fp4moe
