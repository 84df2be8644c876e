// The whole MoE layer on the GPU against the CPU reference; routing bitwise;
// split finalize bitwise stable; a captured CUDA graph equals eager execution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "gpu_reference.hpp"
#include "gpu_test_util.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/layer_core.hpp"

namespace fp4moe {
namespace {

struct LayerCase {
  MoeConfig cfg;
  MoeWeights w;
  test::Bf16Matrix x;
  std::vector<float> logits;
  int64_t T;
};

LayerCase make_case(const MoeConfig& cfg, int64_t T, uint64_t seed, Fp4Format format = Fp4Format::nvfp4,
                    float x_stddev = 1.f) {
  LayerCase c{cfg, {}, {}, {}, T};
  c.w = random_moe_weights(c.cfg, format, seed);
  c.x = test::random_bf16(T * c.cfg.hidden, seed + 1, x_stddev);
  c.logits = gaussian_logits(T, c.cfg.num_experts, seed + 2);
  return c;
}
LayerCase make_case(const std::string& preset_name, int64_t T, uint64_t seed) { return make_case(preset(preset_name), T, seed); }

struct GpuRun {
  std::vector<uint16_t> out;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

GpuRun run_layer(MoeLayer& layer, const LayerCase& c, bool graph = false) {
  DeviceBuffer<uint16_t> dx(c.x.bits), dout(size_t(c.T * c.cfg.hidden));
  DeviceBuffer<float> dl(c.logits);
  dout.fill_bytes(0xFF);  // poison: every element must be written
  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  auto fwd = [&] {
    layer.forward(s, reinterpret_cast<const __nv_bfloat16*>(dx.get()), dl.get(), c.T,
                  reinterpret_cast<__nv_bfloat16*>(dout.get()));
  };
  if (graph) {
    const CapturedGraph g(s, fwd);
    g.launch();
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
  } else {
    fwd();
  }
  layer.check_status(s);
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  GpuRun r;
  r.out = dout.download();
  const int64_t P = c.T * c.cfg.top_k;
  r.ids.resize(size_t(P));
  r.weights.resize(size_t(P));
  FP4MOE_CUDA_CHECK(cudaMemcpy(r.ids.data(), layer.topk_ids(), size_t(P) * 4, cudaMemcpyDeviceToHost));
  FP4MOE_CUDA_CHECK(cudaMemcpy(r.weights.data(), layer.topk_weights(), size_t(P) * 4, cudaMemcpyDeviceToHost));
  return r;
}

void expect_matches_reference(const LayerCase& c, const GpuRun& g, const std::string& what) {
  const Routing ref_route = route_reference(c.cfg, c.logits.data(), c.T, c.w.correction_bias);
  ASSERT_EQ(g.ids, ref_route.topk_ids) << what << ": expert choice differs from the CPU reference";
  ASSERT_EQ(0, std::memcmp(g.weights.data(), ref_route.topk_weights.data(), g.weights.size() * 4))
      << what << ": routing weights differ bitwise from the CPU reference";
  // the CPU reference in double, or for a full-size model the GPU oracle (checked against it)
  const double macs = double(c.T) * double(c.cfg.top_k + c.cfg.shared_expert) * 3.0 * double(c.cfg.hidden) *
                      double(std::max(c.cfg.intermediate, c.cfg.shared_intermediate));
  const std::vector<float> ref = macs > 1e9 ? test::moe_forward_reference_gpu(c.cfg, c.w, c.x.values.data(), c.T, ref_route)
                                            : moe_forward_reference(c.cfg, c.w, c.x.values.data(), c.T, ref_route);
  std::vector<float> got(ref.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(g.out[i]);
  int64_t unwritten = 0;
  const double err = test::rel_frobenius(got, ref, &unwritten);
  EXPECT_EQ(unwritten, 0) << what;
  EXPECT_LT(err, 1e-2) << what;
  std::printf("  %-34s rel err %.3e\n", what.c_str(), err);
}

TEST(GpuMoeLayer, PresetsAgainstTheReference) {
  FP4MOE_REQUIRE_GPU();
  for (const char* name : {"glm5-small", "deepseek-v3-small", "mixtral-small"}) {
    for (int64_t T : {1, 7, 64, 1000}) {
      const LayerCase c = make_case(name, T, 100 + uint64_t(T));
      for (FinalizeMode mode : {FinalizeMode::fused, FinalizeMode::split}) {
        LayerOptions o;
        o.max_tokens = T;
        o.finalize = mode;
        MoeLayer layer(c.cfg, c.w, o);
        const GpuRun g = run_layer(layer, c);
        expect_matches_reference(c, g, std::string(name) + " T=" + std::to_string(T) +
                                           (mode == FinalizeMode::split ? " split" : " fused"));
      }
    }
  }
}

// The shared expert as one more routed expert (LayerOptions::shared_expert_in_routed_gemms):
// taken with the split finalize, not with the fused one or when switched off; the
// same reference either way; deterministic (a second run and a graph replay equal
// the first bitwise); the routed GEMMs' rows past the routed ones are the shared
// expert's, so every T from 1 up checks where its rows start.
TEST(GpuMoeLayer, SharedExpertInTheRoutedGemmsAgainstTheReference) {
  FP4MOE_REQUIRE_GPU();
  for (const char* name : {"glm5-small", "deepseek-v3-small"}) {
    for (int64_t T : {1, 2, 3, 5, 8, 64, 1000}) {
      const LayerCase c = make_case(name, T, 300 + uint64_t(T));
      for (const bool in_routed : {true, false}) {
        LayerOptions o;
        o.max_tokens = T == 8 ? 40 : T;  // (T = 8 below max_tokens: rows past the shared expert's are filled)
        o.finalize = FinalizeMode::split;
        o.shared_expert_in_routed_gemms = in_routed;
        MoeLayer layer(c.cfg, c.w, o);
        ASSERT_EQ(layer.core().shared_in_routed(), in_routed) << name;
        EXPECT_EQ(layer.describe(T).find("runs as routed expert") != std::string::npos, in_routed) << layer.describe(T);
        EXPECT_EQ(layer.describe(T).find("shared GEMM1") == std::string::npos, in_routed) << layer.describe(T);
        const GpuRun g = run_layer(layer, c);
        expect_matches_reference(c, g, std::string(name) + " T=" + std::to_string(T) +
                                           (in_routed ? " shared in routed" : " shared apart"));
        if (in_routed) {
          EXPECT_EQ(run_layer(layer, c).out, g.out) << name << " T=" << T << ": a second run differs";
          EXPECT_EQ(run_layer(layer, c, true).out, g.out) << name << " T=" << T << ": the graph replay differs";
        }
      }
      LayerOptions fused;
      fused.max_tokens = T;
      fused.finalize = FinalizeMode::fused;
      fused.shared_expert_in_routed_gemms = true;
      EXPECT_FALSE(MoeLayer(c.cfg, c.w, fused).core().shared_in_routed()) << name << ": the fused finalize adds no rows";
    }
  }
}

// The balanced split (LayerOptions::balanced_split): gpt-oss-120b's shapes on
// 16 experts, where the planner balances GEMM1 at three tokens (276 items of
// bm256 on 132 CTAs), and GLM-5's small shape with its shared expert among
// the routed ones; routing bitwise, the output against the reference, a second
// run and a graph replay bitwise the same.
TEST(GpuMoeLayer, BalancedSplitAgainstTheReference) {
  FP4MOE_REQUIRE_GPU();
  MoeConfig sixteen = preset("gpt-oss-120b");
  sixteen.name = "gpt-oss-120b-16-experts";
  sixteen.num_experts = 16;
  for (const MoeConfig& cfg : {sixteen, preset("glm5-small")}) {
    const Fp4Format format = cfg.expert_bias ? Fp4Format::mxfp4 : Fp4Format::nvfp4;
    LayerCase c = make_case(cfg, 8, 900, format);
    LayerOptions o;
    o.max_tokens = 8;
    o.use_tune_cache = false;  // the planner's tiles, whose balance the assertion below expects
    o.deterministic = true;
    o.balanced_split = true;
    o.shared_expert_in_routed_gemms = true;
    MoeLayer layer(c.cfg, c.w, o);
    for (int64_t T : {1, 2, 3, 5, 8}) {
      c.T = T;
      c.x = test::random_bf16(T * cfg.hidden, 901 + uint64_t(T));
      c.logits = gaussian_logits(T, cfg.num_experts, 902 + uint64_t(T));
      const std::string what = cfg.name + " T=" + std::to_string(T) + " balanced";
      if (T == 3 && cfg.expert_bias && test::first_device_has_wgmma()) {
        EXPECT_NE(layer.describe(T).find("balanced over the CTAs"), std::string::npos) << layer.describe(T);
      }
      const GpuRun g = run_layer(layer, c);
      expect_matches_reference(c, g, what);
      EXPECT_EQ(run_layer(layer, c).out, g.out) << what << ": a second run differs";
      EXPECT_EQ(run_layer(layer, c, /*graph=*/true).out, g.out) << what << ": the graph replay differs";
    }
  }
}

// gpt-oss-small at H = 288 and I = 160: like gpt-oss's 2880, not multiples of the K granule.
MoeConfig unaligned_gpt_oss() {
  MoeConfig c = preset("gpt-oss-small");
  c.name = "gpt-oss-small-unaligned";
  c.hidden = 288;
  c.intermediate = 160;
  return c;
}

// gpt-oss: MXFP4 experts with biases and the clamped SwiGLU in the GEMM
// epilogues; and a shape whose H and I (288, 160) are, like gpt-oss's 2880,
// not multiples of the K granule: run padded, the pad adding nothing.
// Hidden states of stddev 3 drive a share of the activations into the clamp.
TEST(GpuMoeLayer, GptOssBiasesClampAndUnalignedShapes) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig unaligned = unaligned_gpt_oss();
  struct Run {
    MoeConfig cfg;
    int64_t granule;  // LayerOptions::feature_granule: 0 pads 288 and 160 to 320 and 192 on sm_90 (512 and 256
                      // elsewhere), 128 to 384 and 256
  };
  for (const Run& run : {Run{preset("gpt-oss-small"), 0}, Run{unaligned, 0}, Run{unaligned, 128}}) {
    const MoeConfig& cfg = run.cfg;
    for (int64_t T : {1, 5, 64, 300}) {
      const LayerCase c = make_case(cfg, T, 200 + uint64_t(T), Fp4Format::mxfp4, 3.f);
      for (FinalizeMode mode : {FinalizeMode::fused, FinalizeMode::split}) {
        LayerOptions o;
        o.max_tokens = T;
        o.finalize = mode;
        o.feature_granule = run.granule;
        MoeLayer layer(c.cfg, c.w, o);
        if (cfg.hidden % 128) {
          EXPECT_NE(layer.describe(T).find("padded"), std::string::npos) << layer.describe(T);
        }
        const std::string what = cfg.name + " T=" + std::to_string(T) + (mode == FinalizeMode::split ? " split" : " fused") +
                                 (run.granule ? " granule " + std::to_string(run.granule) : "");
        const GpuRun g = run_layer(layer, c);
        expect_matches_reference(c, g, what);
        if (T == 64 && mode == FinalizeMode::split) {
          EXPECT_EQ(run_layer(layer, c, /*graph=*/true).out, g.out) << what << ": graph replay differs from eager";
        }
      }
    }
  }
}

// fp8 activations (W4A8) on gpt-oss's small and unaligned shapes: routing
// bitwise, the output against the reference of the identical arithmetic (each
// GEMM's input rows quantized to e4m3 as the layer's row copies do, weights
// exact), and beside it the error against the bf16 reference (what FP8
// activations cost). Split finalize is bitwise stable and a graph replays it.
// NVFP4 weights (GLM-5's small shape, with its shared expert): refused by
// name, and opted in, against the reference of the same rounded fold.
TEST(GpuMoeLayer, Fp8ActivationsAgainstTheirReference) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "fp8 activations run on sm_90's FP8 tiles";
  const MoeConfig unaligned = unaligned_gpt_oss();
  for (const auto& [cfg, format] : {std::pair{preset("gpt-oss-small"), Fp4Format::mxfp4}, {unaligned, Fp4Format::mxfp4},
                                    {preset("glm5-small"), Fp4Format::nvfp4}}) {
    for (int64_t T : {1, 5, 64, 300}) {
      const LayerCase c = make_case(cfg, T, 300 + uint64_t(T), format, 3.f);
      for (FinalizeMode mode : {FinalizeMode::fused, FinalizeMode::split}) {
        LayerOptions o;
        o.max_tokens = T;
        o.finalize = mode;
        o.activations = ActivationFormat::fp8;
        o.fp8_rounds_nvfp4 = format == Fp4Format::nvfp4;
        MoeLayer layer(c.cfg, c.w, o);
        EXPECT_NE(layer.describe(T).find("e4m3"), std::string::npos) << layer.describe(T);
        const std::string what = cfg.name + " " + to_string(format) + " T=" + std::to_string(T) +
                                 (mode == FinalizeMode::split ? " split" : " fused");
        const GpuRun g = run_layer(layer, c);
        const Routing route = route_reference(c.cfg, c.logits.data(), c.T, c.w.correction_bias);
        ASSERT_EQ(g.ids, route.topk_ids) << what;
        ASSERT_EQ(0, std::memcmp(g.weights.data(), route.topk_weights.data(), g.weights.size() * 4)) << what;
        std::vector<float> got(size_t(c.T * c.cfg.hidden));
        for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(g.out[i]);
        int64_t unwritten = 0;
        const double err = test::rel_frobenius(
            got, moe_forward_reference(c.cfg, c.w, c.x.values.data(), c.T, route, ActivationFormat::fp8), &unwritten);
        const double vs_bf16 =
            test::rel_frobenius(got, moe_forward_reference(c.cfg, c.w, c.x.values.data(), c.T, route), nullptr);
        EXPECT_EQ(unwritten, 0) << what;
        EXPECT_LT(err, 2e-2) << what;
        EXPECT_LT(vs_bf16, 6e-2) << what;
        std::printf("  %-40s fp8 rel err %.3e against its reference, %.3e against bf16's\n", what.c_str(), err, vs_bf16);
        if (T == 64 && mode == FinalizeMode::split) {
          EXPECT_EQ(run_layer(layer, c).out, g.out) << what << ": not bitwise stable";
          EXPECT_EQ(run_layer(layer, c, /*graph=*/true).out, g.out) << what << ": graph replay differs from eager";
        }
      }
    }
  }
  const LayerCase nv = make_case(preset("glm5-small"), 4, 9);
  LayerOptions o;
  o.activations = ActivationFormat::fp8;
  try {
    MoeLayer layer(nv.cfg, nv.w, o);
    ADD_FAILURE() << "an fp8 layer of NVFP4 weights was built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8 activations with nvfp4 weights round each weight"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("fp8_rounds_nvfp4"), std::string::npos) << e.what();
  }
}

// describe() counts a forward's launches, with the layer's routing and with
// the caller's: at 1 to 8 tokens routing and permutation are one launch
// (kRoutePermuteMaxTokens), as many as the permutation alone, and from 9
// tokens two.
TEST(GpuMoeLayer, DescribeCountsTheLaunches) {
  FP4MOE_REQUIRE_GPU();
  const LayerCase c = make_case("glm5-small", 9, 5);
  LayerOptions o;
  o.max_tokens = 9;
  MoeLayer layer(c.cfg, c.w, o);
  for (const int64_t T : {1, 8, 9}) {
    const std::string d = layer.describe(T);
    const size_t at = d.find("launches: "), with = d.find(" (", at);
    ASSERT_NE(at, std::string::npos) << d;
    ASSERT_NE(with, std::string::npos) << d;
    const int routed = std::stoi(d.substr(at + 10)), given = std::stoi(d.substr(with + 2));
    EXPECT_EQ(routed, given + (T > kernels::kRoutePermuteMaxTokens ? 1 : 0)) << d;
    EXPECT_GE(given, 4) << d;  // the permutation, GEMM1 (and its row copy), GEMM2, the finalize
    EXPECT_EQ(d.find("routing and permutation: one launch") != std::string::npos, T <= kernels::kRoutePermuteMaxTokens) << d;
  }
}

TEST(GpuMoeLayer, SplitFinalizeIsBitwiseStableAndGraphEqualsEager) {
  FP4MOE_REQUIRE_GPU();
  const LayerCase c = make_case("glm5-small", 300, 7);
  LayerOptions o;
  o.max_tokens = 512;
  o.deterministic = true;
  MoeLayer layer(c.cfg, c.w, o);
  ASSERT_EQ(layer.finalize_mode(), FinalizeMode::split);
  const GpuRun a = run_layer(layer, c), b = run_layer(layer, c), d = run_layer(layer, c);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out, d.out);
  const GpuRun g = run_layer(layer, c, /*graph=*/true);
  EXPECT_EQ(a.out, g.out) << "graph replay differs from eager execution";
  expect_matches_reference(c, a, "glm5-small T=300 deterministic");
}

