// The CPU reference MoE layer: the oracle every GPU path is checked against.
// Weights are dequantized exactly; every dot product accumulates in double.
//
// Top-k tie rule (used by the reference and every GPU router): experts are
// ordered by score descending, and equal scores by expert id ascending; the
// first k in that order are chosen, and reported in that order.
// Group-limited top-k: a group's score is the sum of its two best (biased)
// expert scores; groups are ordered the same way (score desc, group id asc).
#pragma once
#include <cstdint>
#include <vector>

#include "fp4moe/format.hpp"
#include "fp4moe/model.hpp"
#include "fp4moe/weights.hpp"

namespace fp4moe {

struct Routing {
  int64_t tokens = 0, top_k = 0;
  std::vector<int32_t> topk_ids;     // [T, k]
  std::vector<float> topk_weights;   // [T, k]
};

// logits: fp32 [T, E]; bias: [E] (used when cfg.use_correction_bias) or empty.
Routing route_reference(const MoeConfig& cfg, const float* logits, int64_t tokens,
                        const std::vector<float>& correction_bias = {});

// Counting sort of the T*k (token, slot) pairs by expert; inside an expert,
// pairs keep ascending pair index t*k + j (deterministic).
struct Permutation {
  std::vector<int32_t> expert_offsets;  // [E+1]
  std::vector<int32_t> permuted_pair;   // [T*k], pair index t*k + j
};
Permutation permute_reference(const Routing& r, int64_t num_experts);

// out[t] = sum_j w[t,j] * down(act(gate x, up x)) (+ shared expert), fp32 [T, H],
// act per MoeConfig::activation, with the expert biases when the model has them.
// x: fp32 [T, H] (callers holding bf16 convert exactly).
std::vector<float> moe_forward_reference(const MoeConfig& cfg, const MoeWeights& w,
                                         const float* x, int64_t tokens, const Routing& routing);
// The same with the routed experts' arithmetic of a layer of `activations`:
// fp8 quantizes each token's x and each pair's SwiGLU output (after rounding
// it to bf16) to e4m3 with a per-row scale, as the layer's FP8 row copies do;
// MXFP4 weights are exact either way, NVFP4 weights are rounded to e4m3 as the
// fold rounds them (LayerOptions::fp8_rounds_nvfp4; docs/fp8.md). The shared
// expert stays bf16.
std::vector<float> moe_forward_reference(const MoeConfig& cfg, const MoeWeights& w, const float* x, int64_t tokens,
                                         const Routing& routing, ActivationFormat activations);

// Router logits as the Hugging Face GLM-5 / DeepSeek-V3 code computes them:
// fp32(hidden) . fp32(router_weight)^T; here in double, rounded to fp32 [T, E];
// plus router_bias [E] when given (gpt-oss's router), added in fp32.
std::vector<float> router_logits_reference(const float* hidden, int64_t tokens, int64_t hidden_size,
                                           const std::vector<uint16_t>& router_weight,
                                           const std::vector<float>& router_bias = {});

// Router logits [T, E] as random hidden states through a random router give
// them: i.i.d. N(0, stddev^2) from mt19937_64(seed). The tests, the tuner and
// the benchmarks route these through the model's own router.
std::vector<float> gaussian_logits(int64_t tokens, int64_t experts, uint64_t seed, float stddev = 1.f);

// Grouped GEMM oracle used by kernel tests: y[r] = x[r] . dequant(W)^T for
// the rows of each expert, fp64 accumulation, fp32 result.
void expert_gemm_reference(const Fp4Matrix& w, const float* x, int64_t rows, float* y);

}  // namespace fp4moe
