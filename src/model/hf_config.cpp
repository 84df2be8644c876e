// A model description from a Hugging Face config.json (DeepSeek-V3 / GLM-5 /
// Mixtral / Qwen-MoE key names).
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "fp4moe/model.hpp"

namespace fp4moe {
namespace {

using json = nlohmann::json;

template <class T>
T get_or(const json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw Error(path + ": key '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}

int64_t first_of(const json& j, std::initializer_list<const char*> keys, const std::string& path) {
  for (const char* k : keys)
    if (j.contains(k) && j[k].is_number_integer()) return j[k].get<int64_t>();
  std::string names;
  for (const char* k : keys) names += std::string(names.empty() ? "" : " or ") + k;
  throw Error(path + ": missing integer key " + names);
}

}  // namespace

MoeConfig config_from_hf_json(const std::string& path) {
  std::ifstream f(path);
  FP4MOE_CHECK(f.good(), path << ": cannot open the model config");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  FP4MOE_CHECK(j.is_object(), path << ": the model config is not a JSON object");
  MoeConfig c;
  c.name = get_or<std::string>(j, "model_type", "config", path);
  c.hidden = first_of(j, {"hidden_size"}, path);
  c.intermediate = first_of(j, {"moe_intermediate_size", "intermediate_size"}, path);
  c.num_experts = first_of(j, {"n_routed_experts", "num_local_experts", "num_experts"}, path);
  c.top_k = first_of(j, {"num_experts_per_tok"}, path);
  // transformers' DeepSeek-V3 and GLM-5 configs carry no scoring_func or
  // topk_method: their routers are sigmoid with the correction bias in code.
  const bool noaux_model = c.name == "deepseek_v3" || c.name == "deepseek_v32" || c.name == "glm_moe_dsa" ||
                           c.name == "glm4_moe";
  const std::string scoring = get_or<std::string>(j, "scoring_func", noaux_model ? "sigmoid" : "softmax", path);
  FP4MOE_CHECK(scoring == "softmax" || scoring == "sigmoid",
               path << ": scoring_func '" << scoring << "' is not softmax or sigmoid");
  c.scoring = scoring == "sigmoid" ? Scoring::sigmoid : Scoring::softmax;
  c.use_correction_bias = get_or<std::string>(j, "topk_method", noaux_model ? "noaux_tc" : "", path) == "noaux_tc";
  c.n_group = get_or<int64_t>(j, "n_group", 1, path);
  c.topk_group = get_or<int64_t>(j, "topk_group", c.n_group, path);
  c.renormalize = get_or<bool>(j, "norm_topk_prob", true, path);
  c.routed_scaling_factor = get_or<float>(j, "routed_scaling_factor", 1.0f, path);
  if (c.name == "gpt_oss") {  // transformers' GptOssExperts: biases, the clamped SwiGLU (alpha 1.702 in code)
    c.activation = Activation::clamped_swiglu;
    c.swiglu_limit = get_or<float>(j, "swiglu_limit", 7.0f, path);
    c.expert_bias = true;
  }
  const int64_t shared = get_or<int64_t>(j, "n_shared_experts", 0, path);
  c.shared_expert = shared > 0;
  c.shared_intermediate = shared * c.intermediate;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return c;
}

}  // namespace fp4moe
