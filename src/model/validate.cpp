// MoeConfig::validate: every field checked, the bad one named with its value.
#include <cmath>

#include "fp4moe/error.hpp"
#include "fp4moe/model.hpp"

namespace fp4moe {

namespace {
const char* scoring_name(Scoring s) { return s == Scoring::softmax ? "softmax" : "sigmoid"; }
}  // namespace

void MoeConfig::validate() const {
  const std::string who = "MoeConfig '" + name + "': ";
  // H and I feed both FP4 formats as the reduction dimension K, so they must
  // be whole MXFP4 blocks (32), which are also whole NVFP4 blocks (16).
  FP4MOE_CHECK(hidden > 0, who << "hidden = " << hidden << " must be positive");
  FP4MOE_CHECK(hidden % 32 == 0, who << "hidden = " << hidden << " is not a multiple of 32");
  FP4MOE_CHECK(intermediate > 0, who << "intermediate = " << intermediate << " must be positive");
  FP4MOE_CHECK(intermediate % 32 == 0,
               who << "intermediate = " << intermediate << " is not a multiple of 32");
  FP4MOE_CHECK(num_experts > 0, who << "num_experts = " << num_experts << " must be positive");
  FP4MOE_CHECK(top_k > 0, who << "top_k = " << top_k << " must be positive");
  FP4MOE_CHECK(top_k <= num_experts,
               who << "top_k = " << top_k << " exceeds num_experts = " << num_experts);
  FP4MOE_CHECK(scoring == Scoring::softmax || scoring == Scoring::sigmoid,
               who << "scoring = " << static_cast<int>(scoring) << " is not softmax or sigmoid");
  FP4MOE_CHECK(n_group > 0, who << "n_group = " << n_group << " must be positive");
  FP4MOE_CHECK(num_experts % n_group == 0,
               who << "num_experts = " << num_experts << " is not divisible by n_group = " << n_group);
  FP4MOE_CHECK(topk_group > 0, who << "topk_group = " << topk_group << " must be positive");
  FP4MOE_CHECK(topk_group <= n_group,
               who << "topk_group = " << topk_group << " exceeds n_group = " << n_group);
  FP4MOE_CHECK(top_k <= topk_group * (num_experts / n_group),
               who << "top_k = " << top_k << " exceeds the experts in the kept groups, topk_group * (num_experts / n_group) = "
                   << topk_group << " * " << num_experts / n_group << " = "
                   << topk_group * (num_experts / n_group));
  FP4MOE_CHECK(n_group == 1 || scoring == Scoring::sigmoid,
               who << "n_group = " << n_group << " (group-limited top-k) requires scoring = sigmoid, not "
                   << scoring_name(scoring));
  FP4MOE_CHECK(!use_correction_bias || scoring == Scoring::sigmoid,
               who << "use_correction_bias = true requires scoring = sigmoid, not " << scoring_name(scoring));
  FP4MOE_CHECK(activation == Activation::swiglu || activation == Activation::clamped_swiglu,
               who << "activation = " << static_cast<int>(activation) << " is not swiglu or clamped_swiglu");
  FP4MOE_CHECK(activation != Activation::clamped_swiglu ||
                   (std::isfinite(swiglu_limit) && swiglu_limit > 0.0f && std::isfinite(swiglu_alpha) && swiglu_alpha > 0.0f),
               who << "clamped_swiglu needs a positive finite swiglu_limit and swiglu_alpha; got " << swiglu_limit << " and "
                   << swiglu_alpha);
  FP4MOE_CHECK(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0.0f,
               who << "routed_scaling_factor = " << routed_scaling_factor << " must be finite and positive");
  FP4MOE_CHECK(shared_intermediate >= 0,
               who << "shared_intermediate = " << shared_intermediate << " must not be negative");
  if (shared_expert) {
    FP4MOE_CHECK(shared_intermediate > 0, who << "shared_intermediate = " << shared_intermediate
                                              << " must be positive when shared_expert = true");
    FP4MOE_CHECK(shared_intermediate % 32 == 0,
                 who << "shared_intermediate = " << shared_intermediate << " is not a multiple of 32");
  }
}

}  // namespace fp4moe
