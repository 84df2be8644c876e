// gpt-oss on the CPU reference: the presets, transformers' config.json, and the
// layer with its clamped SwiGLU and expert biases against the definition
// written out here independently (transformers' GptOssExperts):
//   gate_up = x W13^T + b13; g = min(gate, limit); u = clamp(up, -limit, limit)
//   h = (u + 1) * g * sigmoid(alpha g);  y = h W2^T + b2
// The router: softmax over the k largest logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "fp4moe/model.hpp"
#include "fp4moe/reference.hpp"
#include "test_util.hpp"

namespace fp4moe {
namespace {

TEST(GptOss, PresetsAndConfig) {
  const MoeConfig big = preset("gpt-oss-120b");
  EXPECT_EQ(big.hidden, 2880);
  EXPECT_EQ(big.intermediate, 2880);
  EXPECT_EQ(big.num_experts, 128);
  EXPECT_EQ(big.top_k, 4);
  EXPECT_EQ(big.activation, Activation::clamped_swiglu);
  EXPECT_FLOAT_EQ(big.swiglu_limit, 7.0f);
  EXPECT_FLOAT_EQ(big.swiglu_alpha, 1.702f);
  EXPECT_TRUE(big.expert_bias);
  EXPECT_EQ(preset("gpt-oss-20b").num_experts, 32);
  const std::filesystem::path p = std::filesystem::temp_directory_path() / "fp4moe_gpt_oss_config.json";
  std::ofstream(p) << R"({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
                        "num_local_experts": 32, "num_experts_per_tok": 4, "swiglu_limit": 7.0})";
  const MoeConfig c = config_from_hf_json(p.string());
  EXPECT_EQ(c.num_experts, 32);
  EXPECT_EQ(c.activation, Activation::clamped_swiglu);
  EXPECT_TRUE(c.expert_bias);
  EXPECT_EQ(c.scoring, Scoring::softmax);
  MoeConfig bad = big;
  bad.swiglu_limit = -1.f;
  EXPECT_NE(test::error_of([&] { bad.validate(); }).find("swiglu_limit"), std::string::npos);
}

TEST(GptOss, LayerWithClampedSwigluAndBiasesMatchesTheDefinition) {
  const MoeConfig c = preset("gpt-oss-small");
  const MoeWeights w = random_moe_weights(c, Fp4Format::mxfp4, 3);
  const int64_t T = 6, H = c.hidden, I = c.intermediate, k = c.top_k;
  std::mt19937_64 rng(4);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(size_t(T * H)), logits(size_t(T * c.num_experts));
  for (float& v : x) v = 3.f * d(rng);  // large enough that the clamps act
  for (float& v : logits) v = d(rng);
  const Routing r = route_reference(c, logits.data(), T, {});
  const std::vector<float> got = moe_forward_reference(c, w, x.data(), T, r);

  int64_t clamped = 0;
  std::vector<double> want(size_t(T * H), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    // the router: the k largest logits, softmax over them
    std::vector<int> order(size_t(c.num_experts));
    for (int e = 0; e < c.num_experts; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[size_t(t * c.num_experts + a)] > logits[size_t(t * c.num_experts + b)]; });
    double m = logits[size_t(t * c.num_experts + order[0])], sum = 0;
    for (int j = 0; j < k; ++j) sum += std::exp(double(logits[size_t(t * c.num_experts + order[size_t(j)])]) - m);
    for (int j = 0; j < k; ++j) {
      const int e = order[size_t(j)];
      EXPECT_EQ(r.topk_ids[size_t(t * k + j)], e);
      const double weight = std::exp(double(logits[size_t(t * c.num_experts + e)]) - m) / sum;
      EXPECT_NEAR(r.topk_weights[size_t(t * k + j)], weight, 1e-6);
      const ExpertWeights& ew = w.experts[size_t(e)];
      const std::vector<float> g = dequantize(ew.gate), u = dequantize(ew.up), dn = dequantize(ew.down);
      std::vector<double> h(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double gv = ew.gate_bias[size_t(i)], uv = ew.up_bias[size_t(i)];
        for (int64_t q = 0; q < H; ++q) gv += double(g[size_t(i * H + q)]) * x[size_t(t * H + q)];
        for (int64_t q = 0; q < H; ++q) uv += double(u[size_t(i * H + q)]) * x[size_t(t * H + q)];
        clamped += gv > 7.0 || std::fabs(uv) > 7.0;
        gv = std::min(gv, 7.0);
        uv = std::max(-7.0, std::min(uv, 7.0));
        h[size_t(i)] = (uv + 1.0) * gv / (1.0 + std::exp(-1.702 * gv));
      }
      for (int64_t n = 0; n < H; ++n) {
        double y = ew.down_bias[size_t(n)];
        for (int64_t i = 0; i < I; ++i) y += double(dn[size_t(n * I + i)]) * h[size_t(i)];
        want[size_t(t * H + n)] += double(r.topk_weights[size_t(t * k + j)]) * y;
      }
    }
  }
  EXPECT_GT(clamped, 0) << "the inputs should reach the clamps";
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  EXPECT_LT(std::sqrt(num / den), 1e-6);
}

