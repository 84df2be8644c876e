// The parallel layer's partition on the CPU: for G = 2, 4 and 8, the ranks'
// partial layers (EP: the held experts; TP: the intermediate slices; all-to-all:
// the pairs each rank receives) sum to the single-GPU reference layer, with
// experts without tokens, ranks without tokens and T not divisible by G; bad
// setups name the value.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "fp4moe/reference.hpp"
#include "parallel/partition.hpp"
#include "test_util.hpp"

namespace fp4moe {
namespace {

using test::error_of;

struct Case {
  MoeConfig cfg;
  MoeWeights w;
  std::vector<float> x;
  Routing r;
  int64_t T;
};

// DeepSeek's routing rule (sigmoid, bias, 4 groups, top-2 groups) on 16
// experts, top-4, with I = 1024 (TP over 8 ranks keeps 128 per rank); routing
// skewed so some experts and some ranks get nothing.
Case make_case(int64_t T, uint64_t seed) {
  Case c;
  c.cfg = preset("deepseek-v3-small");
  c.cfg.num_experts = 16;
  c.cfg.top_k = 4;
  c.cfg.n_group = 4;
  c.cfg.topk_group = 2;
  c.cfg.intermediate = 1024;
  c.cfg.shared_intermediate = 1024;
  c.cfg.hidden = 128;
  c.w = random_moe_weights(c.cfg, Fp4Format::nvfp4, seed);
  c.T = T;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  c.x.resize(size_t(T * c.cfg.hidden));
  for (float& v : c.x) v = d(rng);
  std::vector<float> logits(size_t(T * c.cfg.num_experts));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < c.cfg.num_experts; ++e)  // the first quarter of the experts favoured
      logits[size_t(t * c.cfg.num_experts + e)] = d(rng) + (e < c.cfg.num_experts / 4 ? 3.f : 0.f);
  c.r = route_reference(c.cfg, logits.data(), T, c.w.correction_bias);
  return c;
}

double rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num / den);
}

// The routing with the pairs outside [begin, begin + count) weighing nothing.
Routing held(const Routing& r, parallel::ExpertRange e) {
  Routing o = r;
  for (size_t q = 0; q < o.topk_ids.size(); ++q)
    if (o.topk_ids[q] < e.begin || o.topk_ids[q] >= e.begin + e.count) o.topk_weights[q] = 0.f;
  return o;
}

TEST(ParallelPartition, ExpertParallelRanksSumToTheLayer) {
  for (int64_t T : {1, 5, 13}) {
    const Case c = make_case(T, 10 + uint64_t(T));
    const std::vector<float> full = moe_forward_reference(c.cfg, c.w, c.x.data(), T, c.r);
    for (int G : {2, 4, 8}) {
      MoeConfig routed = c.cfg;
      routed.shared_expert = false;  // each rank adds the shared expert to its own tokens once
      MoeWeights no_shared = c.w;
      no_shared.has_shared = false;
      std::vector<double> sum(full.size(), 0.0);
      int empty_ranks = 0;
      for (int rank = 0; rank < G; ++rank) {
        const parallel::ExpertRange e = parallel::expert_range(c.cfg, rank, G);
        const MoeWeights part = parallel::slice_experts(no_shared, e);
        EXPECT_EQ(int64_t(part.experts.size()), c.cfg.num_experts / G);
        // the rank's partial: its experts only (the reference takes every expert; the others weigh 0)
        const Routing h = held(c.r, e);
        bool any = false;
        for (float v : h.topk_weights) any |= v != 0.f;
        empty_ranks += !any;
        const std::vector<float> p = moe_forward_reference(routed, no_shared, c.x.data(), T, h);
        for (size_t i = 0; i < p.size(); ++i) sum[i] += p[i];
      }
      MoeConfig shared_only = c.cfg;
      Routing none = c.r;
      for (float& v : none.topk_weights) v = 0.f;
      const std::vector<float> s = moe_forward_reference(shared_only, c.w, c.x.data(), T, none);
      for (size_t i = 0; i < s.size(); ++i) sum[i] += s[i];
      EXPECT_LT(rel(full, sum), 1e-6) << "EP" << G << " T=" << T;
      if (T == 1 && G == 8) {
        EXPECT_GT(empty_ranks, 0) << "the skewed routing leaves some rank without pairs";
      }
    }
  }
}

