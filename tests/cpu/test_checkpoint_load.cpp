// ModelOpt NVFP4 checkpoints: save_moe_layer then load_moe_layer gives back
// the same layer bit for bit, and every kind of bad file gets an error that
// names the file, the tensor and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "checkpoint_test_util.hpp"
#include "fp4moe/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe {
namespace {

using test::rewrite;
using test::Stored;
using test::TempDir;
constexpr int64_t kLayer = 2;

MoeCheckpointLayer sample_layer(const std::string& preset_name, uint64_t seed) {
  MoeCheckpointLayer l;
  l.config = preset(preset_name);
  l.layer = kLayer;
  l.weights = random_moe_weights(l.config, Fp4Format::nvfp4, seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 0.05f);
  l.weights.router_weight.resize(size_t(l.config.num_experts * l.config.hidden));
  for (uint16_t& v : l.weights.router_weight) v = bf16_from_float(d(rng));
  return l;
}

void expect_same_matrix(const Fp4Matrix& got, const Fp4Matrix& want, const std::string& what) {
  EXPECT_EQ(got.rows, want.rows) << what;
  EXPECT_EQ(got.cols, want.cols) << what;
  EXPECT_EQ(got.packed, want.packed) << what;
  EXPECT_EQ(got.scales, want.scales) << what;
  EXPECT_EQ(got.weight_scale_2, want.weight_scale_2) << what;
}

std::string expert(int64_t e, const std::string& rest) {
  return "model.layers.2.mlp.experts." + std::to_string(e) + "." + rest;
}

class CheckpointLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    original = sample_layer("glm5-small", 5);
    save_moe_layer(dir / "ckpt", original);
  }
  std::string ckpt() const { return dir / "ckpt"; }
  TempDir dir;
  MoeCheckpointLayer original;
};

TEST_F(CheckpointLoad, SaveThenLoadGivesTheSameLayer) {
  const MoeCheckpointLayer got = load_moe_layer(ckpt(), kLayer);
  const MoeConfig& c = got.config;
  EXPECT_EQ(c.hidden, original.config.hidden);
  EXPECT_EQ(c.intermediate, original.config.intermediate);
  EXPECT_EQ(c.num_experts, original.config.num_experts);
  EXPECT_EQ(c.top_k, original.config.top_k);
  EXPECT_EQ(c.scoring, Scoring::sigmoid);
  EXPECT_TRUE(c.use_correction_bias);
  EXPECT_EQ(c.routed_scaling_factor, 2.5f);
  EXPECT_EQ(c.shared_intermediate, original.config.shared_intermediate);
  ASSERT_EQ(got.weights.experts.size(), original.weights.experts.size());
  for (size_t e = 0; e < got.weights.experts.size(); ++e) {
    expect_same_matrix(got.weights.experts[e].gate, original.weights.experts[e].gate, "gate " + std::to_string(e));
    expect_same_matrix(got.weights.experts[e].up, original.weights.experts[e].up, "up " + std::to_string(e));
    expect_same_matrix(got.weights.experts[e].down, original.weights.experts[e].down, "down " + std::to_string(e));
  }
  ASSERT_TRUE(got.weights.has_shared);
  expect_same_matrix(got.weights.shared.gate, original.weights.shared.gate, "shared gate");
  EXPECT_EQ(got.weights.router_weight, original.weights.router_weight);
  EXPECT_EQ(got.weights.correction_bias, original.weights.correction_bias);
  // Gate and up of one expert keep their own scales (the layer applies each exactly).
  EXPECT_NE(got.weights.experts[0].gate.weight_scale_2, got.weights.experts[0].up.weight_scale_2);
}

