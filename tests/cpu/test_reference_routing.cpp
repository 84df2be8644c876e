#include <gtest/gtest.h>

#include "test_util.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"
#include "reference/detail.hpp"

namespace fp4moe {
namespace {

using test::error_of;

MoeConfig softmax_cfg(int64_t E, int64_t k, bool renorm, float scale) {
  MoeConfig c;
  c.name = "test-softmax";
  c.hidden = 32;
  c.intermediate = 32;
  c.num_experts = E;
  c.top_k = k;
  c.scoring = Scoring::softmax;
  c.renormalize = renorm;
  c.routed_scaling_factor = scale;
  return c;
}

MoeConfig sigmoid_cfg(int64_t E, int64_t k, bool renorm, float scale, bool bias, int64_t n_group = 1,
                      int64_t topk_group = 1) {
  MoeConfig c = softmax_cfg(E, k, renorm, scale);
  c.name = "test-sigmoid";
  c.scoring = Scoring::sigmoid;
  c.use_correction_bias = bias;
  c.n_group = n_group;
  c.topk_group = topk_group;
  return c;
}

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<float> random_logits(int64_t n, uint64_t seed, float sd = 2.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

TEST(RoutingReference, SoftmaxTopKRenormalized) {
  const MoeConfig c = softmax_cfg(4, 2, true, 1.0f);
  const float logits[] = {1.0f, 3.0f, 2.0f, 0.0f};
  const Routing r = route_reference(c, logits, 1);
  ASSERT_EQ(r.topk_ids, (std::vector<int32_t>{1, 2}));
  // e^3 / (e^3 + e^2) = 1 / (1 + e^-1)
  EXPECT_NEAR(r.topk_weights[0], sig(1.0), 2e-7);
  EXPECT_NEAR(r.topk_weights[1], 1.0 - sig(1.0), 2e-7);
}

TEST(RoutingReference, SoftmaxTopKWithoutRenormalization) {
  const MoeConfig c = softmax_cfg(4, 2, false, 2.0f);
  const float logits[] = {1.0f, 3.0f, 2.0f, 0.0f};
  const Routing r = route_reference(c, logits, 1);
  ASSERT_EQ(r.topk_ids, (std::vector<int32_t>{1, 2}));
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(r.topk_weights[0], 2.0 * std::exp(3.0) / z, 4e-7);
  EXPECT_NEAR(r.topk_weights[1], 2.0 * std::exp(2.0) / z, 4e-7);
}

TEST(RoutingReference, SigmoidBiasChangesTheChoiceButNotTheWeights) {
  // s = sigmoid(logit): s0 = 0.881 > s1 = 0.731, but bias lifts expert 1's
  // choice score to 1.231; the weight is still the unbiased s1.
  const float logits[] = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.5f, 0.0f, 0.0f};
  {
    const MoeConfig c = sigmoid_cfg(4, 1, false, 1.0f, true);
    const Routing r = route_reference(c, logits, 1, bias);
    ASSERT_EQ(r.topk_ids, (std::vector<int32_t>{1}));
    EXPECT_NEAR(r.topk_weights[0], sig(1.0), 2e-7);
  }
  {
    const MoeConfig c = sigmoid_cfg(4, 2, true, 2.5f, true);
    const Routing r = route_reference(c, logits, 1, bias);
    ASSERT_EQ(r.topk_ids, (std::vector<int32_t>{1, 0}));
    const double s0 = sig(2.0), s1 = sig(1.0);
    EXPECT_NEAR(r.topk_weights[0], 2.5 * s1 / (s0 + s1), 1e-6);
    EXPECT_NEAR(r.topk_weights[1], 2.5 * s0 / (s0 + s1), 1e-6);
  }
  {  // Without the bias expert 0 wins.
    const MoeConfig c = sigmoid_cfg(4, 1, false, 1.0f, false);
    const Routing r = route_reference(c, logits, 1);
    ASSERT_EQ(r.topk_ids, (std::vector<int32_t>{0}));
    EXPECT_NEAR(r.topk_weights[0], sig(2.0), 2e-7);
  }
}

TEST(RoutingReference, GroupLimitExcludesTheHighestExpert) {
  // 4 groups of 2. Group 0 holds the single best expert (0) but its partner
  // is poor, so its top-2 sum (0.982 + 0.018 = 1.0) loses to group 1
  // (0.881 + 0.731) and group 2 (0.818 + 0.769); group 3 is 0.54.
  const float logits[] = {4.0f, -4.0f, 2.0f, 1.0f, 1.5f, 1.2f, -1.0f, -1.0f};
  const MoeConfig c = sigmoid_cfg(8, 2, true, 1.0f, false, 4, 2);
  const Routing r = route_reference(c, logits, 1);
  ASSERT_EQ(r.topk_ids, (std::vector<int32_t>{2, 4}));
  const double s2 = sig(2.0), s4 = sig(1.5);
  EXPECT_NEAR(r.topk_weights[0], s2 / (s2 + s4), 2e-7);
  EXPECT_NEAR(r.topk_weights[1], s4 / (s2 + s4), 2e-7);

  // Without group limiting, expert 0 is chosen first.
  const Routing flat = route_reference(sigmoid_cfg(8, 2, true, 1.0f, false), logits, 1);
  EXPECT_EQ(flat.topk_ids, (std::vector<int32_t>{0, 2}));

  // Group scores use the biased scores. Bias 1.0 on expert 7 gives group 3
  // 1.269 + 0.269 = 1.538, still below groups 1 (1.612) and 2 (1.586); bias
  // 1.1 gives 1.638, so groups 3 and 1 are kept and expert 7 comes first,
  // while its weight uses the unbiased sigmoid.
  MoeConfig cb = sigmoid_cfg(8, 2, true, 1.0f, true, 4, 2);
  std::vector<float> bias(8, 0.0f);
  bias[7] = 1.0f;
  EXPECT_EQ(route_reference(cb, logits, 1, bias).topk_ids, (std::vector<int32_t>{2, 4}));
  bias[7] = 1.1f;
  const Routing rb = route_reference(cb, logits, 1, bias);
  EXPECT_EQ(rb.topk_ids, (std::vector<int32_t>{7, 2}));
  const double s7 = sig(-1.0);
  EXPECT_NEAR(rb.topk_weights[0], s7 / (s7 + s2), 2e-7);
}

TEST(RoutingReference, TiesGoToTheLowestExpertIds) {
  {
    const float logits[] = {0.5f, 0.5f, 0.5f, 0.5f};
    const Routing r = route_reference(softmax_cfg(4, 2, true, 1.0f), logits, 1);
    EXPECT_EQ(r.topk_ids, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(r.topk_weights, (std::vector<float>{0.5f, 0.5f}));
  }
  {
    const float logits[] = {1.0f, 2.0f, 1.0f, 2.0f, 2.0f};
    const Routing r = route_reference(softmax_cfg(5, 4, true, 1.0f), logits, 1);
    EXPECT_EQ(r.topk_ids, (std::vector<int32_t>{1, 3, 4, 0}));
  }
  {
    const float logits[] = {-0.3f, 0.7f, 0.7f, -0.3f, 0.7f, 0.1f};
    const Routing r = route_reference(sigmoid_cfg(6, 3, false, 1.0f, false), logits, 1);
    EXPECT_EQ(r.topk_ids, (std::vector<int32_t>{1, 2, 4}));
  }
  {  // Equal group scores: the lower group ids are kept.
    const float logits[] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    const Routing r = route_reference(sigmoid_cfg(8, 3, true, 1.0f, false, 4, 2), logits, 1);
    EXPECT_EQ(r.topk_ids, (std::vector<int32_t>{0, 1, 2}));
  }
  {  // Biased ties: choice scores equal after the bias.
    const float logits[] = {0.0f, 0.0f, 0.0f, 0.0f};
    const std::vector<float> bias = {0.0f, 0.25f, 0.25f, 0.0f};
    const Routing r = route_reference(sigmoid_cfg(4, 2, false, 1.0f, true), logits, 1, bias);
    EXPECT_EQ(r.topk_ids, (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(r.topk_weights, (std::vector<float>{0.5f, 0.5f}));
  }
}

TEST(RoutingReference, WeightsSumToTheScalingFactorWhenRenormalized) {
  for (const char* name : {"glm5-small", "deepseek-v3-small", "mixtral-small", "glm5", "deepseek-v3"}) {
    const MoeConfig c = preset(name);
    const int64_t T = 64;
    const auto logits = random_logits(T * c.num_experts, 11);
    const auto bias = c.use_correction_bias ? random_logits(c.num_experts, 12, 0.05f) : std::vector<float>{};
    const Routing r = route_reference(c, logits.data(), T, bias);
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0.0;
      for (int64_t j = 0; j < c.top_k; ++j) sum += r.topk_weights[static_cast<size_t>(t * c.top_k + j)];
      EXPECT_NEAR(sum, c.routed_scaling_factor, 1e-5 * c.routed_scaling_factor) << name << " token " << t;
    }
  }
}

TEST(RoutingReference, RandomRoutingObeysTheRule) {
  // Property check on the presets: distinct ids in range, chosen in rule
  // order, every chosen expert inside the kept groups, every unchosen
  // candidate no better than the last chosen.
  for (const char* name : {"glm5-small", "deepseek-v3-small", "mixtral-small", "deepseek-v3"}) {
    const MoeConfig c = preset(name);
    const int64_t T = 50, E = c.num_experts, k = c.top_k;
    const auto logits = random_logits(T * E, 21);
    const auto bias = c.use_correction_bias ? random_logits(E, 22, 0.05f) : std::vector<float>{};
    const Routing r = route_reference(c, logits.data(), T, bias);
    ASSERT_EQ(r.tokens, T);
    ASSERT_EQ(r.top_k, k);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> score(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        const float l = logits[static_cast<size_t>(t * E + e)];
        score[static_cast<size_t>(e)] =
            c.scoring == Scoring::softmax ? l
                                          : detail::router_sigmoidf(l) + (bias.empty() ? 0.0f : bias[static_cast<size_t>(e)]);
      }
      std::set<int32_t> seen, groups;
      const int64_t G = E / c.n_group;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = r.topk_ids[static_cast<size_t>(t * k + j)];
        ASSERT_TRUE(id >= 0 && id < E);
        EXPECT_TRUE(seen.insert(id).second) << name << ": duplicate id " << id;
        groups.insert(static_cast<int32_t>(id / G));
        if (j > 0) {
          const int32_t prev = r.topk_ids[static_cast<size_t>(t * k + j - 1)];
          const float a = score[static_cast<size_t>(prev)], b = score[static_cast<size_t>(id)];
          EXPECT_TRUE(a > b || (a == b && prev < id)) << name << " token " << t << " slot " << j;
        }
      }
      EXPECT_LE(static_cast<int64_t>(groups.size()), c.topk_group) << name;
      const int32_t last = r.topk_ids[static_cast<size_t>(t * k + k - 1)];
      for (int64_t e = 0; e < E; ++e) {
        if (seen.count(static_cast<int32_t>(e)) || !groups.count(static_cast<int32_t>(e / G))) continue;
        EXPECT_LE(score[static_cast<size_t>(e)], score[static_cast<size_t>(last)]) << name;
      }
    }
  }
}

TEST(RoutingReference, DeterministicBitForBit) {
  const MoeConfig c = preset("deepseek-v3-small");
  const auto logits = random_logits(33 * c.num_experts, 5);
  const auto bias = random_logits(c.num_experts, 6, 0.05f);
  const Routing a = route_reference(c, logits.data(), 33, bias);
  const Routing b = route_reference(c, logits.data(), 33, bias);
  EXPECT_EQ(a.topk_ids, b.topk_ids);
  ASSERT_EQ(a.topk_weights.size(), b.topk_weights.size());
  EXPECT_EQ(std::memcmp(a.topk_weights.data(), b.topk_weights.data(), a.topk_weights.size() * sizeof(float)), 0);
}

int64_t ulp_distance(float a, float b) {
  const auto ia = static_cast<int64_t>(std::bit_cast<int32_t>(a));
  const auto ib = static_cast<int64_t>(std::bit_cast<int32_t>(b));
  return ia > ib ? ia - ib : ib - ia;  // both positive here
}

TEST(RoutingReference, RouterExpAndSigmoidAreAccurate) {
  EXPECT_EQ(detail::router_expf(0.0f), 1.0f);
  EXPECT_EQ(detail::router_expf(-100.0f), 0.0f);
  EXPECT_EQ(detail::router_expf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::router_expf(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::router_sigmoidf(0.0f), 0.5f);
  EXPECT_EQ(detail::router_sigmoidf(100.0f), 1.0f);
  EXPECT_EQ(detail::router_sigmoidf(-100.0f), 0.0f);
  std::mt19937_64 g(7);
  std::uniform_real_distribution<float> d(-87.0f, 88.5f);
  int64_t worst_exp = 0, worst_sig = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 100000 ? d(g) : d(g) / 20.0f;
    worst_exp = std::max(worst_exp, ulp_distance(detail::router_expf(x), static_cast<float>(std::exp(static_cast<double>(x)))));
    const float xs = x / 4.0f;
    worst_sig = std::max(worst_sig, ulp_distance(detail::router_sigmoidf(xs), static_cast<float>(sig(xs))));
  }
  EXPECT_LE(worst_exp, 2);
  EXPECT_LE(worst_sig, 3);
}

TEST(RoutingReference, BadInputsAreNamed) {
  const MoeConfig c = sigmoid_cfg(4, 2, true, 1.0f, true);
  std::vector<float> logits = random_logits(3 * 4, 31);
  const std::vector<float> bias = {0.01f, -0.02f, 0.03f, 0.0f};
  logits[1 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  std::string msg = error_of([&] { route_reference(c, logits.data(), 3, bias); });
  EXPECT_NE(msg.find("token 1, expert 2 is nan"), std::string::npos) << msg;
  logits[1 * 4 + 2] = 0.5f;
  logits[2 * 4 + 3] = -std::numeric_limits<float>::infinity();
  msg = error_of([&] { route_reference(c, logits.data(), 3, bias); });
  EXPECT_NE(msg.find("token 2, expert 3 is -inf"), std::string::npos) << msg;
  logits[2 * 4 + 3] = 0.5f;
  msg = error_of([&] { route_reference(c, logits.data(), 3, std::vector<float>{0.1f, 0.2f, 0.3f}); });
  EXPECT_NE(msg.find("correction_bias has 3 entries"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_experts = 4"), std::string::npos) << msg;
  msg = error_of([&] { route_reference(c, logits.data(), 3); });
  EXPECT_NE(msg.find("correction_bias has 0 entries"), std::string::npos) << msg;
  msg = error_of([&] {
    route_reference(c, logits.data(), 3, std::vector<float>{0.1f, std::numeric_limits<float>::infinity(), 0.0f, 0.0f});
  });
  EXPECT_NE(msg.find("correction_bias[1] is inf"), std::string::npos) << msg;
  msg = error_of([&] { route_reference(c, logits.data(), -1, bias); });
  EXPECT_NE(msg.find("tokens = -1"), std::string::npos) << msg;
  MoeConfig bad = c;
  bad.top_k = 5;
  msg = error_of([&] { route_reference(bad, logits.data(), 3, bias); });
  EXPECT_NE(msg.find("top_k = 5"), std::string::npos) << msg;
  EXPECT_NO_THROW(route_reference(c, logits.data(), 3, bias));
}

}  // namespace
}  // namespace fp4moe
