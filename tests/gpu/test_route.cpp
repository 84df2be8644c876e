// The GPU router against the CPU reference, bitwise: expert choice and weights, ties included, for
// sigmoid + correction bias with and without groups and for softmax with and
// without renormalisation; a non-finite logit routes its token with zero weights.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "fp4moe/reference.hpp"
#include "gpu_test_util.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

struct RouteRun {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int32_t status = 0;
};

RouteRun route_on_gpu(const MoeConfig& c, const std::vector<float>& logits, const std::vector<float>& bias, int64_t T) {
  DeviceBuffer<float> dl(logits), db(bias.empty() ? std::vector<float>{0.f} : bias);
  DeviceBuffer<int32_t> ids(size_t(T * c.top_k)), status(1);
  DeviceBuffer<float> w(size_t(T * c.top_k));
  ids.fill_bytes(0xFF);
  w.fill_bytes(0xFF);
  status.fill_bytes(0);
  kernels::RouteArgs a = kernels::route_args(c, db.get(), T, ids.get(), w.get(), status.get());
  a.logits = dl.get();
  kernels::launch_route(a, nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return {ids.download(), w.download(), status.download()[0]};
}

TEST(GpuRouter, MatchesTheReferenceBitwise) {
  FP4MOE_REQUIRE_GPU();
  std::vector<MoeConfig> configs = {preset("glm5"), preset("deepseek-v3"), preset("mixtral")};
  MoeConfig softmax_all = preset("mixtral");
  softmax_all.renormalize = false;
  softmax_all.name = "mixtral, softmax over every expert";
  configs.push_back(softmax_all);
  MoeConfig wide = preset("glm5");
  wide.num_experts = 1000;  // not a multiple of 32: the last warp's lanes past E
  wide.name = "glm5 with 1000 experts";
  configs.push_back(wide);
  int64_t checked = 0;
  for (const MoeConfig& c : configs) {
    for (int64_t T : {1, 3, 33, 300}) {
      std::mt19937 rng(uint32_t(T * 7 + c.num_experts));
      std::normal_distribution<float> d(0.f, 2.f);
      std::vector<float> logits(size_t(T * c.num_experts));
      for (size_t i = 0; i < logits.size(); ++i)  // every third token on a coarse grid: many exact ties
        logits[i] = (i / size_t(c.num_experts)) % 3 == 0 ? std::round(d(rng) * 2.f) / 2.f : d(rng);
      logits[size_t(T / 2 * c.num_experts + 5)] = T > 2 ? NAN : logits[5];  // one token with a bad logit
      std::vector<float> bias;
      if (c.use_correction_bias) {
        bias.resize(size_t(c.num_experts));
        for (float& b : bias) b = std::round(d(rng) * 8.f) / 256.f;
      }
      std::vector<float> clean = logits;
      for (float& l : clean) l = std::isfinite(l) ? l : 0.f;
      const Routing ref = route_reference(c, clean.data(), T, bias);
      {
        const std::string what = c.name + " T=" + std::to_string(T);
        const RouteRun g = route_on_gpu(c, logits, bias, T);
        EXPECT_EQ(g.status != 0, T > 2) << what << ": status " << g.status;
        for (int64_t t = 0; t < T; ++t) {
          const bool bad = T > 2 && t == T / 2;
          for (int64_t j = 0; j < c.top_k; ++j) {
            const size_t i = size_t(t * c.top_k + j);
            if (bad) {
              EXPECT_EQ(g.ids[i], int32_t(j)) << what << " token " << t;
              EXPECT_EQ(g.weights[i], 0.f) << what << " token " << t;
              continue;
            }
            ASSERT_EQ(g.ids[i], ref.topk_ids[i]) << what << ": token " << t << " slot " << j;
            uint32_t a, b;
            std::memcpy(&a, &g.weights[i], 4);
            std::memcpy(&b, &ref.topk_weights[i], 4);
            ASSERT_EQ(a, b) << what << ": token " << t << " slot " << j << " weight " << g.weights[i] << " vs "
                            << ref.topk_weights[i];
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

}  // namespace
}  // namespace fp4moe
