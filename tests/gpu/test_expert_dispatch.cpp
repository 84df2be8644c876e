// The expert-parallel all-to-all's device bookkeeping against the host plan
// (parallel::plan_alltoall) for G = 2, 4 and 8, every rank as the sender:
// each block's slots, ids, weights and rows, each token's slot at each rank,
// the counts; and the combine's sum in rank order. A capacity below the
// tokens is reported, never written past.
#include <gtest/gtest.h>

#include <random>

#include "fp4moe/reference.hpp"
#include "gpu_test_util.hpp"
#include "kernels/expert_dispatch.hpp"
#include "kernels/routing_kernels.hpp"
#include "parallel/partition.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

// 16 experts, top-4, routing skewed to the first quarter (some ranks get nothing at G = 8).
struct Case {
  MoeConfig cfg;
  Routing r;
  test::Bf16Matrix x;
};
Case make_case(int64_t T, uint64_t seed) {
  Case c;
  c.cfg = preset("deepseek-v3-small");
  c.cfg.num_experts = 16;
  c.cfg.top_k = 4;
  c.cfg.n_group = 4;
  c.cfg.topk_group = 2;
  c.cfg.hidden = 64;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> logits(size_t(T * c.cfg.num_experts));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < c.cfg.num_experts; ++e)
      logits[size_t(t * c.cfg.num_experts + e)] = d(rng) + (e < c.cfg.num_experts / 4 ? 3.f : 0.f);
  std::vector<float> bias(size_t(c.cfg.num_experts));
  for (float& b : bias) b = 0.1f * d(rng);
  c.r = route_reference(c.cfg, logits.data(), T, bias);
  c.x = test::random_bf16(T * c.cfg.hidden, seed + 1);
  return c;
}

struct Dispatched {
  std::vector<int32_t> ids, slot_of, count;
  std::vector<float> weights;
  std::vector<uint16_t> hidden;
  int32_t status = 0;
};

