// Reading gpt-oss checkpoints (gpt_oss_load.cpp): OpenAI's MXFP4 layout.
#pragma once
#include <string>

#include "fp4moe/checkpoint.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io::gpt_oss {

// config.json says quantization_config.quant_method = "mxfp4".
bool is_gpt_oss_checkpoint(const std::string& dir);
// MoE layer `layer`: experts (gate and up de-interleaved), their biases, the router's weight and bias.
MoeCheckpointLayer read_layer(const TensorStore& store, const MoeConfig& cfg, int64_t layer);

}  // namespace fp4moe::io::gpt_oss
