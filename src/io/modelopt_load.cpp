// load_moe_layer: one MoE layer of a ModelOpt NVFP4 checkpoint, every tensor
// checked against config.json's shapes before it is used.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/parallel.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/error.hpp"
#include "io/gpt_oss.hpp"
#include "io/modelopt.hpp"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;
using io::TensorRef;
using io::TensorStore;

std::string layer_list(const std::vector<int64_t>& layers) {
  if (layers.empty()) return "none";
  std::string s = std::to_string(layers.front());
  if (layers.size() > 1) s += (layers.back() - layers.front() + 1 == int64_t(layers.size()) ? ".." : ", ..., ") +
                              std::to_string(layers.back());
  return s;
}

// config.json's layer count and dense prefix, for errors that say why a layer has no experts.
void check_layer_index(const std::string& config_path, int64_t layer, const TensorStore& store) {
  std::ifstream f(config_path);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  FP4MOE_CHECK(layer >= 0, "--layer " << layer << " is negative");
  if (j.is_object() && j.value("num_hidden_layers", nlohmann::json()).is_number_integer()) {
    const int64_t n = j["num_hidden_layers"].get<int64_t>();
    FP4MOE_CHECK(layer < n + j.value("num_nextn_predict_layers", int64_t(0)),
                 config_path << ": layer " << layer << " does not exist (num_hidden_layers = " << n << ")");
  }
  if (store.contains(io::modelopt::expert_prefix(layer, 0) + "gate_proj.weight")) return;
  std::string why = store.path() + ": layer " + std::to_string(layer) + " has no routed experts (no tensor '" +
                    io::modelopt::expert_prefix(layer, 0) + "gate_proj.weight')";
  if (j.is_object() && j.value("first_k_dense_replace", nlohmann::json()).is_number_integer() &&
      layer < j["first_k_dense_replace"].get<int64_t>())
    why += "; it is a dense layer (first_k_dense_replace = " + std::to_string(j["first_k_dense_replace"].get<int64_t>()) + ")";
  throw Error(why + "; MoE layers here: " + layer_list(io::modelopt::moe_layers(store.names())));
}

// Problem order: the layer's own checks first, then the experts by index
// (the shared expert after them), then the router.
constexpr int64_t kLayerOrder = -1;
int64_t expert_order(int64_t e, int proj) { return e * 4 + proj; }

struct ExpertLoad {
  ExpertWeights weights;
  int input_scales = 0;
};

ExpertLoad load_expert(const TensorStore& store, const std::string& prefix, int64_t e, int64_t H, int64_t I,
                       const std::string& src, io::ProblemList& problems, bool read_codes) {
  ExpertLoad out;
  const std::string gu = "[I, H] = [" + std::to_string(I) + ", " + std::to_string(H) + "] from " + src;
  const std::string dn = "[H, I] = [" + std::to_string(H) + ", " + std::to_string(I) + "] from " + src;
  Fp4Matrix* dst[3] = {&out.weights.gate, &out.weights.up, &out.weights.down};
  for (int p = 0; p < 3; ++p) {
    const bool down = p == 2;
    auto l = io::modelopt::load_nvfp4_matrix(store, prefix + io::modelopt::kProjections[p] + ".", down ? H : I,
                                             down ? I : H, down ? dn : gu, problems, expert_order(e, p), read_codes);
    if (!l) continue;
    out.input_scales += l->has_input_scale;
    *dst[p] = std::move(l->matrix);
  }
  return out;
}

std::vector<float> load_correction_bias(const TensorStore& store, int64_t layer, int64_t E, const std::string& src) {
  const TensorRef t = store.get(io::modelopt::correction_bias_name(layer));
  io::expect_shape(t, {E}, "[E] from " + src);
  std::vector<float> bias = io::read_floats(t);
  for (size_t e = 0; e < bias.size(); ++e)
    FP4MOE_CHECK(std::isfinite(bias[e]), t.where() << ": value at expert " << e << " is " << bias[e]);
  return bias;
}

}  // namespace

