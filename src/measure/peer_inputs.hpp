// The benchmark's inputs as a safetensors file for the peer engines
// (bench/peers.py): the same FP4 weights, hidden states and router logits
// fp4moe ran on, so every engine multiplies the same numbers. Layout
// (docs/benchmarks.md "Peers"): w13.* [E, 2I, H] gate rows then up rows,
// w2.* [E, H, I], shared13.* / shared2.* with E = 1; codes u8 [.., K/2],
// scales u8 [.., K/G], global f32 (w13: [E, 2], gate and up), bias f32;
// correction_bias f32 [E]; x bf16 [T_max, H]; logits.<T> f32 [T, E].
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4moe/model.hpp"
#include "fp4moe/weights.hpp"

namespace fp4moe {

struct PeerInputs {
  std::vector<uint16_t> x;  // bf16 bits [T_max, H]
  int64_t x_rows = 0;
  std::map<int64_t, std::vector<float>> logits;  // by T: [T, E]
};

// Writes the file atomically; an fp4moe::Error names the path on failure.
void write_peer_inputs(const std::string& path, const MoeConfig& cfg, const MoeWeights& w, const PeerInputs& in);

}  // namespace fp4moe
