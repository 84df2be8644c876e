// An MoE layer's FP4 weights on the host, as MoeLayer (layer.hpp) and
// ParallelMoeLayer (parallel.hpp) take them, the checkpoint loaders
// (checkpoint.hpp) give them and the CPU reference (reference.hpp) reads them.
// Apart from layer.hpp so that code built without CUDA holds them too.
#pragma once
#include <cstdint>
#include <vector>

#include "fp4moe/format.hpp"
#include "fp4moe/model.hpp"

namespace fp4moe {

// One expert MLP, quantized. gate and up: [I, H]; down: [H, I]. The biases,
// when the model has them (MoeConfig::expert_bias): [I], [I], [H].
struct ExpertWeights {
  Fp4Matrix gate, up, down;
  std::vector<float> gate_bias = {}, up_bias = {}, down_bias = {};
};

struct MoeWeights {
  std::vector<ExpertWeights> experts;      // [E]
  std::vector<float> correction_bias;      // [E] when the model uses it
  std::vector<uint16_t> router_weight;     // bf16 bits [E, H] (mlp.gate.weight), optional
  std::vector<float> router_bias;          // [E] (gpt-oss's router), optional
  bool has_shared = false;
  ExpertWeights shared;
};

// Random weights for a config: Gaussian-ish values quantized in `format`; for
// full-size models (E*H*I > 2^28) FP4 codes and block scales drawn directly.
MoeWeights random_moe_weights(const MoeConfig& cfg, Fp4Format format, uint64_t seed);

}  // namespace fp4moe