TEST_F(CheckpointLoad, LoadedLayerComputesWhatTheOriginalDoes) {
  const MoeCheckpointLayer got = load_moe_layer(ckpt(), kLayer);
  const int64_t T = 6, H = original.config.hidden;
  std::vector<float> x(size_t(T * H));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& v : x) v = d(rng);
  const std::vector<float> logits = router_logits_reference(x.data(), T, H, got.weights.router_weight);
  const Routing r = route_reference(got.config, logits.data(), T, got.weights.correction_bias);
  const std::vector<float> a = moe_forward_reference(got.config, got.weights, x.data(), T, r);
  const std::vector<float> b = moe_forward_reference(original.config, original.weights, x.data(), T, r);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  EXPECT_LT(std::sqrt(num / den), 1e-6) << "1/weight_scale_2 differs from the quantizer's global scale by at most an ulp";
}

TEST_F(CheckpointLoad, MissingOrMistypedTensorsAreNamed) {
  rewrite(ckpt(), [](auto& t) { t.erase(expert(3, "up_proj.weight_scale")); });
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "no tensor 'model.layers.2.mlp.experts.3.up_proj.weight_scale'");
  rewrite(ckpt(), [](auto& t) { t[expert(3, "up_proj.weight_scale")] = t[expert(3, "gate_proj.weight_scale")]; t[expert(3, "up_proj.weight_scale")].dtype = io::Dtype::U8; });
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "tensor 'model.layers.2.mlp.experts.3.up_proj.weight_scale' in " + ckpt() +
                                                            "/model.safetensors has dtype U8, expected F8_E4M3");
}

TEST_F(CheckpointLoad, WrongShapesAreNamedWithTheirSource) {
  rewrite(ckpt(), [](auto& t) {
    Stored& w = t[expert(1, "down_proj.weight")];
    w.shape = {w.shape[1], w.shape[0]};
  });
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "experts.1.down_proj.weight' in");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "has shape [64, 512], expected [512, 64] ([H, I] = [512, 128] from config.json");
}

TEST_F(CheckpointLoad, NanAndNegativeScalesAreRefused) {
  rewrite(ckpt(), [](auto& t) {
    const float nan = NAN;
    std::memcpy(t[expert(4, "gate_proj.weight_scale_2")].bytes.data(), &nan, 4);
  });
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "experts.4.gate_proj.weight_scale_2' in " + ckpt() +
                                                            "/model.safetensors: weight_scale_2 = nan is not a finite positive number");
  save_moe_layer(dir / "b", original);
  rewrite(dir / "b", [](auto& t) { t[expert(0, "down_proj.weight_scale")].bytes[2 * 8 + 3] = 0x7F; });
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "b", kLayer), "experts.0.down_proj.weight_scale' in " + (dir / "b") +
                                                               "/model.safetensors: block scale at row 2, block 3 is NaN (byte 0x7f)");
  save_moe_layer(dir / "c", original);
  rewrite(dir / "c", [](auto& t) { t[expert(0, "up_proj.weight_scale")].bytes[5] = 0xB8; });
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "c", kLayer), "block scale at row 0, block 5 is negative (byte 0xb8)");
  save_moe_layer(dir / "d", original);
  rewrite(dir / "d", [](auto& t) {
    const float big = INFINITY;
    std::memcpy(t["model.layers.2.mlp.gate.e_score_correction_bias"].bytes.data() + 4 * 7, &big, 4);
  });
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "d", kLayer), "e_score_correction_bias' in " + (dir / "d") + "/model.safetensors: value at expert 7 is inf");
}

TEST_F(CheckpointLoad, UnquantizedExpertsPointToQuantize) {
  rewrite(ckpt(), [](auto& t) {
    Stored& w = t[expert(2, "gate_proj.weight")];
    w.dtype = io::Dtype::BF16;
    w.shape[1] /= 2;
  });
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "experts.2.gate_proj.weight' in " + ckpt() +
                                                            "/model.safetensors is BF16, not quantized");
}

TEST_F(CheckpointLoad, TruncatedAndCorruptFilesNameTheFile) {
  const std::string file = ckpt() + "/model.safetensors";
  std::vector<uint8_t> bytes = test::read_file(file);
  test::write_file(file, std::vector<uint8_t>(bytes.begin(), bytes.begin() + int64_t(bytes.size() / 2)));
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), file + ": tensor '");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "run past the data section");
  test::write_file(file, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100));
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), file + ": header length");
  bytes[8] = 'x';
  test::write_file(file, bytes);
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), file + ": the safetensors header does not start with '{'");
}