// Runs the dispatch as rank `self` and returns every block as if sent (the own block from the receive buffers).
Dispatched dispatch(const Case& c, int G, int self, int64_t C) {
  const int64_t T = c.r.tokens, k = c.r.top_k, H = c.cfg.hidden;
  DeviceBuffer<uint16_t> x(c.x.bits), send_h(static_cast<size_t>(G * C * H)), recv_h(static_cast<size_t>(G * C * H));
  DeviceBuffer<int32_t> ids(c.r.topk_ids), send_i(static_cast<size_t>(G * C * k)), recv_i(static_cast<size_t>(G * C * k)), slot(static_cast<size_t>(T * G)),
      count(static_cast<size_t>(G)), status(1);
  DeviceBuffer<float> w(c.r.topk_weights), send_w(static_cast<size_t>(G * C * k)), recv_w(static_cast<size_t>(G * C * k));
  for (auto* b : {&send_i, &recv_i}) b->fill_bytes(0x55);  // poison: every slot must be written
  send_w.fill_bytes(0x55), recv_w.fill_bytes(0x55), slot.fill_bytes(0x55), status.fill_bytes(0);
  kernels::ExpertDispatchArgs a;
  a.hidden = reinterpret_cast<const __nv_bfloat16*>(x.get());
  a.topk_ids = ids.get();
  a.topk_weights = w.get();
  a.tokens = T;
  a.hidden_size = H;
  a.top_k = int(k);
  a.ranks = G;
  a.self = self;
  a.experts_per_rank = int(c.cfg.num_experts / G);
  a.capacity = C;
  a.send_hidden = reinterpret_cast<__nv_bfloat16*>(send_h.get());
  a.send_ids = send_i.get();
  a.send_weights = send_w.get();
  a.recv_hidden = reinterpret_cast<__nv_bfloat16*>(recv_h.get());
  a.recv_ids = recv_i.get();
  a.recv_weights = recv_w.get();
  a.slot_of = slot.get();
  a.send_count = count.get();
  a.status = status.get();
  kernels::launch_expert_dispatch(a, nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  Dispatched o;
  o.ids = send_i.download(), o.weights = send_w.download(), o.hidden = send_h.download();
  const std::vector<int32_t> ri = recv_i.download();
  const std::vector<float> rw = recv_w.download();
  const std::vector<uint16_t> rh = recv_h.download();
  std::copy(ri.begin() + self * C * k, ri.begin() + (self + 1) * C * k, o.ids.begin() + self * C * k);
  std::copy(rw.begin() + self * C * k, rw.begin() + (self + 1) * C * k, o.weights.begin() + self * C * k);
  std::copy(rh.begin() + self * C * H, rh.begin() + (self + 1) * C * H, o.hidden.begin() + self * C * H);
  o.slot_of = slot.download(), o.count = count.download(), o.status = status.download()[0];
  return o;
}

TEST(GpuExpertDispatch, MatchesTheHostPlanForEveryRank) {
  FP4MOE_REQUIRE_GPU();
  for (int64_t T : {1, 7, 33, 1500}) {  // 1500: more tokens than the slot kernel's block
    const Case c = make_case(T, 40 + uint64_t(T));
    const int64_t H = c.cfg.hidden, C = T + 5;
    for (int G : {1, 2, 4, 8}) {
      const parallel::AllToAllPlan p = parallel::plan_alltoall(c.cfg, c.r, G, C);
      for (int self : {0, G - 1}) {
        const Dispatched d = dispatch(c, G, self, C);
        const std::string at = "T=" + std::to_string(T) + " G=" + std::to_string(G) + " self=" + std::to_string(self);
        EXPECT_EQ(d.status, 0) << at;
        EXPECT_EQ(d.ids, p.ids) << at;
        EXPECT_EQ(d.weights, p.weights) << at;
        for (int r = 0; r < G; ++r) {
          EXPECT_EQ(d.count[size_t(r)], p.count[size_t(r)]) << at;
          for (int64_t s = 0; s < p.count[size_t(r)]; ++s) {
            const int64_t t = p.token[size_t(r * C + s)];
            ASSERT_EQ(d.slot_of[size_t(t * G + r)], s) << at;
            EXPECT_TRUE(std::equal(c.x.bits.begin() + t * H, c.x.bits.begin() + (t + 1) * H,
                                   d.hidden.begin() + (r * C + s) * H))
                << at << " row of token " << t;
          }
        }
        for (int64_t t = 0; t < T; ++t)
          for (int r = 0; r < G; ++r) {
            const int32_t s = d.slot_of[size_t(t * G + r)];
            EXPECT_TRUE(s == -1 || (s >= 0 && p.token[size_t(r * C + s)] == t)) << at;
          }
      }
    }
  }
}

TEST(GpuExpertDispatch, ACapacityBelowTheTokensIsReported) {
  FP4MOE_REQUIRE_GPU();
  const Case c = make_case(40, 9);
  const Dispatched d = dispatch(c, 4, 1, 8);
  EXPECT_EQ(d.status, kernels::kStatusCapacityOverflow);
  for (int r = 0; r < 4; ++r) EXPECT_LE(d.count[size_t(r)], 8);
  for (int32_t s : d.slot_of) EXPECT_LT(s, 8);
}

TEST(GpuExpertDispatch, CombineSumsTheRanksInOrder) {
  FP4MOE_REQUIRE_GPU();
  const int G = 3, self = 1;
  const int64_t T = 5, H = 8, C = 6;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> returned(size_t(G * C * H)), own(size_t(C * H));
  for (float& v : returned) v = nd(rng);
  for (float& v : own) v = nd(rng);
  const test::Bf16Matrix shared = test::random_bf16(T * H, 4);
  std::vector<int32_t> slot(static_cast<size_t>(T * G));
  for (int64_t t = 0; t < T; ++t)
    for (int d = 0; d < G; ++d) slot[size_t(t * G + d)] = (t + d) % 3 == 0 ? -1 : int32_t((t * 7 + d) % C);
  DeviceBuffer<float> r(returned), o(own);
  DeviceBuffer<uint16_t> sh(shared.bits), out(static_cast<size_t>(T * H));
  DeviceBuffer<int32_t> s(slot);
  out.fill_bytes(0xFF);
  kernels::ExpertCombineArgs a;
  a.returned = r.get(), a.own = o.get(), a.slot_of = s.get(), a.tokens = T, a.hidden_size = H, a.capacity = C;
  a.ranks = G, a.self = self, a.shared = reinterpret_cast<const __nv_bfloat16*>(sh.get());
  a.out = reinterpret_cast<__nv_bfloat16*>(out.get());
  kernels::launch_expert_combine(a, nullptr);
  const std::vector<uint16_t> got = out.download();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float want = 0.f;
      bool first = true;
      for (int d = 0; d < G; ++d) {
        const int32_t q = slot[size_t(t * G + d)];
        if (q < 0) continue;
        const float v = d == self ? own[size_t(q * H + h)] : returned[size_t((d * C + q) * H + h)];
        want = first ? v : want + v, first = false;
      }
      want += bf16_to_float(shared.bits[size_t(t * H + h)]);
      EXPECT_EQ(got[size_t(t * H + h)], bf16_from_float(want)) << "t=" << t << " h=" << h;
    }
}

}  // namespace
}  // namespace fp4moe