// A layer keeps at most LayerOptions::max_plans forward plans: the least
// recently used is dropped and made again when asked for, the same plan (the
// output bitwise that of a layer that keeps every plan).
TEST(GpuMoeLayer, PlansBeyondMaxPlansAreDroppedAndMadeAgainTheSame) {
  FP4MOE_REQUIRE_GPU();
  const std::vector<LayerCase> cases = {make_case("glm5-small", 5, 11), make_case("glm5-small", 9, 11),
                                        make_case("glm5-small", 17, 11)};  // one set of weights (seed 11)
  LayerOptions o;
  o.max_tokens = 64;
  o.deterministic = true;
  o.max_plans = 2;
  MoeLayer bounded(cases[0].cfg, cases[0].w, o);
  o.max_plans = 0;
  MoeLayer kept(cases[0].cfg, cases[0].w, o);
  std::vector<GpuRun> first;
  for (const LayerCase& c : cases) first.push_back(run_layer(bounded, c));
  EXPECT_EQ(bounded.core().plans_held(), 2u);
  EXPECT_EQ(bounded.core().plans_made(), 3);
  const GpuRun again = run_layer(bounded, cases[0]);  // T = 5's plan was dropped for T = 17's
  EXPECT_EQ(bounded.core().plans_made(), 4);
  EXPECT_EQ(bounded.core().plans_held(), 2u);
  EXPECT_EQ(again.out, first[0].out);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(run_layer(kept, cases[i]).out, first[i].out) << "T=" << cases[i].T;
  EXPECT_EQ(kept.core().plans_held(), 3u);
  expect_matches_reference(cases[2], first[2], "glm5-small T=17, two plans kept");
}

