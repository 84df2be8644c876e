// The small-batch path's down projection and weighted sum (decode_down.hpp)
// against the same sum in double over exactly dequantized weights: at 1 to 8
// tokens, NVFP4 and MXFP4, with and without expert biases and a shared
// expert, routing spread over the experts, all tokens on the same experts,
// and an engine's routing that repeats an expert within a token (more than 8
// rows for one expert). Outputs poisoned; two runs give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "format/prepare_gemm.hpp"
#include "fp4moe/reference.hpp"
#include "gpu_test_util.hpp"
#include "kernels/decode_down.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

constexpr int64_t kE = 48, kH = 320, kI = 448, kShared = 192;  // (48 experts: two warp passes over the offsets)
constexpr int kTopK = 4;

struct DeviceProjection {
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> dequant_scale;
  kernels::DecodeWeights view(int scale_parts, int64_t k) const {
    return {weights.get(), scales.get(), dequant_scale.get(), scale_parts, k};
  }
};
DeviceProjection upload(const PreparedExpertWeights& p) {
  DeviceProjection d;
  d.weights.upload(p.weights);
  d.scales.upload(p.scales);
  d.dequant_scale.upload(p.dequant_scale);
  return d;
}

enum class RoutingKind { spread, same_experts, repeated };

struct Result {
  std::vector<float> out;
  double rel_err = 0;
  int64_t unwritten = 0;
};

// sm_count: the CTAs (a small count makes each walk several row groups); dropped: pair 1 of
// the first token has no row (another rank's expert), as an expert-parallel layer drops it.
Result run_case(Fp4Format format, int64_t T, bool bias, bool shared, RoutingKind kind, uint64_t seed, int sm_count = 132,
                bool dropped = false) {
  // experts of different sizes: a source's dequantization scale taken from the wrong expert shows
  const std::vector<Fp4Matrix> w2 =
      test::random_fp4_matrices(format, kE, kH, kI, seed, [](int64_t e) { return 0.03f + 0.01f * float(e % 7); });
  const std::vector<Fp4Matrix> ws = test::random_fp4_matrices(format, 1, kH, kShared, seed + 1, [](int64_t) { return 0.05f; });
  const PreparedExpertWeights pw = prepare_gemm_weights(w2), ps = prepare_gemm_weights(ws);
  // routing: k experts per token, their weights in (0, 1)
  std::mt19937_64 rng(seed + 2);
  Routing route;
  route.tokens = T;
  route.top_k = kTopK;
  route.topk_ids.resize(size_t(T * kTopK));
  route.topk_weights.resize(size_t(T * kTopK));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pick;
    while (int(pick.size()) < kTopK) {
      const int32_t e = kind == RoutingKind::spread ? int32_t(rng() % kE) : int32_t(pick.size());
      if (kind == RoutingKind::spread && std::find(pick.begin(), pick.end(), e) != pick.end()) continue;
      pick.push_back(kind == RoutingKind::repeated ? 3 : e);  // repeated: every slot of every token on expert 3
    }
    for (int j = 0; j < kTopK; ++j) {
      route.topk_ids[size_t(t * kTopK + j)] = pick[size_t(j)];
      route.topk_weights[size_t(t * kTopK + j)] = float(rng() % 1000 + 1) / 1000.f;
    }
  }
  const Permutation perm = permute_reference(route, kE);
  const int64_t P = T * kTopK;
  std::vector<int32_t> pair_pos(static_cast<size_t>(P));
  for (int64_t r = 0; r < P; ++r) pair_pos[size_t(perm.permuted_pair[size_t(r)])] = int32_t(r);
  if (dropped) pair_pos[1] = -1;
  const test::Bf16Matrix a2 = test::random_bf16(P * kI, seed + 3), sa2 = test::random_bf16(T * kShared, seed + 4);
  std::vector<float> b(static_cast<size_t>(kE * kH));
  for (float& v : b) v = float(int64_t(rng() % 2001) - 1000) / 4000.f;

  const DeviceProjection dw = upload(pw), ds = upload(ps);
  DeviceBuffer<int32_t> offsets(perm.expert_offsets), d_pos(pair_pos), status(size_t(kernels::kStatusWords));
  DeviceBuffer<float> weights(route.topk_weights), d_bias(b);
  DeviceBuffer<uint16_t> d_a2(a2.bits), d_sa2(sa2.bits), out(size_t(T * kH));
  out.fill_bytes(0xFF);
  status.fill_bytes(0);
  kernels::DecodeDownArgs a;
  a.format = format;
  a.routed = dw.view(pw.scale_parts, kI);
  a.bias = bias ? d_bias.get() : nullptr;
  a.experts = int(kE), a.hidden = kH, a.tokens = T, a.top_k = kTopK;
  a.expert_offsets = offsets.get(), a.pair_pos = d_pos.get(), a.topk_weights = weights.get();
  a.a2 = reinterpret_cast<const __nv_bfloat16*>(d_a2.get());
  if (shared) a.shared = ds.view(ps.scale_parts, kShared), a.shared_a2 = reinterpret_cast<const __nv_bfloat16*>(d_sa2.get());
  a.out = reinterpret_cast<__nv_bfloat16*>(out.get());
  a.status = status.get();
  kernels::launch_decode_down(a, sm_count, nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(status.download()[0], 0);

  std::vector<double> ref(size_t(T * kH), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < kH; ++h) {
      double acc = 0;
      for (int j = 0; j < kTopK; ++j) {
        const int64_t q = t * kTopK + j;
        if (pair_pos[size_t(q)] < 0) continue;
        const int e = route.topk_ids[size_t(q)];
        double z = 0;
        for (int64_t k = 0; k < kI; ++k)
          z += double(w2[size_t(e)].dequant(h, k)) * double(a2.values[size_t(pair_pos[size_t(q)] * kI + k)]);
        if (bias) z += b[size_t(e * kH + h)];
        acc += double(route.topk_weights[size_t(q)]) * z;
      }
      if (shared)
        for (int64_t k = 0; k < kShared; ++k) acc += double(ws[0].dequant(h, k)) * double(sa2.values[size_t(t * kShared + k)]);
      ref[size_t(t * kH + h)] = acc;
    }
  Result r;
  const std::vector<uint16_t> bits = out.download();
  r.out.resize(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) r.out[i] = bf16_to_float(bits[i]);
  std::vector<float> reff(ref.begin(), ref.end());
  r.rel_err = test::rel_frobenius(r.out, reff, &r.unwritten);
  return r;
}