// The reference of an fp8 layer: each GEMM input quantized to e4m3 per row.
// Hidden states already on e4m3 with one scale per row pass GEMM1's
// quantization unchanged, so what remains is the intermediate's, which costs
// about 2.5e-2 (docs/fp8.md); bf16 is the plain reference bit for bit.
TEST(GptOss, Fp8ReferenceQuantizesEachGemmInput) {
  const MoeConfig c = preset("gpt-oss-small");
  const MoeWeights w = random_moe_weights(c, Fp4Format::mxfp4, 5);
  const int64_t T = 9, H = c.hidden;
  std::mt19937_64 rng(6);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(size_t(T * H)), logits(size_t(T * c.num_experts));
  for (float& v : x) v = 2.f * d(rng);
  for (float& v : logits) v = d(rng);
  const Routing r = route_reference(c, logits.data(), T, {});
  const std::vector<float> plain = moe_forward_reference(c, w, x.data(), T, r);
  EXPECT_EQ(moe_forward_reference(c, w, x.data(), T, r, ActivationFormat::bf16), plain);
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
    return std::sqrt(num / den);
  };
  const std::vector<float> fp8 = moe_forward_reference(c, w, x.data(), T, r, ActivationFormat::fp8);
  const double cost = rel(fp8, plain);
  EXPECT_GT(cost, 1e-2);
  EXPECT_LT(cost, 6e-2);
  // x on e4m3 x 2^-4 (every row's largest at 448 x 2^-4: the scale is exactly 2^-4)
  std::vector<float> xq(x.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      xq[size_t(t * H + h)] = h == 0 ? 28.f : e4m3_decode(e4m3_encode(std::clamp(16.f * x[size_t(t * H + h)], -448.f, 448.f))) / 16.f;
  const std::vector<float> fp8_q = moe_forward_reference(c, w, xq.data(), T, r, ActivationFormat::fp8);
  const double intermediate_only = rel(fp8_q, moe_forward_reference(c, w, xq.data(), T, r));
  EXPECT_GT(intermediate_only, 5e-3);
  EXPECT_LT(intermediate_only, cost);
  std::printf("  fp8 activations cost %.3e; the intermediate's quantization alone %.3e\n", cost, intermediate_only);
  EXPECT_EQ(parse_activation_format("fp8"), ActivationFormat::fp8);
  EXPECT_THROW(parse_activation_format("int8"), Error);
  try {
    (void)parse_activation_format("int8");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'int8'"), std::string::npos) << e.what();
  }
}

