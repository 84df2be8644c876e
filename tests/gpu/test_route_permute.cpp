// Routing and permutation in one launch (launch_route_permute) against the
// router then the permutation as two launches, bitwise: every output of both
// (ids, weights, status, expert offsets, permuted pairs and tokens, each
// pair's row, the dense offsets), at 1 to 8 tokens, for sigmoid routing with a
// correction bias and groups, softmax with and without renormalisation, a
// layer holding a range of the experts, the shared expert among the routed
// rows, exact ties and a token with a non-finite logit. Outputs poisoned.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "gpu_test_util.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

struct Outputs {
  std::vector<int32_t> ids, offsets, pair, token, pair_pos, dense, status;
  std::vector<uint32_t> weight_bits;
  bool operator==(const Outputs&) const = default;
};

// One layer's routing and permutation, into freshly poisoned buffers.
Outputs route_and_permute(const MoeConfig& c, const DeviceBuffer<float>& logits, const DeviceBuffer<float>& bias,
                          int64_t T, int begin, int held, int64_t shared, bool fused) {
  const int k = int(c.top_k);
  const int64_t P = T * k, rows = P + shared;
  DeviceBuffer<int32_t> ids{size_t(P)}, offsets{size_t(held + 2)}, pair{size_t(rows)}, token{size_t(rows)},
      pair_pos{size_t(P)}, dense{2}, status{size_t(kernels::kStatusWords)};
  DeviceBuffer<float> weights{size_t(P)};
  for (auto* b : {&ids, &offsets, &pair, &token, &pair_pos, &dense}) b->fill_bytes(0x7F);
  weights.fill_bytes(0x7F);
  status.fill_bytes(0);
  kernels::RouteArgs r = kernels::route_args(c, bias.get(), T, ids.get(), weights.get(), status.get());
  r.logits = logits.get();
  kernels::PermuteArgs p;
  p.topk_ids = ids.get();
  p.tokens = T, p.experts = held, p.top_k = k, p.expert_begin = begin, p.global_experts = int(c.num_experts);
  p.expert_offsets = offsets.get(), p.permuted_pair = pair.get(), p.permuted_token = token.get();
  p.pair_pos = pair_pos.get(), p.shared_rows = shared, p.dense_offsets = dense.get(), p.status = status.get();
  if (fused) {
    kernels::launch_route_permute(r, p, nullptr);
  } else {
    kernels::launch_route(r, nullptr);
    kernels::launch_permute(p, nullptr);
  }
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  Outputs o{ids.download(), offsets.download(), pair.download(), token.download(), pair_pos.download(),
            dense.download(), status.download(), {}};
  const std::vector<float> w = weights.download();
  o.weight_bits.resize(w.size());
  std::memcpy(o.weight_bits.data(), w.data(), w.size() * 4);
  return o;
}

TEST(GpuRoutePermute, EqualsRouteThenPermuteBitwise) {
  FP4MOE_REQUIRE_GPU();
  std::vector<MoeConfig> configs = {preset("glm5"), preset("deepseek-v3"), preset("mixtral"), preset("gpt-oss-120b")};
  MoeConfig softmax_all = preset("mixtral");
  softmax_all.renormalize = false;
  softmax_all.name = "mixtral, softmax over every expert";
  configs.push_back(softmax_all);
  // the kernel's other instances: 64 experts (2 a lane) and 512 (16 a lane, the most shared memory at top-32)
  MoeConfig e64 = preset("gpt-oss-120b");
  e64.num_experts = 64, e64.name = "gpt-oss with 64 experts";
  configs.push_back(e64);
  MoeConfig e512 = preset("deepseek-v3");
  e512.num_experts = 512, e512.top_k = 32, e512.topk_group = 8, e512.name = "deepseek-v3 with 512 experts, top-32";
  configs.push_back(e512);
  int checked = 0;
  for (const MoeConfig& c : configs) {
    const int E = int(c.num_experts);
    ASSERT_TRUE(kernels::route_permute_fits(kernels::kRoutePermuteMaxTokens, E, E)) << c.name;
    for (int64_t T = 1; T <= kernels::kRoutePermuteMaxTokens; ++T) {
      std::mt19937 rng(uint32_t(T * 13 + E));
      std::normal_distribution<float> d(0.f, 2.f);
      std::vector<float> logits(size_t(T * E));
      for (size_t i = 0; i < logits.size(); ++i)  // odd tokens on a coarse grid: exact ties
        logits[i] = (i / size_t(E)) % 2 ? std::round(d(rng) * 2.f) / 2.f : d(rng);
      if (T > 2) logits[size_t((T / 2) * E + 3)] = INFINITY;  // routed to experts 0..k-1 with weight 0, flagged
      std::vector<float> bias(size_t(E), 0.f);
      if (c.use_correction_bias)
        for (float& b : bias) b = std::round(d(rng) * 8.f) / 256.f;
      const DeviceBuffer<float> d_logits(logits), d_bias(bias);
      // all experts held; a range of them (expert parallelism); the shared expert among the routed rows
      for (const auto& [begin, held, shared] : {std::tuple{0, E, int64_t(0)}, std::tuple{E / 4, E / 2, int64_t(0)},
                                                std::tuple{0, E, T}}) {
        const std::string what = c.name + " T=" + std::to_string(T) + " experts [" + std::to_string(begin) + ", " +
                                 std::to_string(begin + held) + ") shared rows " + std::to_string(shared);
        const Outputs two = route_and_permute(c, d_logits, d_bias, T, begin, held, shared, false);
        const Outputs one = route_and_permute(c, d_logits, d_bias, T, begin, held, shared, true);
        EXPECT_EQ(two.status[0] & kernels::kStatusNonFiniteLogit, T > 2 ? kernels::kStatusNonFiniteLogit : 0) << what;
        EXPECT_TRUE(one == two) << what;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 7 * 8 * 3);
}

// Beyond one CTA's reach the launch is refused by name, before anything runs.
TEST(GpuRoutePermute, RefusesTooManyTokensOrExperts) {
  FP4MOE_REQUIRE_GPU();
  EXPECT_FALSE(kernels::route_permute_fits(kernels::kRoutePermuteMaxTokens + 1, 256, 256));
  EXPECT_FALSE(kernels::route_permute_fits(1, kernels::kRoutePermuteMaxExperts + 1, 64));
  EXPECT_FALSE(kernels::route_permute_fits(1, 256, kernels::kRoutePermuteMaxExperts + 1));
  const MoeConfig c = preset("glm5");
  DeviceBuffer<float> logits(size_t(9 * c.num_experts)), weights(size_t(9 * c.top_k)), bias(size_t(c.num_experts));
  DeviceBuffer<int32_t> ids(size_t(9 * c.top_k)), offsets(size_t(c.num_experts + 1)), pair(size_t(9 * c.top_k)),
      token(size_t(9 * c.top_k)), pair_pos(size_t(9 * c.top_k)), status(2);
  kernels::RouteArgs r = kernels::route_args(c, bias.get(), 9, ids.get(), weights.get(), status.get());
  r.logits = logits.get();
  kernels::PermuteArgs p;
  p.topk_ids = ids.get(), p.tokens = 9, p.experts = int(c.num_experts), p.top_k = int(c.top_k);
  p.expert_offsets = offsets.get(), p.permuted_pair = pair.get(), p.permuted_token = token.get();
  p.pair_pos = pair_pos.get(), p.status = status.get();
  try {
    kernels::launch_route_permute(r, p, nullptr);
    FAIL() << "9 tokens were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens over 256 experts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4moe