TEST(GpuDecodeDown, WeightedSumAgainstTheReference) {
  FP4MOE_REQUIRE_GPU();
  int ran = 0;
  for (Fp4Format format : {Fp4Format::nvfp4, Fp4Format::mxfp4})
    for (int64_t T : {1, 3, 8})
      for (RoutingKind kind : {RoutingKind::spread, RoutingKind::same_experts, RoutingKind::repeated})
        for (bool with : {false, true}) {
          const std::string what = std::string(to_string(format)) + " T=" + std::to_string(T) + " routing " +
                                   std::to_string(int(kind)) + (with ? " with biases and a shared expert" : "");
          const uint64_t seed = 10 + uint64_t(T) * 7 + uint64_t(kind) * 3;
          const Result r = run_case(format, T, with, with, kind, seed);
          EXPECT_EQ(r.unwritten, 0) << what;
          EXPECT_LT(r.rel_err, 5e-3) << what;  // bf16 output rounding, fp32 sums
          const Result again = run_case(format, T, with, with, kind, seed);
          EXPECT_EQ(std::memcmp(again.out.data(), r.out.data(), r.out.size() * 4), 0) << what << ": not bitwise stable";
          ++ran;
        }
  EXPECT_EQ(ran, 2 * 3 * 3 * 2);
  // three CTAs walking every row group in turn; a dropped pair
  for (const bool dropped : {false, true}) {
    const Result r = run_case(Fp4Format::nvfp4, 8, true, true, RoutingKind::spread, 77, /*sm_count=*/3, dropped);
    EXPECT_EQ(r.unwritten, 0) << "3 CTAs" << (dropped ? ", a dropped pair" : "");
    EXPECT_LT(r.rel_err, 5e-3) << "3 CTAs" << (dropped ? ", a dropped pair" : "");
  }
}

TEST(GpuDecodeDown, RefusesMoreTokensThanOneTile) {
  FP4MOE_REQUIRE_GPU();
  kernels::DecodeDownArgs a;
  a.tokens = 9, a.top_k = 4, a.experts = 16, a.hidden = 256;
  try {
    kernels::launch_decode_down(a, 132, nullptr);
    FAIL() << "9 tokens were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens (1..8)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4moe
