// ModelOpt / Hugging Face tensor names of an MoE layer (DeepSeek-V3, GLM-5,
// Qwen-MoE naming: mlp.experts.{e}.{gate,up,down}_proj, mlp.shared_experts).
#include <charconv>
#include <set>
#include <string_view>

#include "io/modelopt.hpp"

namespace fp4moe::io::modelopt {
namespace {

// Consumes a decimal number at the front of s.
bool take_number(std::string_view& s, int64_t& value) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), value);
  if (r.ec != std::errc() || r.ptr == s.data() || value < 0) return false;
  s.remove_prefix(size_t(r.ptr - s.data()));
  return true;
}

bool take(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string mlp_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + ".mlp."; }
std::string expert_prefix(int64_t layer, int64_t expert) {
  return mlp_prefix(layer) + "experts." + std::to_string(expert) + ".";
}
std::string shared_prefix(int64_t layer) { return mlp_prefix(layer) + "shared_experts."; }
std::string router_weight_name(int64_t layer) { return mlp_prefix(layer) + "gate.weight"; }
std::string correction_bias_name(int64_t layer) { return mlp_prefix(layer) + "gate.e_score_correction_bias"; }

std::optional<ExpertTensorName> parse_expert_tensor_name(const std::string& name) {
  std::string_view s = name;
  ExpertTensorName n;
  if (!take(s, "model.layers.") || !take_number(s, n.layer) || !take(s, ".mlp.")) return std::nullopt;
  if (take(s, "experts.")) {
    if (!take_number(s, n.expert) || !take(s, ".")) return std::nullopt;
  } else if (!take(s, "shared_experts.")) {
    return std::nullopt;
  }
  for (const char* p : kProjections) {
    if (take(s, std::string(p) + ".")) {
      n.projection = p;
      n.field = std::string(s);
      if (n.field.empty() || n.field.find('.') != std::string::npos) return std::nullopt;
      return n;
    }
  }
  return std::nullopt;
}

std::vector<int64_t> moe_layers(const std::vector<std::string>& names) {
  std::set<int64_t> layers;
  for (const std::string& name : names) {
    const auto n = parse_expert_tensor_name(name);
    if (n && n->expert >= 0) layers.insert(n->layer);
  }
  return {layers.begin(), layers.end()};
}

}  // namespace fp4moe::io::modelopt
