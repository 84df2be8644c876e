// save_moe_layer: one MoE layer written as a ModelOpt NVFP4 checkpoint that
// load_moe_layer (and other ModelOpt readers) read back.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "fp4moe/checkpoint.hpp"
#include "fp4moe/error.hpp"
#include "io/atomic_file.hpp"
#include "io/modelopt.hpp"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;

// The Hugging Face keys config_from_hf_json reads (DeepSeek-V3 naming).
std::string config_json(const MoeConfig& c, int64_t layer) {
  FP4MOE_CHECK(!c.shared_expert || c.shared_intermediate % c.intermediate == 0,
               "save_moe_layer: shared_intermediate = " << c.shared_intermediate << " is not a multiple of intermediate = "
                                                        << c.intermediate << " (config.json states n_shared_experts)");
  const nlohmann::json j = {
      {"model_type", c.name},
      {"hidden_size", c.hidden},
      {"moe_intermediate_size", c.intermediate},
      {"n_routed_experts", c.num_experts},
      {"num_experts_per_tok", c.top_k},
      {"scoring_func", c.scoring == Scoring::sigmoid ? "sigmoid" : "softmax"},
      {"topk_method", c.use_correction_bias ? "noaux_tc" : "greedy"},
      {"n_group", c.n_group},
      {"topk_group", c.topk_group},
      {"norm_topk_prob", c.renormalize},
      {"routed_scaling_factor", c.routed_scaling_factor},
      {"n_shared_experts", c.shared_expert ? c.shared_intermediate / c.intermediate : 0},
      {"num_hidden_layers", layer + 1},
      {"first_k_dense_replace", layer},  // the layers before this one are not in the file
  };
  return j.dump(2) + "\n";
}

void append_expert(std::vector<io::TensorToWrite>& out, const std::string& prefix, const ExpertWeights& e) {
  io::modelopt::append_nvfp4_tensors(out, prefix + "gate_proj.", e.gate);
  io::modelopt::append_nvfp4_tensors(out, prefix + "up_proj.", e.up);
  io::modelopt::append_nvfp4_tensors(out, prefix + "down_proj.", e.down);
}

}  // namespace

void save_moe_layer(const std::string& dir, const MoeCheckpointLayer& layer) {
  const MoeConfig& c = layer.config;
  const MoeWeights& w = layer.weights;
  const int64_t L = layer.layer;
  c.validate();
  FP4MOE_CHECK(L >= 0, "save_moe_layer: layer = " << L << " is negative");
  FP4MOE_CHECK(int64_t(w.experts.size()) == c.num_experts,
               "save_moe_layer: " << w.experts.size() << " experts, config has " << c.num_experts);
  FP4MOE_CHECK(w.has_shared == c.shared_expert, "save_moe_layer: weights has_shared = " << w.has_shared
                                                                                       << ", config shared_expert = " << c.shared_expert);
  FP4MOE_CHECK(int64_t(w.router_weight.size()) == c.num_experts * c.hidden,
               "save_moe_layer: router_weight has " << w.router_weight.size() << " values, expected E x H = "
                                                    << c.num_experts * c.hidden);
  FP4MOE_CHECK(!c.use_correction_bias || int64_t(w.correction_bias.size()) == c.num_experts,
               "save_moe_layer: correction_bias has " << w.correction_bias.size() << " values, expected E = " << c.num_experts);

  std::vector<io::TensorToWrite> tensors;
  for (int64_t e = 0; e < c.num_experts; ++e)
    append_expert(tensors, io::modelopt::expert_prefix(L, e), w.experts[size_t(e)]);
  if (w.has_shared) append_expert(tensors, io::modelopt::shared_prefix(L), w.shared);
  tensors.push_back({io::modelopt::router_weight_name(L), io::Dtype::BF16, {c.num_experts, c.hidden},
                     w.router_weight.data(), w.router_weight.size() * 2});
  if (c.use_correction_bias)
    tensors.push_back({io::modelopt::correction_bias_name(L), io::Dtype::F32, {c.num_experts},
                       w.correction_bias.data(), w.correction_bias.size() * 4});

  io::AtomicDirectory out(dir);
  const fs::path tmp(out.temp_path());
  io::write_safetensors((tmp / io::kSingleFileName).string(), tensors, {{"format", "pt"}});
  io::write_file_atomically((tmp / io::modelopt::kModelConfigFile).string(), config_json(c, L));
  io::write_file_atomically((tmp / io::modelopt::kQuantConfigFile).string(),
                            io::modelopt::quant_config_json({"lm_head"}));
  out.commit();
}

}  // namespace fp4moe