// A NaN or Inf in one token's hidden state stays in that token's output row,
// which check_status names; the other rows are bitwise those of a clean run.
TEST(GpuMoeLayer, NonFiniteHiddenRowStaysInItsRowAndIsNamed) {
  FP4MOE_REQUIRE_GPU();
  for (const uint16_t bad : {uint16_t(0x7FC0), uint16_t(0xFF80)}) {  // NaN, -Inf
    LayerCase c = make_case("glm5-small", 5, 17);
    LayerOptions o;
    o.max_tokens = 64;
    o.deterministic = true;
    MoeLayer layer(c.cfg, c.w, o);
    const GpuRun clean = run_layer(layer, c);
    uint16_t& poisoned_value = c.x.bits[size_t(2 * c.cfg.hidden + 7)];  // token 2, column 7
    const uint16_t saved = poisoned_value;
    poisoned_value = bad;
    try {
      run_layer(layer, c);  // (its check_status throws)
      ADD_FAILURE() << "a non-finite hidden state was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the output of token 2 holds NaN or Inf"), std::string::npos) << e.what();
    }
    // the same forward again, its output read without the check
    DeviceBuffer<uint16_t> dx(c.x.bits), dout(size_t(c.T * c.cfg.hidden));
    DeviceBuffer<float> dl(c.logits);
    layer.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), dl.get(), c.T,
                  reinterpret_cast<__nv_bfloat16*>(dout.get()));
    EXPECT_THROW(layer.check_status(nullptr), Error);
    const std::vector<uint16_t> out = dout.download();
    const size_t H = size_t(c.cfg.hidden);
    for (size_t t = 0; t < size_t(c.T); ++t) {
      const bool poisoned = t == 2;
      int64_t finite = 0;
      for (size_t h = 0; h < H; ++h) finite += std::isfinite(bf16_to_float(out[t * H + h]));
      if (poisoned) {
        EXPECT_EQ(finite, 0) << "token 2's row should be NaN or Inf throughout";
      } else {
        EXPECT_EQ(0, std::memcmp(&out[t * H], &clean.out[t * H], H * 2)) << "token " << t << "'s row changed";
      }
    }
    // and the layer is clean for the next request
    poisoned_value = saved;
    EXPECT_EQ(run_layer(layer, c).out, clean.out);
  }
}

