#include "config_json.hpp"

#include <set>

#include "fp4moe/error.hpp"

namespace fp4moe::python {
namespace {

using json = nlohmann::json;

json parse(const std::string& text, const char* what) {
  try {
    json j = json::parse(text);
    FP4MOE_CHECK(j.is_object(), what << ": expected a JSON object, got " << text);
    return j;
  } catch (const json::exception& e) {
    throw Error(std::string(what) + ": not valid JSON (" + e.what() + ")");
  }
}

void only_known(const json& j, const std::set<std::string>& known, const char* what) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key())) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error(std::string(what) + ": unknown key '" + it.key() + "' (known: " + list + ")");
  }
}

template <class T>
void read(const json& j, const char* key, T& out, const char* what) {
  if (!j.contains(key)) return;
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(std::string(what) + ": key '" + key + "' has the wrong type: " + j.at(key).dump());
  }
}

}  // namespace

json config_to_json(const MoeConfig& c) {
  return {{"name", c.name},
          {"hidden", c.hidden},
          {"intermediate", c.intermediate},
          {"num_experts", c.num_experts},
          {"top_k", c.top_k},
          {"scoring", c.scoring == Scoring::sigmoid ? "sigmoid" : "softmax"},
          {"renormalize", c.renormalize},
          {"n_group", c.n_group},
          {"topk_group", c.topk_group},
          {"use_correction_bias", c.use_correction_bias},
          {"routed_scaling_factor", c.routed_scaling_factor},
          {"shared_expert", c.shared_expert},
          {"shared_intermediate", c.shared_intermediate},
          {"activation", c.activation == Activation::clamped_swiglu ? "clamped_swiglu" : "swiglu"},
          {"swiglu_limit", c.swiglu_limit},
          {"swiglu_alpha", c.swiglu_alpha},
          {"expert_bias", c.expert_bias}};
}

MoeConfig config_from_json(const std::string& text) {
  const char* what = "config";
  const json j = parse(text, what);
  only_known(j, {"name", "hidden", "intermediate", "num_experts", "top_k", "scoring", "renormalize", "n_group",
                 "topk_group", "use_correction_bias", "routed_scaling_factor", "shared_expert", "shared_intermediate",
                 "activation", "swiglu_limit", "swiglu_alpha", "expert_bias"},
             what);
  MoeConfig c;
  read(j, "name", c.name, what);
  read(j, "hidden", c.hidden, what);
  read(j, "intermediate", c.intermediate, what);
  read(j, "num_experts", c.num_experts, what);
  read(j, "top_k", c.top_k, what);
  std::string scoring = "softmax";
  read(j, "scoring", scoring, what);
  FP4MOE_CHECK(scoring == "softmax" || scoring == "sigmoid", "config: scoring '" << scoring << "' is not softmax or sigmoid");
  c.scoring = scoring == "sigmoid" ? Scoring::sigmoid : Scoring::softmax;
  read(j, "renormalize", c.renormalize, what);
  read(j, "n_group", c.n_group, what);
  read(j, "topk_group", c.topk_group, what);
  read(j, "use_correction_bias", c.use_correction_bias, what);
  read(j, "routed_scaling_factor", c.routed_scaling_factor, what);
  read(j, "shared_expert", c.shared_expert, what);
  read(j, "shared_intermediate", c.shared_intermediate, what);
  std::string activation = "swiglu";
  read(j, "activation", activation, what);
  FP4MOE_CHECK(activation == "swiglu" || activation == "clamped_swiglu",
               "config: activation '" << activation << "' is not swiglu or clamped_swiglu");
  c.activation = activation == "clamped_swiglu" ? Activation::clamped_swiglu : Activation::swiglu;
  read(j, "swiglu_limit", c.swiglu_limit, what);
  read(j, "swiglu_alpha", c.swiglu_alpha, what);
  read(j, "expert_bias", c.expert_bias, what);
  c.validate();
  return c;
}

LayerOptions options_from_json(const std::string& text) {
  const char* what = "options";
  const json j = parse(text, what);
  only_known(j, {"max_tokens", "tune_cache", "use_tune_cache", "deterministic", "finalize", "device", "split_k"}, what);
  LayerOptions o;
  read(j, "max_tokens", o.max_tokens, what);
  read(j, "tune_cache", o.tune_cache, what);
  read(j, "use_tune_cache", o.use_tune_cache, what);
  read(j, "deterministic", o.deterministic, what);
  read(j, "device", o.device, what);
  read(j, "split_k", o.split_k, what);
  std::string f = "auto";
  read(j, "finalize", f, what);
  FP4MOE_CHECK(f == "auto" || f == "fused" || f == "split", "options: finalize '" << f << "' is not auto, fused or split");
  o.finalize = f == "fused" ? FinalizeMode::fused : f == "split" ? FinalizeMode::split : FinalizeMode::automatic;
  FP4MOE_CHECK(o.max_tokens >= 1, "options: max_tokens = " << o.max_tokens << " must be at least 1");
  return o;
}

Fp4Format format_from_string(const std::string& s) {
  FP4MOE_CHECK(s == "nvfp4" || s == "mxfp4", "format '" << s << "' is not nvfp4 or mxfp4");
  return s == "nvfp4" ? Fp4Format::nvfp4 : Fp4Format::mxfp4;
}

}  // namespace fp4moe::python
