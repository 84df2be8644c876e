#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>

#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe {
namespace {

using test::error_of;

Routing make_routing(int64_t T, int64_t k, std::vector<int32_t> ids) {
  Routing r;
  r.tokens = T;
  r.top_k = k;
  r.topk_ids = std::move(ids);
  r.topk_weights.assign(static_cast<size_t>(T * k), 1.0f / static_cast<float>(k));
  return r;
}

TEST(PermutationReference, HandCase) {
  // pairs: 0:(t0,e2) 1:(t0,e0) 2:(t1,e0) 3:(t1,e1) 4:(t2,e2) 5:(t2,e0)
  const Routing r = make_routing(3, 2, {2, 0, 0, 1, 2, 0});
  const Permutation p = permute_reference(r, 4);
  EXPECT_EQ(p.expert_offsets, (std::vector<int32_t>{0, 3, 4, 6, 6}));
  EXPECT_EQ(p.permuted_pair, (std::vector<int32_t>{1, 2, 5, 3, 0, 4}));
}

TEST(PermutationReference, BijectionMonotoneOffsetsStableOrder) {
  for (const char* name : {"glm5-small", "deepseek-v3-small", "mixtral-small"}) {
    const MoeConfig c = preset(name);
    const int64_t T = 37, E = c.num_experts, k = c.top_k;
    std::mt19937_64 g(41);
    std::normal_distribution<float> d(0.0f, 1.5f);
    std::vector<float> logits(static_cast<size_t>(T * E));
    for (float& x : logits) x = d(g);
    std::vector<float> bias;
    if (c.use_correction_bias)
      for (int64_t e = 0; e < E; ++e) bias.push_back(0.02f * d(g));
    const Routing r = route_reference(c, logits.data(), T, bias);
    const Permutation p = permute_reference(r, E);

    ASSERT_EQ(p.expert_offsets.size(), static_cast<size_t>(E + 1));
    ASSERT_EQ(p.permuted_pair.size(), static_cast<size_t>(T * k));
    EXPECT_EQ(p.expert_offsets.front(), 0);
    EXPECT_EQ(p.expert_offsets.back(), T * k);
    std::vector<int32_t> sorted = p.permuted_pair;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> iota(static_cast<size_t>(T * k));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(sorted, iota) << name << ": not a bijection";
    for (int64_t e = 0; e < E; ++e) {
      const int32_t b = p.expert_offsets[static_cast<size_t>(e)], en = p.expert_offsets[static_cast<size_t>(e + 1)];
      ASSERT_LE(b, en) << name;
      const auto count = std::count(r.topk_ids.begin(), r.topk_ids.end(), static_cast<int32_t>(e));
      EXPECT_EQ(en - b, count) << name << " expert " << e;
      for (int32_t i = b; i < en; ++i) {
        EXPECT_EQ(r.topk_ids[static_cast<size_t>(p.permuted_pair[static_cast<size_t>(i)])], e);
        if (i > b) {
          EXPECT_LT(p.permuted_pair[static_cast<size_t>(i - 1)], p.permuted_pair[static_cast<size_t>(i)]);
        }
      }
    }
    // Same as a stable sort of pair indices by expert.
    std::vector<int32_t> expect = iota;
    std::stable_sort(expect.begin(), expect.end(), [&](int32_t a, int32_t b) {
      return r.topk_ids[static_cast<size_t>(a)] < r.topk_ids[static_cast<size_t>(b)];
    });
    EXPECT_EQ(p.permuted_pair, expect) << name;
  }
}

TEST(PermutationReference, EmptyExpertsAndZeroTokens) {
  const Permutation p = permute_reference(make_routing(0, 2, {}), 3);
  EXPECT_EQ(p.expert_offsets, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_TRUE(p.permuted_pair.empty());
  const Permutation q = permute_reference(make_routing(2, 1, {3, 3}), 5);
  EXPECT_EQ(q.expert_offsets, (std::vector<int32_t>{0, 0, 0, 0, 2, 2}));
  EXPECT_EQ(q.permuted_pair, (std::vector<int32_t>{0, 1}));
}

TEST(PermutationReference, OutOfRangeExpertIdIsNamed) {
  std::string msg = error_of([] { permute_reference(make_routing(3, 2, {0, 1, 7, 2, 3, 0}), 4); });
  EXPECT_NE(msg.find("expert id 7 at token 1, slot 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
  msg = error_of([] { permute_reference(make_routing(2, 2, {0, 1, 2, -1}), 4); });
  EXPECT_NE(msg.find("expert id -1 at token 1, slot 1"), std::string::npos) << msg;
  msg = error_of([] { permute_reference(make_routing(2, 2, {0, 1, 2}), 4); });
  EXPECT_NE(msg.find("topk_ids has 3 entries"), std::string::npos) << msg;
  msg = error_of([] { permute_reference(make_routing(1, 1, {0}), 0); });
  EXPECT_NE(msg.find("num_experts = 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fp4moe