TEST(GptOss, MissingBiasesAreNamed) {
  const MoeConfig c = preset("gpt-oss-small");
  MoeWeights w = random_moe_weights(c, Fp4Format::mxfp4, 5);
  w.experts[3].down_bias.clear();
  std::vector<float> x(size_t(c.hidden), 0.5f), logits(size_t(c.num_experts), 0.f);
  logits[3] = 5.f;
  const Routing r = route_reference(c, logits.data(), 1, {});
  EXPECT_NE(test::error_of([&] { moe_forward_reference(c, w, x.data(), 1, r); }).find("expert 3 down_bias has 0 values"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4moe

#include "checkpoint_test_util.hpp"
#include "fp4moe/checkpoint.hpp"

namespace fp4moe {
namespace {

// gpt-oss's own layout, written here from known weights: gate and up rows
// interleaved in gate_up_proj_{blocks,scales,bias}, the router's weight and bias.
void write_gpt_oss_checkpoint(const std::string& dir, const MoeConfig& c, const MoeWeights& w, int64_t layer) {
  const int64_t E = c.num_experts, H = c.hidden, I = c.intermediate;
  std::vector<uint8_t> gu_blocks, gu_scales, dn_blocks, dn_scales;
  std::vector<uint16_t> gu_bias, dn_bias;
  for (const ExpertWeights& x : w.experts) {
    for (int64_t i = 0; i < I; ++i)
      for (const Fp4Matrix* m : {&x.gate, &x.up}) {
        gu_blocks.insert(gu_blocks.end(), m->packed.begin() + i * (H / 2), m->packed.begin() + (i + 1) * (H / 2));
        gu_scales.insert(gu_scales.end(), m->scales.begin() + i * (H / 32), m->scales.begin() + (i + 1) * (H / 32));
      }
    for (int64_t i = 0; i < I; ++i) {
      gu_bias.push_back(bf16_from_float(x.gate_bias[size_t(i)]));
      gu_bias.push_back(bf16_from_float(x.up_bias[size_t(i)]));
    }
    dn_blocks.insert(dn_blocks.end(), x.down.packed.begin(), x.down.packed.end());
    dn_scales.insert(dn_scales.end(), x.down.scales.begin(), x.down.scales.end());
    for (float v : x.down_bias) dn_bias.push_back(bf16_from_float(v));
  }
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  using io::Dtype;
  auto t = [](std::string name, Dtype d, std::vector<int64_t> shape, const auto& v) {
    return io::TensorToWrite{std::move(name), d, std::move(shape), v.data(), uint64_t(v.size() * sizeof(v[0]))};
  };
  io::write_safetensors(
      dir + "/model.safetensors",
      {t(p + "experts.gate_up_proj_blocks", Dtype::U8, {E, 2 * I, H / 32, 16}, gu_blocks),
       t(p + "experts.gate_up_proj_scales", Dtype::U8, {E, 2 * I, H / 32}, gu_scales),
       t(p + "experts.gate_up_proj_bias", Dtype::BF16, {E, 2 * I}, gu_bias),
       t(p + "experts.down_proj_blocks", Dtype::U8, {E, H, I / 32, 16}, dn_blocks),
       t(p + "experts.down_proj_scales", Dtype::U8, {E, H, I / 32}, dn_scales),
       t(p + "experts.down_proj_bias", Dtype::BF16, {E, H}, dn_bias),
       t(p + "router.weight", Dtype::BF16, {E, H}, w.router_weight),
       t(p + "router.bias", Dtype::F32, {E}, w.router_bias)});
  test::write_text(dir + "/config.json",
                   "{\"model_type\": \"gpt_oss\", \"hidden_size\": " + std::to_string(H) + ", \"intermediate_size\": " +
                       std::to_string(I) + ", \"num_local_experts\": " + std::to_string(E) +
                       ", \"num_experts_per_tok\": 4, \"num_hidden_layers\": 2, \"swiglu_limit\": 7.0,"
                       " \"quantization_config\": {\"quant_method\": \"mxfp4\"}}");
}

TEST(GptOss, OwnCheckpointLayoutLoadsTheSameWeights) {
  const MoeConfig c = preset("gpt-oss-small");
  MoeWeights w = random_moe_weights(c, Fp4Format::mxfp4, 9);
  w.router_weight.resize(size_t(c.num_experts * c.hidden));
  for (size_t i = 0; i < w.router_weight.size(); ++i) w.router_weight[i] = bf16_from_float(float(int(i % 7) - 3) / 16.f);
  for (int64_t e = 0; e < c.num_experts; ++e) w.router_bias.push_back(float(e) / 8.f);
  const test::TempDir d;
  write_gpt_oss_checkpoint(d.path(), c, w, 1);
  const MoeCheckpointLayer l = load_moe_layer(d.path(), 1);
  EXPECT_EQ(l.config.activation, Activation::clamped_swiglu);
  EXPECT_TRUE(l.config.expert_bias);
  ASSERT_EQ(l.weights.experts.size(), w.experts.size());
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const ExpertWeights& a = l.weights.experts[e];
    const ExpertWeights& b = w.experts[e];
    EXPECT_EQ(a.gate.packed, b.gate.packed) << "expert " << e << " gate: the even rows";
    EXPECT_EQ(a.up.packed, b.up.packed) << "expert " << e << " up: the odd rows";
    EXPECT_EQ(a.up.scales, b.up.scales);
    EXPECT_EQ(a.down.packed, b.down.packed);
    EXPECT_EQ(a.gate_bias, b.gate_bias);
    EXPECT_EQ(a.up_bias, b.up_bias);
    EXPECT_EQ(a.down_bias, b.down_bias);
  }
  EXPECT_EQ(l.weights.router_weight, w.router_weight);
  EXPECT_EQ(l.weights.router_bias, w.router_bias);
  EXPECT_NE(test::error_of([&] { load_moe_layer(d.path(), 0); }).find("layer 0 has no tensor"), std::string::npos);
}

TEST(GptOss, InspectChecksTheLayoutAndNamesWhatIsWrong) {
  const MoeConfig c = preset("gpt-oss-small");
  MoeWeights w = random_moe_weights(c, Fp4Format::mxfp4, 10);
  w.router_weight.assign(size_t(c.num_experts * c.hidden), bf16_from_float(0.25f));
  w.router_bias.assign(size_t(c.num_experts), 0.f);
  const test::TempDir d;
  write_gpt_oss_checkpoint(d.path(), c, w, 1);
  const CheckpointSummary s = inspect_checkpoint(d.path());
  EXPECT_TRUE(s.usable());
  EXPECT_EQ(s.moe_layers, std::vector<int64_t>{1});
  std::string all;
  for (const std::string& l : s.lines) all += l + "\n";
  EXPECT_NE(all.find("MXFP4, group 32 (gpt-oss layout"), std::string::npos) << all;
  EXPECT_NE(all.find("--layer 1` runs layer 1 (GPU"), std::string::npos) << all;
  // a config.json whose expert width disagrees with the tensors: the tensor and the shape are named
  test::write_text(d.path() + "/config.json",
                   "{\"model_type\": \"gpt_oss\", \"hidden_size\": " + std::to_string(c.hidden) +
                       ", \"intermediate_size\": " + std::to_string(2 * c.intermediate) + ", \"num_local_experts\": " +
                       std::to_string(c.num_experts) + ", \"num_experts_per_tok\": 4, \"num_hidden_layers\": 2,"
                       " \"quantization_config\": {\"quant_method\": \"mxfp4\"}}");
  const CheckpointSummary bad = inspect_checkpoint(d.path());
  EXPECT_FALSE(bad.usable());
  ASSERT_FALSE(bad.problems.empty());
  EXPECT_NE(bad.problems.front().find("gate_up_proj_blocks"), std::string::npos) << bad.problems.front();
}

}  // namespace
}  // namespace fp4moe