TEST(GpuMoeLayer, FullGlm5AtSixtyFourTokens) {
  FP4MOE_REQUIRE_GPU();
  const LayerCase c = make_case("glm5", 64, 11);
  LayerOptions o;
  o.max_tokens = 64;
  o.use_tune_cache = false;  // the planner's tiles, whose split the assertion below expects
  o.shared_expert_in_routed_gemms = false;  // the shared expert's own GEMMs, which split
  MoeLayer layer(c.cfg, c.w, o);
  const std::string plan = layer.describe(64);
  std::printf("%s", plan.c_str());
  // sm_90: the shared expert (one expert, 64 rows) has 16 to 32 items for 132 to 264 CTAs, so its K is split;
  // the forward below checks the split sums against the reference
  if (test::first_device_has_wgmma()) {
    EXPECT_NE(plan.find("K split"), std::string::npos) << plan;
  }
  expect_matches_reference(c, run_layer(layer, c), "glm5 (full) T=64");
}

TEST(GpuMoeLayer, BadInputsAreNamed) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case("mixtral-small", 4, 3);
  LayerOptions o;
  o.max_tokens = 4;
  MoeLayer layer(c.cfg, c.w, o);
  DeviceBuffer<uint16_t> dx(c.x.bits), dout(size_t(c.T * c.cfg.hidden));
  c.logits[5] = NAN;
  DeviceBuffer<float> dl(c.logits);
  EXPECT_THROW(layer.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), dl.get(), 5,
                             reinterpret_cast<__nv_bfloat16*>(dout.get())), Error);  // 5 > max_tokens
  layer.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), dl.get(), 4,
                reinterpret_cast<__nv_bfloat16*>(dout.get()));
  try {
    layer.check_status(nullptr);
    FAIL() << "a NaN logit was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
  MoeWeights wrong = c.w;
  wrong.experts.pop_back();
  EXPECT_THROW(MoeLayer(c.cfg, wrong, o), Error);
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

// Built when the device has about half of what the layer needs free: a clear
// out-of-memory error naming the layer, and every byte it took given back.
TEST(GpuMoeLayer, OutOfMemoryAtBuildIsNamedAndFreesWhatItTook) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = preset("glm5-small");
  const MoeWeights w = random_moe_weights(cfg, Fp4Format::nvfp4, 91);
  LayerOptions opts;
  opts.max_tokens = 8192;  // a workspace far above the driver's slack
  const auto free_bytes = [] {
    size_t f = 0, t = 0;
    FP4MOE_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    return int64_t(f);
  };
  int64_t need = 0;
  {
    const MoeLayer probe(cfg, w, opts);  // (also loads the modules a build uses)
    need = probe.weight_bytes() + probe.workspace_bytes();
  }
  ASSERT_GT(need, int64_t(64) << 20) << "the case should take far more than the driver's slack";
  // leave half of what the layer needs free
  const int64_t hog_bytes = free_bytes() - need / 2;
  ASSERT_GT(hog_bytes, 0);
  DeviceBuffer<uint8_t> hog(static_cast<size_t>(hog_bytes));
  const int64_t before = free_bytes();
  try {
    const MoeLayer layer(cfg, w, opts);
    ADD_FAILURE() << "a layer of " << need << " bytes was built with " << before << " bytes free";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("glm5-small"), std::string::npos) << m;
    EXPECT_NE(m.find("GiB free on device"), std::string::npos) << m;
  }
  // what the failed build took is back (a driver page or two of slack)
  EXPECT_NEAR(double(free_bytes()), double(before), double(int64_t(4) << 20));
  hog = DeviceBuffer<uint8_t>();
  const MoeLayer again(cfg, w, opts);  // the device works after the failure
  EXPECT_EQ(again.weight_bytes() + again.workspace_bytes(), need);
}

