// The reference MoE layer forward: experts visited through the permutation,
// each expert's weights dequantized once per call, everything in double.
#include <cmath>
#include <string>

#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"
#include "reference/detail.hpp"

namespace fp4moe {

namespace {

void check_expert(const ExpertWeights& w, int64_t H, int64_t I, bool biased, const std::string& who) {
  detail::check_matrix(w.gate, I, H, who + " gate");
  detail::check_matrix(w.up, I, H, who + " up");
  detail::check_matrix(w.down, H, I, who + " down");
  const size_t want[3] = {biased ? size_t(I) : 0, biased ? size_t(I) : 0, biased ? size_t(H) : 0};
  const size_t got[3] = {w.gate_bias.size(), w.up_bias.size(), w.down_bias.size()};
  const char* names[3] = {" gate_bias", " up_bias", " down_bias"};
  for (int i = 0; i < 3; ++i)
    FP4MOE_CHECK(got[i] == want[i], who << names[i] << " has " << got[i] << " values; the model "
                                        << (biased ? "has biases of " + std::to_string(want[i]) : std::string("has no biases")));
}

void check_inputs(const MoeConfig& cfg, const MoeWeights& w, const float* x, int64_t tokens,
                  const Routing& routing) {
  cfg.validate();
  const int64_t H = cfg.hidden, I = cfg.intermediate, E = cfg.num_experts, k = cfg.top_k;
  FP4MOE_CHECK(tokens >= 0, "moe_forward_reference: tokens = " << tokens << " must not be negative");
  FP4MOE_CHECK(tokens == 0 || x != nullptr, "moe_forward_reference: x is null for tokens = " << tokens);
  FP4MOE_CHECK(static_cast<int64_t>(w.experts.size()) == E,
               "moe_forward_reference: weights hold " << w.experts.size() << " experts, config '" << cfg.name
                                                      << "' has num_experts = " << E);
  for (int64_t e = 0; e < E; ++e)
    check_expert(w.experts[static_cast<size_t>(e)], H, I, cfg.expert_bias, "expert " + std::to_string(e));
  FP4MOE_CHECK(w.has_shared == cfg.shared_expert,
               "moe_forward_reference: weights has_shared = " << w.has_shared << " but config '" << cfg.name
                                                              << "' has shared_expert = " << cfg.shared_expert);
  if (w.has_shared) check_expert(w.shared, H, cfg.shared_intermediate, cfg.expert_bias, "shared expert");
  FP4MOE_CHECK(routing.tokens == tokens && routing.top_k == k,
               "moe_forward_reference: routing is for tokens = " << routing.tokens << ", top_k = " << routing.top_k
                                                                 << "; expected tokens = " << tokens << ", top_k = " << k);
  FP4MOE_CHECK(static_cast<int64_t>(routing.topk_weights.size()) == tokens * k,
               "moe_forward_reference: topk_weights has " << routing.topk_weights.size()
                                                          << " entries, expected " << tokens * k);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const float v = routing.topk_weights[static_cast<size_t>(i)];
    FP4MOE_CHECK(std::isfinite(v), "moe_forward_reference: topk_weight at token " << i / k << ", slot " << i % k
                                                                                  << " is " << v);
  }
  for (int64_t i = 0; i < tokens * H; ++i) {
    FP4MOE_CHECK(std::isfinite(x[i]), "moe_forward_reference: x at token " << i / H << ", column " << i % H
                                                                           << " is " << x[i]);
  }
}

}  // namespace

std::vector<float> moe_forward_reference(const MoeConfig& cfg, const MoeWeights& w, const float* x,
                                         int64_t tokens, const Routing& routing) {
  return moe_forward_reference(cfg, w, x, tokens, routing, ActivationFormat::bf16);
}

std::vector<float> moe_forward_reference(const MoeConfig& cfg, const MoeWeights& w, const float* x, int64_t tokens,
                                         const Routing& routing, ActivationFormat activations) {
  check_inputs(cfg, w, x, tokens, routing);
  const bool fp8 = activations == ActivationFormat::fp8;
  const int64_t H = cfg.hidden, I = cfg.intermediate, E = cfg.num_experts, k = cfg.top_k;
  // permute_reference also rejects out-of-range expert ids.
  const Permutation perm = permute_reference(routing, E);

  std::vector<double> xd(static_cast<size_t>(tokens * H));
  for (int64_t i = 0; i < tokens * H; ++i) xd[static_cast<size_t>(i)] = static_cast<double>(x[i]);

  // fp8: each token's row as the FP8 row copy gives it to GEMM1
  std::vector<double> xq(fp8 ? xd : std::vector<double>{});
  for (int64_t t = 0; fp8 && t < tokens; ++t) detail::quantize_row_e4m3_in_place(xq.data() + t * H, H, false);

  // Work items: every expert with at least one pair (experts without tokens
  // are never dequantized or evaluated), then the shared expert.
  std::vector<int64_t> work;
  for (int64_t e = 0; e < E; ++e)
    if (perm.expert_offsets[static_cast<size_t>(e + 1)] > perm.expert_offsets[static_cast<size_t>(e)])
      work.push_back(e);
  const bool shared = w.has_shared && tokens > 0;
  if (shared) work.push_back(E);

  std::vector<double> y_pair(static_cast<size_t>(tokens * k * H));  // expert output per pair
  std::vector<double> y_shared(shared ? static_cast<size_t>(tokens * H) : 0);

  detail::parallel_for(static_cast<int64_t>(work.size()), [&](int64_t item) {
    const int64_t e = work[static_cast<size_t>(item)];
    if (e == E) {
      const int64_t Is = cfg.shared_intermediate;
      const detail::DenseExpert d = detail::dequantize_expert(w.shared, cfg, Is);
      std::vector<double> scratch(static_cast<size_t>(Is));
      for (int64_t t = 0; t < tokens; ++t)
        detail::expert_mlp(d, xd.data() + t * H, y_shared.data() + t * H, scratch.data());
      return;
    }
    detail::DenseExpert d = detail::dequantize_expert(w.experts[static_cast<size_t>(e)], cfg, I, fp8);
    d.fp8_intermediate = fp8;
    std::vector<double> scratch(static_cast<size_t>(I));
    for (int32_t i = perm.expert_offsets[static_cast<size_t>(e)]; i < perm.expert_offsets[static_cast<size_t>(e + 1)]; ++i) {
      const int64_t pair = perm.permuted_pair[static_cast<size_t>(i)];
      const int64_t t = pair / k;
      detail::expert_mlp(d, (fp8 ? xq : xd).data() + t * H, y_pair.data() + pair * H, scratch.data());
    }
  });

  // out[t] = sum over slots j (ascending) of w[t,j] * y[t,j], then + shared, in double.
  std::vector<float> out(static_cast<size_t>(tokens * H));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t n = 0; n < H; ++n) {
      double acc = 0.0;
      for (int64_t j = 0; j < k; ++j)
        acc += static_cast<double>(routing.topk_weights[static_cast<size_t>(t * k + j)]) *
               y_pair[static_cast<size_t>((t * k + j) * H + n)];
      if (shared) acc += y_shared[static_cast<size_t>(t * H + n)];
      out[static_cast<size_t>(t * H + n)] = static_cast<float>(acc);
    }
  }
  return out;
}

}  // namespace fp4moe