TEST_F(CheckpointLoad, QuantConfigIsChecked) {
  const std::string q = ckpt() + "/hf_quant_config.json";
  test::write_text(q, R"({"quantization":{"quant_algo":"FP8","group_size":16}})");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), q + ": quant_algo is 'FP8'; fp4moe reads NVFP4 checkpoints");
  test::write_text(q, R"({"quantization":{"quant_algo":"NVFP4","group_size":32}})");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), q + ": group_size is 32; NVFP4 blocks are 16 elements");
  test::write_text(q, R"({"producer":{}})");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), q + ": has no \"quantization\" object");
  std::filesystem::remove(q);
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), kLayer), "no hf_quant_config.json");
}

TEST_F(CheckpointLoad, LayersWithoutExpertsAndConfigMismatches) {
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), 0), "layer 0 has no routed experts");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), 0), "it is a dense layer (first_k_dense_replace = 2); MoE layers here: 2");
  EXPECT_ERROR_CONTAINS(load_moe_layer(ckpt(), 7), "layer 7 does not exist (num_hidden_layers = 3)");
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "nowhere", kLayer), "not a checkpoint directory");

  MoeCheckpointLayer fewer = original;
  fewer.config.num_experts = 16;
  fewer.weights.experts.resize(16);
  fewer.weights.router_weight.resize(size_t(16 * fewer.config.hidden));
  fewer.weights.correction_bias.resize(16);
  save_moe_layer(dir / "fewer", fewer);
  std::filesystem::copy_file(ckpt() + "/config.json", dir / "fewer" + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "fewer", kLayer), "no tensor 'model.layers.2.mlp.experts.16.gate_proj.weight'");
  save_moe_layer(dir / "more", original);
  test::write_text(dir / "more" + "/config.json",
                   R"({"hidden_size":512,"moe_intermediate_size":128,"n_routed_experts":16,"num_experts_per_tok":8,)"
                   R"("scoring_func":"sigmoid","topk_method":"noaux_tc","routed_scaling_factor":2.5,"n_shared_experts":1})");
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "more", kLayer), "layer 2 holds expert 16, but config.json has 16 routed experts");
  test::write_text(dir / "more" + "/config.json",
                   R"({"hidden_size":512,"moe_intermediate_size":128,"n_routed_experts":32,"num_experts_per_tok":8,)"
                   R"("scoring_func":"sigmoid","topk_method":"noaux_tc","routed_scaling_factor":2.5})");
  EXPECT_ERROR_CONTAINS(load_moe_layer(dir / "more", kLayer), "holds shared_experts, but config.json has no n_shared_experts");
}

TEST_F(CheckpointLoad, SaveNeverOverwrites) {
  EXPECT_ERROR_CONTAINS(save_moe_layer(ckpt(), original), "exists and is not empty");
  MoeCheckpointLayer bad = original;
  bad.weights.router_weight.clear();
  EXPECT_ERROR_CONTAINS(save_moe_layer(dir / "new", bad), "router_weight has 0 values");
  EXPECT_FALSE(std::filesystem::exists(dir / "new"));
  EXPECT_EQ(test::entries(dir.path()), std::vector<std::string>{"ckpt"}) << "no temporary directory left";
}

TEST(CheckpointLoadSoftmax, MixtralStyleConfigWithoutBiasOrSharedExpert) {
  TempDir dir;
  MoeCheckpointLayer l = sample_layer("mixtral-small", 9);
  save_moe_layer(dir / "m", l);
  const MoeCheckpointLayer got = load_moe_layer(dir / "m", kLayer);
  EXPECT_EQ(got.config.scoring, Scoring::softmax);
  EXPECT_FALSE(got.weights.has_shared);
  EXPECT_TRUE(got.weights.correction_bias.empty());
  EXPECT_EQ(got.weights.experts.back().down.packed, l.weights.experts.back().down.packed);
}

}  // namespace
}  // namespace fp4moe
