// A random routing of T tokens as the grouped GEMM benchmarks use it: each
// expert's rows, the permuted pairs' tokens, the active experts.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "fp4moe/reference.hpp"

namespace fp4moe::bench {

struct RoutedBatch {
  int64_t tokens = 0, pairs = 0, active = 0, max_rows = 0;
  std::vector<int32_t> offsets, gather;  // gather: token of each permuted pair
  std::vector<int32_t> counts;
};

inline RoutedBatch batch_of(const MoeConfig& cfg, const Routing& r) {
  const Permutation p = permute_reference(r, cfg.num_experts);
  RoutedBatch b;
  b.tokens = r.tokens;
  b.pairs = r.tokens * cfg.top_k;
  b.offsets = p.expert_offsets;
  b.gather.resize(p.permuted_pair.size());
  for (size_t i = 0; i < p.permuted_pair.size(); ++i) b.gather[i] = int32_t(p.permuted_pair[i] / cfg.top_k);
  for (int64_t e = 0; e < cfg.num_experts; ++e) {
    const int32_t c = b.offsets[size_t(e + 1)] - b.offsets[size_t(e)];
    b.counts.push_back(c);
    b.active += c > 0;
    b.max_rows = std::max<int64_t>(b.max_rows, c);
  }
  return b;
}

inline Routing random_routing(const MoeConfig& cfg, int64_t T, uint64_t seed) {
  const std::vector<float> logits = gaussian_logits(T, cfg.num_experts, seed);
  // Uniform random top-k: i.i.d. logits and a zero correction bias.
  const std::vector<float> bias(size_t(cfg.num_experts), 0.f);
  return route_reference(cfg, logits.data(), T, cfg.use_correction_bias ? bias : std::vector<float>{});
}
inline RoutedBatch route_random(const MoeConfig& cfg, int64_t T, uint64_t seed) { return batch_of(cfg, random_routing(cfg, T, seed)); }

}  // namespace fp4moe::bench
