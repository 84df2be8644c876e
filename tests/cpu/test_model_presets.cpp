#include <gtest/gtest.h>

#include "test_util.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "fp4moe/error.hpp"
#include "fp4moe/model.hpp"

namespace fp4moe {
namespace {

using test::error_of;

TEST(ModelPreset, AllPresetsValidate) {
  const auto names = preset_names();
  ASSERT_EQ(names.size(), 9u);  // glm5, deepseek-v3, mixtral and their -small forms; gpt-oss 120b, 20b, small
  for (const std::string& n : names) {
    const MoeConfig c = preset(n);
    EXPECT_EQ(c.name, n);
    EXPECT_NO_THROW(c.validate()) << n;
  }
}

TEST(ModelPreset, FullShapesMatchTheModels) {
  const MoeConfig g = preset("glm5");
  EXPECT_EQ(g.hidden, 6144);
  EXPECT_EQ(g.intermediate, 2048);
  EXPECT_EQ(g.num_experts, 256);
  EXPECT_EQ(g.top_k, 8);
  EXPECT_EQ(g.scoring, Scoring::sigmoid);
  EXPECT_TRUE(g.use_correction_bias);
  EXPECT_EQ(g.n_group, 1);
  EXPECT_EQ(g.topk_group, 1);
  EXPECT_TRUE(g.renormalize);
  EXPECT_EQ(g.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(g.shared_expert);
  EXPECT_EQ(g.shared_intermediate, 2048);

  const MoeConfig d = preset("deepseek-v3");
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.intermediate, 2048);
  EXPECT_EQ(d.num_experts, 256);
  EXPECT_EQ(d.top_k, 8);
  EXPECT_EQ(d.scoring, Scoring::sigmoid);
  EXPECT_TRUE(d.use_correction_bias);
  EXPECT_EQ(d.n_group, 8);
  EXPECT_EQ(d.topk_group, 4);
  EXPECT_TRUE(d.renormalize);
  EXPECT_EQ(d.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(d.shared_expert);
  EXPECT_EQ(d.shared_intermediate, 2048);

  const MoeConfig m = preset("mixtral");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.intermediate, 14336);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.scoring, Scoring::softmax);
  EXPECT_FALSE(m.use_correction_bias);
  EXPECT_TRUE(m.renormalize);
  EXPECT_EQ(m.routed_scaling_factor, 1.0f);
  EXPECT_FALSE(m.shared_expert);
}

TEST(ModelPreset, SmallFormsKeepTheRoutingRule) {
  for (const char* base : {"glm5", "deepseek-v3", "mixtral"}) {
    const MoeConfig full = preset(base);
    const MoeConfig small = preset(std::string(base) + "-small");
    EXPECT_EQ(small.scoring, full.scoring) << base;
    EXPECT_EQ(small.top_k, full.top_k) << base;
    EXPECT_EQ(small.n_group, full.n_group) << base;
    EXPECT_EQ(small.topk_group, full.topk_group) << base;
    EXPECT_EQ(small.use_correction_bias, full.use_correction_bias) << base;
    EXPECT_EQ(small.renormalize, full.renormalize) << base;
    EXPECT_EQ(small.routed_scaling_factor, full.routed_scaling_factor) << base;
    EXPECT_EQ(small.shared_expert, full.shared_expert) << base;
    EXPECT_LT(small.hidden * small.intermediate * small.num_experts,
              full.hidden * full.intermediate * full.num_experts / 100)
        << base;
  }
  const MoeConfig d = preset("deepseek-v3-small");
  EXPECT_EQ(d.num_experts % d.n_group, 0);
  EXPECT_GE(d.num_experts / d.n_group, 2);
}

TEST(ModelPreset, UnknownPresetListsKnownNames) {
  const std::string msg = error_of([] { preset("llama-moe"); });
  EXPECT_NE(msg.find("llama-moe"), std::string::npos) << msg;
  for (const std::string& n : preset_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

struct BadField {
  const char* base;
  std::function<void(MoeConfig&)> mutate;
  const char* expect;
};

TEST(ModelConfig, ValidateNamesTheBadFieldAndValue) {
  const BadField cases[] = {
      {"glm5", [](MoeConfig& c) { c.hidden = 0; }, "hidden = 0"},
      {"glm5", [](MoeConfig& c) { c.hidden = 6160; }, "hidden = 6160"},
      {"glm5", [](MoeConfig& c) { c.intermediate = -32; }, "intermediate = -32"},
      {"glm5", [](MoeConfig& c) { c.intermediate = 2040; }, "intermediate = 2040"},
      {"glm5", [](MoeConfig& c) { c.num_experts = 0; }, "num_experts = 0"},
      {"glm5", [](MoeConfig& c) { c.top_k = 0; }, "top_k = 0"},
      {"glm5", [](MoeConfig& c) { c.top_k = 300; }, "top_k = 300"},
      {"deepseek-v3", [](MoeConfig& c) { c.n_group = 0; }, "n_group = 0"},
      {"deepseek-v3", [](MoeConfig& c) { c.n_group = 3; }, "n_group = 3"},
      {"deepseek-v3", [](MoeConfig& c) { c.topk_group = 9; }, "topk_group = 9"},
      {"deepseek-v3", [](MoeConfig& c) { c.topk_group = 0; }, "topk_group = 0"},
      {"deepseek-v3", [](MoeConfig& c) { c.topk_group = 1; c.top_k = 40; }, "top_k = 40"},
      {"glm5", [](MoeConfig& c) { c.shared_intermediate = 0; }, "shared_intermediate = 0"},
      {"glm5", [](MoeConfig& c) { c.shared_intermediate = 100; }, "shared_intermediate = 100"},
      {"glm5", [](MoeConfig& c) { c.routed_scaling_factor = 0.0f; }, "routed_scaling_factor = 0"},
      {"glm5", [](MoeConfig& c) { c.routed_scaling_factor = NAN; }, "routed_scaling_factor = nan"},
      {"mixtral", [](MoeConfig& c) { c.n_group = 2; c.topk_group = 1; }, "n_group = 2"},
      {"mixtral", [](MoeConfig& c) { c.use_correction_bias = true; }, "use_correction_bias"},
  };
  for (const BadField& bf : cases) {
    MoeConfig c = preset(bf.base);
    bf.mutate(c);
    const std::string msg = error_of([&] { c.validate(); });
    EXPECT_NE(msg.find(bf.expect), std::string::npos) << "expected '" << bf.expect << "' in: " << msg;
  }
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

std::string write_config(const std::string& name, const std::string& text) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("fp4moe_hf_" + name + ".json");
  std::ofstream(p) << text;
  return p.string();
}

TEST(HfConfig, TransformersDeepSeekAndGlmConfigsRouteBySigmoidWithTheBias) {
  // transformers writes these without scoring_func / topk_method: the routers are sigmoid + bias in code
  for (const char* type : {"deepseek_v3", "glm_moe_dsa"}) {
    const MoeConfig c = config_from_hf_json(write_config(
        type, std::string(R"({"model_type": ")") + type +
                  R"(", "hidden_size": 256, "moe_intermediate_size": 128, "n_routed_experts": 16,
                     "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2, "norm_topk_prob": true,
                     "routed_scaling_factor": 2.5, "n_shared_experts": 1})"));
    EXPECT_EQ(c.scoring, Scoring::sigmoid) << type;
    EXPECT_TRUE(c.use_correction_bias) << type;
    EXPECT_EQ(c.n_group, 4);
  }
  const MoeConfig m = config_from_hf_json(write_config(
      "mixtral", R"({"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_local_experts": 8,
                    "num_experts_per_tok": 2})"));
  EXPECT_EQ(m.scoring, Scoring::softmax);
  EXPECT_FALSE(m.use_correction_bias);
  // an explicit scoring_func still decides
  const MoeConfig d = config_from_hf_json(write_config(
      "explicit", R"({"model_type": "deepseek_v3", "hidden_size": 256, "moe_intermediate_size": 128,
                     "n_routed_experts": 16, "num_experts_per_tok": 4, "scoring_func": "softmax", "topk_method": "greedy"})"));
  EXPECT_EQ(d.scoring, Scoring::softmax);
  EXPECT_FALSE(d.use_correction_bias);
}

}  // namespace
}  // namespace fp4moe