TEST(ParallelPartition, TensorParallelSlicesSumToTheLayer) {
  for (int64_t T : {1, 7, 11}) {
    const Case c = make_case(T, 40 + uint64_t(T));
    const std::vector<float> full = moe_forward_reference(c.cfg, c.w, c.x.data(), T, c.r);
    for (int G : {2, 4, 8}) {
      const MoeConfig part_cfg = parallel::tp_config(c.cfg, G);
      EXPECT_EQ(part_cfg.intermediate, c.cfg.intermediate / G);
      std::vector<double> sum(full.size(), 0.0);
      for (int rank = 0; rank < G; ++rank) {
        const MoeWeights part = parallel::slice_intermediate(c.cfg, c.w, rank, G);
        const std::vector<float> p = moe_forward_reference(part_cfg, part, c.x.data(), T, c.r);
        for (size_t i = 0; i < p.size(); ++i) sum[i] += p[i];
      }
      EXPECT_LT(rel(full, sum), 1e-6) << "TP" << G << " T=" << T;
    }
  }
}

TEST(ParallelPartition, AllToAllSlotsCarryEveryPairOnceAndBack) {
  for (int64_t T : {1, 6, 33}) {
    const Case c = make_case(T, 70 + uint64_t(T));
    const int64_t k = c.cfg.top_k;
    for (int G : {2, 4, 8}) {
      const int64_t capacity = T + 3;  // T_max above T: the slots past the tokens stay empty
      const parallel::AllToAllPlan p = parallel::plan_alltoall(c.cfg, c.r, G, capacity);
      std::vector<int> seen(size_t(T * k), 0);
      for (int d = 0; d < G; ++d) {
        const parallel::ExpertRange e = parallel::expert_range(c.cfg, d, G);
        ASSERT_LE(p.count[size_t(d)], T);
        for (int64_t s = 0; s < capacity; ++s) {
          const int32_t t = p.token[size_t(d * capacity + s)];
          if (s >= p.count[size_t(d)]) {
            EXPECT_EQ(t, -1);
            continue;
          }
          ASSERT_GE(t, 0);
          if (s > 0) {
            EXPECT_LT(p.token[size_t(d * capacity + s - 1)], t) << "tokens keep their order";
          }
          for (int64_t j = 0; j < k; ++j) {
            const int32_t id = p.ids[size_t((d * capacity + s) * k + j)];
            if (id < 0) continue;
            EXPECT_EQ(id, c.r.topk_ids[size_t(t * k + j)]);
            EXPECT_TRUE(id >= e.begin && id < e.begin + e.count) << "pair sent to the rank holding its expert";
            EXPECT_EQ(p.weights[size_t((d * capacity + s) * k + j)], c.r.topk_weights[size_t(t * k + j)]);
            ++seen[size_t(t * k + j)];
          }
        }
      }
      for (size_t q = 0; q < seen.size(); ++q) EXPECT_EQ(seen[q], 1) << "pair " << q << ", EP" << G << " T=" << T;
    }
  }
}

TEST(ParallelPartition, BadSetupsNameTheValue) {
  MoeConfig c = preset("deepseek-v3-small");
  EXPECT_NE(error_of([&] { parallel::expert_range(c, 0, 3); }).find("E = 32 experts do not divide among 3 ranks"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parallel::expert_range(c, 4, 4); }).find("rank = 4 is outside 0..3"), std::string::npos);
  EXPECT_NE(error_of([&] { parallel::tp_config(c, 2); }).find("I = 128 over 2 ranks gives 64 per rank"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_parallel_mode("ring"); }).find("'ring'"), std::string::npos);
}

}  // namespace
}  // namespace fp4moe