TEST(GpuMoeLayer, RouterLogitsFromTheRouterWeight) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case("glm5-small", 96, 21);
  const test::Bf16Matrix rw = test::random_bf16(c.cfg.num_experts * c.cfg.hidden, 22, 0.05f);
  c.w.router_weight = rw.bits;
  LayerOptions o;
  o.max_tokens = c.T;
  MoeLayer layer(c.cfg, c.w, o);
  ASSERT_TRUE(layer.has_router_weight());
  DeviceBuffer<uint16_t> dx(c.x.bits), dout(size_t(c.T * c.cfg.hidden));
  dout.fill_bytes(0xFF);
  layer.forward_from_hidden(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), c.T,
                            reinterpret_cast<__nv_bfloat16*>(dout.get()));
  layer.check_status(nullptr);
  Routing gpu;
  gpu.tokens = c.T;
  gpu.top_k = c.cfg.top_k;
  gpu.topk_ids.resize(size_t(c.T * c.cfg.top_k));
  gpu.topk_weights.resize(gpu.topk_ids.size());
  FP4MOE_CUDA_CHECK(cudaMemcpy(gpu.topk_ids.data(), layer.topk_ids(), gpu.topk_ids.size() * 4, cudaMemcpyDeviceToHost));
  FP4MOE_CUDA_CHECK(cudaMemcpy(gpu.topk_weights.data(), layer.topk_weights(), gpu.topk_weights.size() * 4, cudaMemcpyDeviceToHost));
  // cuBLAS sums in another order than the double reference: choices may differ only at near-ties.
  const std::vector<float> ref_logits = router_logits_reference(c.x.values.data(), c.T, c.cfg.hidden, c.w.router_weight);
  const Routing ref_route = route_reference(c.cfg, ref_logits.data(), c.T, c.w.correction_bias);
  int64_t differing_tokens = 0;
  for (int64_t t = 0; t < c.T; ++t)
    differing_tokens += !std::equal(gpu.topk_ids.begin() + t * c.cfg.top_k, gpu.topk_ids.begin() + (t + 1) * c.cfg.top_k,
                                    ref_route.topk_ids.begin() + t * c.cfg.top_k);
  EXPECT_LE(differing_tokens, 2) << "router choices from cuBLAS logits differ for " << differing_tokens << " of " << c.T << " tokens";
  const std::vector<float> ref = moe_forward_reference(c.cfg, c.w, c.x.values.data(), c.T, gpu);
  const std::vector<uint16_t> bits = dout.download();
  std::vector<float> got(bits.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(bits[i]);
  int64_t unwritten = 0;
  EXPECT_LT(test::rel_frobenius(got, ref, &unwritten), 1e-2);
  EXPECT_EQ(unwritten, 0);
}

