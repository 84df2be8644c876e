// The reference router. Every score and weight is computed in fp32 with a
// fixed sequence of IEEE operations so a GPU router can match it bit for bit;
// docs/reference.md states the contract.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"
#include "reference/detail.hpp"
#include "reference/router_math.hpp"

namespace fp4moe {
namespace detail {

float router_expf(float x) { return router_math::expf_exact(x); }

float router_sigmoidf(float x) { return router_math::sigmoidf_exact(x); }

}  // namespace detail

namespace {

// First k of `candidates` ordered by score descending, then index ascending.
void top_k_by_score(std::vector<int32_t>& candidates, const float* score, int64_t k) {
  const auto better = [score](int32_t a, int32_t b) {
    if (score[a] > score[b]) return true;
    if (score[b] > score[a]) return false;
    return a < b;
  };
  std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), better);
  candidates.resize(static_cast<size_t>(k));
}

void check_logits(const float* row, int64_t t, int64_t num_experts) {
  for (int64_t e = 0; e < num_experts; ++e) {
    FP4MOE_CHECK(std::isfinite(row[e]), "router logit at token " << t << ", expert " << e << " is "
                                                                 << row[e] << " (must be finite)");
  }
}

void route_softmax(const MoeConfig& cfg, const float* row, int32_t* ids, float* weights,
                   std::vector<int32_t>& cand, std::vector<float>& ex) {
  const int64_t E = cfg.num_experts, k = cfg.top_k;
  // Softmax is monotone in the logit, so the top-k of p are chosen by logit
  // (exact; avoids ties manufactured by rounding p).
  cand.resize(static_cast<size_t>(E));
  std::iota(cand.begin(), cand.end(), 0);
  top_k_by_score(cand, row, k);

  float m = row[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, row[e]);
  if (cfg.renormalize) {
    // p_j / sum_chosen p = ex_j / sum_chosen ex: the full-E sum cancels.
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      ex[static_cast<size_t>(j)] = detail::router_expf(router_math::fadd(row[cand[static_cast<size_t>(j)]], -m));
      sum = router_math::fadd(sum, ex[static_cast<size_t>(j)]);
    }
    // sum >= 1: the top choice has logit m and ex = exp(0) = 1 exactly.
    for (int64_t j = 0; j < k; ++j) {
      const float q = router_math::fdiv(ex[static_cast<size_t>(j)], sum);
      weights[j] = router_math::fmul(q, cfg.routed_scaling_factor);
    }
  } else {
    float sum = 0.0f;  // over all experts, ascending expert id
    for (int64_t e = 0; e < E; ++e) sum = router_math::fadd(sum, detail::router_expf(router_math::fadd(row[e], -m)));
    for (int64_t j = 0; j < k; ++j) {
      const float p = router_math::fdiv(detail::router_expf(router_math::fadd(row[cand[static_cast<size_t>(j)]], -m)), sum);
      weights[j] = router_math::fmul(p, cfg.routed_scaling_factor);
    }
  }
  for (int64_t j = 0; j < k; ++j) ids[j] = cand[static_cast<size_t>(j)];
}

