// Reading gpt-oss checkpoints (gpt_oss_load.cpp): OpenAI's MXFP4 layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/checkpoint.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io::gpt_oss {

// config.json says quantization_config.quant_method = "mxfp4".
bool is_gpt_oss_checkpoint(const std::string& dir);
// MoE layer `layer`: experts (gate and up de-interleaved), their biases, the router's weight and bias.
MoeCheckpointLayer read_layer(const TensorStore& store, const MoeConfig& cfg, int64_t layer);
// The MoE layers the checkpoint holds (model.layers.{L}.mlp.experts.gate_up_proj_blocks).
std::vector<int64_t> moe_layers(const TensorStore& store);
// Layer `layer`'s tensors present with the dtypes and shapes config.json gives
// (what inspect checks without reading the weights; the values are checked as
// the layer loads). Throws naming the first one that is not.
void check_layer_tensors(const TensorStore& store, const MoeConfig& cfg, int64_t layer);

}  // namespace fp4moe::io::gpt_oss