// gpt-oss's router has a bias: logits = hidden . W^T + b on the device too.
TEST(GpuMoeLayer, RouterBiasJoinsTheDeviceLogits) {
  FP4MOE_REQUIRE_GPU();
  LayerCase c = make_case(preset("gpt-oss-small"), 64, 31, Fp4Format::mxfp4);
  // (a seed of its own: the hidden states are drawn from seed 32)
  c.w.router_weight = test::random_bf16(c.cfg.num_experts * c.cfg.hidden, 1031, 0.05f).bits;
  c.w.router_bias.resize(size_t(c.cfg.num_experts));
  for (size_t e = 0; e < c.w.router_bias.size(); ++e) c.w.router_bias[e] = e % 2 ? 3.f : -3.f;  // odd experts win
  LayerOptions o;
  o.max_tokens = c.T;
  MoeLayer layer(c.cfg, c.w, o);
  DeviceBuffer<uint16_t> dx(c.x.bits), dout(size_t(c.T * c.cfg.hidden));
  layer.forward_from_hidden(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), c.T,
                            reinterpret_cast<__nv_bfloat16*>(dout.get()));
  layer.check_status(nullptr);
  std::vector<int32_t> ids(size_t(c.T * c.cfg.top_k));
  FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), layer.topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
  const std::vector<float> ref_logits =
      router_logits_reference(c.x.values.data(), c.T, c.cfg.hidden, c.w.router_weight, c.w.router_bias);
  const Routing ref = route_reference(c.cfg, ref_logits.data(), c.T, {});
  // the bias sets the chosen experts apart (6 against logits of stddev 0.8): the same set per token
  const int64_t k = c.cfg.top_k;
  int64_t odd = 0, differing_tokens = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int32_t> a(ids.begin() + t * k, ids.begin() + (t + 1) * k), b(ref.topk_ids.begin() + t * k, ref.topk_ids.begin() + (t + 1) * k);
    std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
    differing_tokens += a != b;
    for (int32_t id : a) odd += id % 2 == 1;
  }
  EXPECT_EQ(odd, int64_t(ids.size())) << "the router bias did not reach the logits";
  EXPECT_EQ(differing_tokens, 0) << "expert choices differ from the reference";
}

}  // namespace
}  // namespace fp4moe
