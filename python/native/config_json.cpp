#include "config_json.hpp"

#include <array>
#include <set>
#include <utility>

#include "fp4moe/error.hpp"

namespace fp4moe::python {
namespace {

using json = nlohmann::json;

// The spellings of the enum fields.
constexpr std::array<std::pair<const char*, Scoring>, 2> kScoring{{{"softmax", Scoring::softmax}, {"sigmoid", Scoring::sigmoid}}};
constexpr std::array<std::pair<const char*, Activation>, 2> kActivation{
    {{"swiglu", Activation::swiglu}, {"clamped_swiglu", Activation::clamped_swiglu}}};
constexpr std::array<std::pair<const char*, FinalizeMode>, 3> kFinalize{
    {{"auto", FinalizeMode::automatic}, {"fused", FinalizeMode::fused}, {"split", FinalizeMode::split}}};
const auto& spellings(Scoring) { return kScoring; }
const auto& spellings(Activation) { return kActivation; }
const auto& spellings(FinalizeMode) { return kFinalize; }
constexpr std::array<std::pair<const char*, ActivationFormat>, 2> kActivations{
    {{"bf16", ActivationFormat::bf16}, {"fp8", ActivationFormat::fp8}}};
const auto& spellings(ActivationFormat) { return kActivations; }

// Every field the JSON objects carry, with its key: the one list that writing,
// reading and the unknown-key check all follow.
template <class C, class F>
void config_fields(C& c, F&& f) {
  f("name", c.name), f("hidden", c.hidden), f("intermediate", c.intermediate), f("num_experts", c.num_experts);
  f("top_k", c.top_k), f("scoring", c.scoring), f("renormalize", c.renormalize), f("n_group", c.n_group);
  f("topk_group", c.topk_group), f("use_correction_bias", c.use_correction_bias);
  f("routed_scaling_factor", c.routed_scaling_factor), f("shared_expert", c.shared_expert);
  f("shared_intermediate", c.shared_intermediate), f("activation", c.activation);
  f("swiglu_limit", c.swiglu_limit), f("swiglu_alpha", c.swiglu_alpha), f("expert_bias", c.expert_bias);
}

template <class O, class F>
void option_fields(O& o, F&& f) {
  f("max_tokens", o.max_tokens), f("tune_cache", o.tune_cache), f("use_tune_cache", o.use_tune_cache);
  f("deterministic", o.deterministic), f("finalize", o.finalize), f("device", o.device), f("split_k", o.split_k);
  f("balanced_split", o.balanced_split), f("activations", o.activations), f("shared_expert_in_routed_gemms", o.shared_expert_in_routed_gemms);
  f("fp8_rounds_nvfp4", o.fp8_rounds_nvfp4), f("max_plans", o.max_plans);
}

template <class T>
json to_value(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    for (const auto& [name, value] : spellings(v))
      if (value == v) return name;
    return static_cast<int>(v);
  } else {
    return v;
  }
}

json parse(const std::string& text, const char* what) {
  try {
    json j = json::parse(text);
    FP4MOE_CHECK(j.is_object(), what << ": expected a JSON object, got " << text);
    return j;
  } catch (const json::exception& e) {
    throw Error(std::string(what) + ": not valid JSON (" + e.what() + ")");
  }
}

// Reads every field the object has, refusing unknown keys, wrong types and unknown enum spellings.
template <class T, class Fields>
T read_object(const std::string& text, const char* what, Fields fields) {
  const json j = parse(text, what);
  T out;
  std::set<std::string> known;
  fields(out, [&](const char* key, auto& member) {
    known.insert(key);
    if (!j.contains(key)) return;
    using M = std::decay_t<decltype(member)>;
    try {
      if constexpr (std::is_enum_v<M>) {
        const std::string s = j.at(key).get<std::string>();
        std::string allowed;
        for (const auto& [name, value] : spellings(member)) {
          if (s == name) return void(member = value);
          allowed += (allowed.empty() ? "" : ", ") + std::string(name);
        }
        throw Error(std::string(what) + ": " + key + " '" + s + "' is not one of " + allowed);
      } else {
        member = j.at(key).get<M>();
      }
    } catch (const json::exception&) {
      throw Error(std::string(what) + ": key '" + key + "' has the wrong type: " + j.at(key).dump());
    }
  });
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key())) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error(std::string(what) + ": unknown key '" + it.key() + "' (known: " + list + ")");
  }
  return out;
}

}  // namespace

json config_to_json(const MoeConfig& c) {
  json j = json::object();
  config_fields(c, [&](const char* key, const auto& member) { j[key] = to_value(member); });
  return j;
}

MoeConfig config_from_json(const std::string& text) {
  const MoeConfig c = read_object<MoeConfig>(text, "config", [](MoeConfig& m, auto&& f) { config_fields(m, f); });
  c.validate();
  return c;
}

LayerOptions options_from_json(const std::string& text) {
  const LayerOptions o = read_object<LayerOptions>(text, "options", [](LayerOptions& m, auto&& f) { option_fields(m, f); });
  FP4MOE_CHECK(o.max_tokens >= 1, "options: max_tokens = " << o.max_tokens << " must be at least 1");
  return o;
}

Fp4Format format_from_string(const std::string& s) { return parse_fp4_format(s); }

}  // namespace fp4moe::python