namespace io::modelopt {

MoeCheckpointLayer read_moe_layer(const std::string& dir, const TensorStore& store, const MoeConfig& c, int64_t layer,
                                  ProblemList& problems, bool read_codes) {
  MoeCheckpointLayer out;
  out.layer = layer;
  out.config = c;
  const std::string config_path = (fs::path(dir) / kModelConfigFile).string();
  if (!problems.check(kLayerOrder, [&] { check_layer_index(config_path, layer, store); })) return out;

  const int64_t E = c.num_experts;
  const std::string src = "config.json";
  MoeWeights& w = out.weights;
  w.experts.resize(size_t(E));
  w.has_shared = c.shared_expert;
  std::vector<int> input_scales(size_t(E) + 1, 0);
  detail::parallel_for(E + (c.shared_expert ? 1 : 0), [&](int64_t e) {
    ExpertLoad l = e < E ? load_expert(store, expert_prefix(layer, e), e, c.hidden, c.intermediate, src, problems, read_codes)
                         : load_expert(store, shared_prefix(layer), e, c.hidden, c.shared_intermediate,
                                       src + " (n_shared_experts x moe_intermediate_size)", problems, read_codes);
    (e < E ? w.experts[size_t(e)] : w.shared) = std::move(l.weights);
    input_scales[size_t(e)] = l.input_scales;
  });
  const int64_t after_experts = expert_order(E + 1, 0);
  if (store.contains(expert_prefix(layer, E) + "gate_proj.weight"))
    problems.add(kLayerOrder, store.path() + ": layer " + std::to_string(layer) + " holds expert " + std::to_string(E) +
                                  ", but config.json has " + std::to_string(E) + " routed experts");
  if (!c.shared_expert && store.contains(shared_prefix(layer) + "gate_proj.weight"))
    problems.add(kLayerOrder, store.path() + ": layer " + std::to_string(layer) +
                                  " holds shared_experts, but config.json has no n_shared_experts");

  problems.check(after_experts, [&] {
    const TensorRef router = store.get(router_weight_name(layer));
    io::expect_shape(router, {E, c.hidden}, "[E, H] from " + src);
    w.router_weight = io::read_bf16_bits(router);
    if (router.info->dtype == io::Dtype::F32) out.notes.push_back("router weight F32, rounded to bf16");
  });
  if (c.use_correction_bias)
    problems.check(after_experts + 1, [&] { w.correction_bias = load_correction_bias(store, layer, E, src); });
  else if (store.contains(correction_bias_name(layer)))
    out.notes.push_back("e_score_correction_bias present but unused (config.json's topk_method is not noaux_tc)");

  int64_t with_input_scale = 0;
  for (int n : input_scales) with_input_scale += n;
  if (with_input_scale)
    out.notes.push_back(std::to_string(with_input_scale) +
                        " input_scale tensors checked, unused (fp4moe keeps activations in bf16: W4A16)");
  return out;
}

}  // namespace io::modelopt

MoeCheckpointLayer load_moe_layer(const std::string& dir, int64_t layer) {
  FP4MOE_CHECK(fs::is_directory(dir), dir << ": not a checkpoint directory");
  const MoeConfig config = config_from_hf_json((fs::path(dir) / io::modelopt::kModelConfigFile).string());
  if (io::gpt_oss::is_gpt_oss_checkpoint(dir)) return io::gpt_oss::read_layer(TensorStore::open(dir), config, layer);
  const std::string quant_source = io::modelopt::require_nvfp4_quant_config(dir);
  const TensorStore store = TensorStore::open(dir);
  io::ProblemList problems;
  MoeCheckpointLayer out = io::modelopt::read_moe_layer(dir, store, config, layer, problems, /*read_codes=*/true);
  const std::vector<std::string> found = problems.sorted();
  if (!found.empty()) {
    std::string what = found.front();
    if (found.size() > 1)
      what += " (and " + std::to_string(found.size() - 1) + " more problem(s); `fp4moe inspect " + dir + "` lists them all)";
    throw Error(what);
  }
  out.notes.push_back("quantization: NVFP4, group 16 (" + quant_source + ")");
  return out;
}

}  // namespace fp4moe