void route_sigmoid(const MoeConfig& cfg, const float* row, const float* bias, int32_t* ids,
                   float* weights, std::vector<int32_t>& cand, std::vector<float>& s,
                   std::vector<float>& c, std::vector<float>& gscore, std::vector<int32_t>& groups) {
  const int64_t E = cfg.num_experts, k = cfg.top_k;
  for (int64_t e = 0; e < E; ++e) {
    s[static_cast<size_t>(e)] = detail::router_sigmoidf(row[e]);
    c[static_cast<size_t>(e)] = bias ? router_math::fadd(s[static_cast<size_t>(e)], bias[e]) : s[static_cast<size_t>(e)];
  }
  cand.clear();
  if (cfg.n_group > 1) {
    const int64_t G = E / cfg.n_group;
    for (int64_t g = 0; g < cfg.n_group; ++g) {
      // Sum of the group's two best choice scores (its one score when G == 1).
      const float* cg = c.data() + g * G;
      float best = -std::numeric_limits<float>::infinity();
      float second = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < G; ++i) {
        if (cg[i] > best) {
          second = best;
          best = cg[i];
        } else if (cg[i] > second) {
          second = cg[i];
        }
      }
      gscore[static_cast<size_t>(g)] = G >= 2 ? router_math::fadd(best, second) : best;
    }
    groups.resize(static_cast<size_t>(cfg.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    top_k_by_score(groups, gscore.data(), cfg.topk_group);
    std::sort(groups.begin(), groups.end());
    for (int32_t g : groups)
      for (int64_t i = 0; i < G; ++i) cand.push_back(static_cast<int32_t>(g * G + i));
  } else {
    cand.resize(static_cast<size_t>(E));
    std::iota(cand.begin(), cand.end(), 0);
  }
  top_k_by_score(cand, c.data(), k);

  if (cfg.renormalize) {
    float sum = 0.0f;  // slot order
    for (int64_t j = 0; j < k; ++j) sum = router_math::fadd(sum, s[static_cast<size_t>(cand[static_cast<size_t>(j)])]);
    for (int64_t j = 0; j < k; ++j) {
      // sum == 0 only if every chosen sigmoid underflowed to 0: weights 0.
      const float q = sum > 0.0f ? router_math::fdiv(s[static_cast<size_t>(cand[static_cast<size_t>(j)])], sum) : 0.0f;
      weights[j] = router_math::fmul(q, cfg.routed_scaling_factor);
    }
  } else {
    for (int64_t j = 0; j < k; ++j)
      weights[j] = router_math::fmul(s[static_cast<size_t>(cand[static_cast<size_t>(j)])], cfg.routed_scaling_factor);
  }
  for (int64_t j = 0; j < k; ++j) ids[j] = cand[static_cast<size_t>(j)];
}

}  // namespace

Routing route_reference(const MoeConfig& cfg, const float* logits, int64_t tokens,
                        const std::vector<float>& correction_bias) {
  cfg.validate();
  FP4MOE_CHECK(tokens >= 0, "route_reference: tokens = " << tokens << " must not be negative");
  FP4MOE_CHECK(tokens == 0 || logits != nullptr,
               "route_reference: logits is null for tokens = " << tokens);
  const int64_t E = cfg.num_experts, k = cfg.top_k;
  const float* bias = nullptr;
  if (cfg.use_correction_bias) {
    FP4MOE_CHECK(static_cast<int64_t>(correction_bias.size()) == E,
                 "route_reference: correction_bias has " << correction_bias.size()
                                                         << " entries, expected num_experts = " << E);
    for (int64_t e = 0; e < E; ++e) {
      FP4MOE_CHECK(std::isfinite(correction_bias[static_cast<size_t>(e)]),
                   "route_reference: correction_bias[" << e << "] is " << correction_bias[static_cast<size_t>(e)]
                                                       << " (must be finite)");
    }
    bias = correction_bias.data();
  }

  Routing r;
  r.tokens = tokens;
  r.top_k = k;
  r.topk_ids.resize(static_cast<size_t>(tokens * k));
  r.topk_weights.resize(static_cast<size_t>(tokens * k));

  std::vector<int32_t> cand, groups;
  std::vector<float> s(static_cast<size_t>(E)), c(static_cast<size_t>(E)),
      gscore(static_cast<size_t>(cfg.n_group)), ex(static_cast<size_t>(k));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * E;
    check_logits(row, t, E);
    int32_t* ids = r.topk_ids.data() + t * k;
    float* w = r.topk_weights.data() + t * k;
    if (cfg.scoring == Scoring::softmax)
      route_softmax(cfg, row, ids, w, cand, ex);
    else
      route_sigmoid(cfg, row, bias, ids, w, cand, s, c, gscore, groups);
  }
  return r;
}

}  // namespace fp4moe
