// Presets: the models fp4moe is built for, and scaled-down forms of each that
// keep the routing rule (scoring, grouping, bias, scale) but shrink the shapes
// so a CPU reference forward of a few tokens is quick.
#include <sstream>

#include "fp4moe/error.hpp"
#include "fp4moe/model.hpp"

namespace fp4moe {

namespace {

MoeConfig glm5() {
  MoeConfig c;
  c.name = "glm5";
  c.hidden = 6144;
  c.intermediate = 2048;
  c.num_experts = 256;
  c.top_k = 8;
  c.scoring = Scoring::sigmoid;
  c.renormalize = true;
  c.n_group = 1;
  c.topk_group = 1;
  c.use_correction_bias = true;
  c.routed_scaling_factor = 2.5f;
  c.shared_expert = true;
  c.shared_intermediate = 2048;
  return c;
}

MoeConfig glm5_small() {
  MoeConfig c = glm5();
  c.name = "glm5-small";
  c.hidden = 512;
  c.intermediate = 128;
  c.num_experts = 32;
  c.shared_intermediate = 128;
  return c;
}

MoeConfig deepseek_v3() {
  MoeConfig c;
  c.name = "deepseek-v3";
  c.hidden = 7168;
  c.intermediate = 2048;
  c.num_experts = 256;
  c.top_k = 8;
  c.scoring = Scoring::sigmoid;
  c.renormalize = true;
  c.n_group = 8;
  c.topk_group = 4;
  c.use_correction_bias = true;
  c.routed_scaling_factor = 2.5f;
  c.shared_expert = true;
  c.shared_intermediate = 2048;
  return c;
}

MoeConfig deepseek_v3_small() {
  MoeConfig c = deepseek_v3();
  c.name = "deepseek-v3-small";
  c.hidden = 512;
  c.intermediate = 128;
  c.num_experts = 32;  // 8 groups of 4
  c.shared_intermediate = 128;
  return c;
}

MoeConfig mixtral() {
  MoeConfig c;
  c.name = "mixtral";
  c.hidden = 4096;
  c.intermediate = 14336;
  c.num_experts = 8;
  c.top_k = 2;
  c.scoring = Scoring::softmax;
  c.renormalize = true;
  c.n_group = 1;
  c.topk_group = 1;
  c.use_correction_bias = false;
  c.routed_scaling_factor = 1.0f;
  c.shared_expert = false;
  c.shared_intermediate = 0;
  return c;
}

MoeConfig mixtral_small() {
  MoeConfig c = mixtral();
  c.name = "mixtral-small";
  c.hidden = 256;
  c.intermediate = 512;
  return c;
}

// OpenAI's gpt-oss (transformers' GptOssMoE): a router with a bias, top-4,
// softmax over the chosen logits; gate/up/down with biases and the clamped
// SwiGLU (limit 7, alpha 1.702); MXFP4 experts in its checkpoints.
MoeConfig gpt_oss_120b() {
  MoeConfig c;
  c.name = "gpt-oss-120b";
  c.hidden = 2880;
  c.intermediate = 2880;
  c.num_experts = 128;
  c.top_k = 4;
  c.scoring = Scoring::softmax;
  c.renormalize = true;  // softmax over the k chosen logits
  c.activation = Activation::clamped_swiglu;
  c.swiglu_limit = 7.0f;
  c.swiglu_alpha = 1.702f;
  c.expert_bias = true;
  return c;
}

MoeConfig gpt_oss_20b() {
  MoeConfig c = gpt_oss_120b();
  c.name = "gpt-oss-20b";
  c.num_experts = 32;
  return c;
}

MoeConfig gpt_oss_small() {
  MoeConfig c = gpt_oss_120b();
  c.name = "gpt-oss-small";
  c.hidden = 256;
  c.intermediate = 256;
  c.num_experts = 8;
  return c;
}

struct Entry {
  const char* name;
  MoeConfig (*make)();
};

constexpr Entry kPresets[] = {
    {"glm5", glm5},       {"glm5-small", glm5_small}, {"deepseek-v3", deepseek_v3},
    {"deepseek-v3-small", deepseek_v3_small}, {"mixtral", mixtral}, {"mixtral-small", mixtral_small},
    {"gpt-oss-120b", gpt_oss_120b}, {"gpt-oss-20b", gpt_oss_20b}, {"gpt-oss-small", gpt_oss_small},
};

}  // namespace

Fp4Format checkpoint_format(const MoeConfig& cfg) {
  return cfg.activation == Activation::clamped_swiglu ? Fp4Format::mxfp4 : Fp4Format::nvfp4;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Entry& e : kPresets) names.emplace_back(e.name);
  return names;
}

MoeConfig preset(const std::string& name) {
  for (const Entry& e : kPresets) {
    if (name == e.name) {
      MoeConfig c = e.make();
      c.validate();
      return c;
    }
  }
  std::ostringstream os;
  os << "unknown model preset '" << name << "'; known presets:";
  for (const Entry& e : kPresets) os << ' ' << e.name;
  throw Error(os.str());
}

}  // namespace fp4moe
