// What an MoE layer is: its shapes and its routing rule. Presets for the
// models fp4moe is built for, each also in a scaled-down form for quick runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/format.hpp"

namespace fp4moe {

enum class Scoring { softmax, sigmoid };

// The expert MLP's activation between its two projections.
enum class Activation {
  swiglu,          // silu(gate) * up
  clamped_swiglu,  // gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit), g * sigmoid(alpha g) * (u + 1)
};

struct MoeConfig {
  std::string name;
  int64_t hidden = 0;          // H
  int64_t intermediate = 0;    // I (per expert)
  int64_t num_experts = 0;     // E
  int64_t top_k = 0;           // k
  Scoring scoring = Scoring::softmax;
  bool renormalize = true;     // renormalise the chosen weights to sum 1
  int64_t n_group = 1;         // group-limited top-k (sigmoid rule); 1 = no grouping
  int64_t topk_group = 1;
  bool use_correction_bias = false;  // e_score_correction_bias added only to choose
  float routed_scaling_factor = 1.0f;
  bool shared_expert = false;        // one dense expert MLP of width shared_intermediate
  int64_t shared_intermediate = 0;
  Activation activation = Activation::swiglu;
  float swiglu_limit = 7.0f, swiglu_alpha = 1.702f;  // clamped_swiglu only
  bool expert_bias = false;          // every expert projection adds a bias (gpt-oss)

  void validate() const;  // throws fp4moe::Error naming the bad field
};

// "glm5", "deepseek-v3", "mixtral", each with "-small" for a scaled-down form;
// "gpt-oss-120b", "gpt-oss-20b" and "gpt-oss-small".
MoeConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// The FP4 format the model's published checkpoint holds its experts in:
// MXFP4 for gpt-oss (the clamped SwiGLU), NVFP4 (ModelOpt) for the others.
Fp4Format checkpoint_format(const MoeConfig& cfg);

// From a Hugging Face config.json (hidden_size, moe_intermediate_size,
// n_routed_experts / num_local_experts, num_experts_per_tok, scoring_func,
// topk_method "noaux_tc", n_group, topk_group, norm_topk_prob,
// routed_scaling_factor, n_shared_experts; gpt_oss: swiglu_limit, the clamped
// activation and the expert biases). Errors name the file and the key.
MoeConfig config_from_hf_json(const std::string& path);

}  // namespace fp4moe
