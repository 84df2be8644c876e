// Counting sort of the T*k (token, slot) pairs by expert, stable in the pair
// index p = t*k + j.
#include <limits>

#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe {

Permutation permute_reference(const Routing& r, int64_t num_experts) {
  FP4MOE_CHECK(num_experts > 0, "permute_reference: num_experts = " << num_experts << " must be positive");
  FP4MOE_CHECK(r.tokens >= 0, "permute_reference: tokens = " << r.tokens << " must not be negative");
  FP4MOE_CHECK(r.top_k > 0, "permute_reference: top_k = " << r.top_k << " must be positive");
  const int64_t pairs = r.tokens * r.top_k;
  FP4MOE_CHECK(pairs <= std::numeric_limits<int32_t>::max(),
               "permute_reference: tokens * top_k = " << pairs << " does not fit int32 pair indices");
  FP4MOE_CHECK(static_cast<int64_t>(r.topk_ids.size()) == pairs,
               "permute_reference: topk_ids has " << r.topk_ids.size() << " entries, expected tokens * top_k = "
                                                  << r.tokens << " * " << r.top_k << " = " << pairs);

  Permutation p;
  p.expert_offsets.assign(static_cast<size_t>(num_experts + 1), 0);
  p.permuted_pair.resize(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = r.topk_ids[static_cast<size_t>(i)];
    FP4MOE_CHECK(e >= 0 && e < num_experts, "permute_reference: expert id " << e << " at token " << i / r.top_k
                                                << ", slot " << i % r.top_k << " is out of range [0, "
                                                << num_experts << ")");
    ++p.expert_offsets[static_cast<size_t>(e) + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e)
    p.expert_offsets[static_cast<size_t>(e + 1)] += p.expert_offsets[static_cast<size_t>(e)];
  std::vector<int32_t> next(p.expert_offsets.begin(), p.expert_offsets.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = r.topk_ids[static_cast<size_t>(i)];
    p.permuted_pair[static_cast<size_t>(next[static_cast<size_t>(e)]++)] = static_cast<int32_t>(i);
  }
  return p;
}

}  // namespace fp4moe
