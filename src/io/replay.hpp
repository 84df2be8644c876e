// Replaying captured activations through one MoE layer (`fp4moe run --input
// IN --output OUT`, docs/checkpoints.md): the input file's tensors checked
// against the layer, the CPU reference's side of the replay, and the output
// file. The GPU side lives with the CLI (apps/fp4moe/run_replay.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4moe/model.hpp"
#include "fp4moe/reference.hpp"
#include "io/safetensors.hpp"

namespace fp4moe::io {

struct ReplayInputs {
  std::string path;
  int64_t tokens = 0;
  Dtype hidden_dtype = Dtype::BF16;   // as stored: BF16 or F32
  std::vector<float> hidden;          // [T, H], the stored values exactly
  std::vector<uint16_t> hidden_bf16;  // [T, H], F32 rounded to nearest even
  bool hidden_exact_in_bf16 = true;   // no value changed by that rounding
  std::vector<float> router_logits;   // [T, E]; empty when the file holds none
};

// hidden_states: BF16 or F32 [T, H] (or [..., H], leading dimensions
// flattened), finite (else the first offending row is named); router_logits,
// optional: F32 [T, E], finite. H, E and T must match the layer and each other.
ReplayInputs read_replay_inputs(const std::string& path, const MoeConfig& cfg);

struct ReplayOutputs {
  int64_t tokens = 0, hidden = 0, top_k = 0;
  std::vector<uint16_t> output;      // bf16 [T, H]
  std::vector<int32_t> topk_ids;     // [T, k]
  std::vector<float> topk_weights;   // [T, k]
  bool checked = false;              // --check: the fields below are written too
  std::vector<float> reference_output;        // fp32 [T, H]
  std::vector<int32_t> reference_topk_ids;    // [T, k]
  std::vector<float> reference_topk_weights;  // [T, k]
  float error = 0.0f;                         // ||output - reference|| / ||reference||
  std::vector<float> error_per_token;         // [T], the same per row
  std::map<std::string, std::string> metadata;
};

// Writes output, topk_ids, topk_weights (and with `checked`: reference_output,
// reference_topk_ids, reference_topk_weights, error, error_per_token)
// atomically: on any error nothing is left at `path`.
void write_replay_outputs(const std::string& path, const ReplayOutputs& out);

// Relative Frobenius error of bf16 `got` against `ref` [T, H], whole and per
// token; a non-finite value in `got` makes the error infinite.
void set_replay_error(ReplayOutputs& out);

// The CPU reference's replay: router logits from the input or computed from
// w.router_weight (fp32 hidden . fp32 weight^T, in double), routing, and the
// layer's output in fp32.
struct ReferenceReplay {
  Routing routing;
  std::vector<float> output;  // fp32 [T, H]
  bool logits_computed = false;
};
std::vector<float> replay_router_logits(const MoeConfig& cfg, const MoeWeights& w, const ReplayInputs& in,
                                        const std::vector<float>& hidden);
ReferenceReplay replay_reference(const MoeConfig& cfg, const MoeWeights& w, const ReplayInputs& in);

}  // namespace fp4moe::io
