#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
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

// E2M1 code of a representable value.
uint8_t e2m1_code(float v) {
  static const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 8; ++c) {
    if (mags[c] == std::fabs(v)) return static_cast<uint8_t>(c | (v < 0 ? 8 : 0));
  }
  ADD_FAILURE() << v << " is not an e2m1 value";
  return 0;
}

// Block-scale bits for a power of two 2^p: e4m3fn (bias 7) or e8m0 (bias 127).
uint8_t scale_bits(Fp4Format f, int p) {
  return f == Fp4Format::nvfp4 ? static_cast<uint8_t>((p + 7) << 3) : static_cast<uint8_t>(p + 127);
}
uint8_t nan_scale_bits(Fp4Format f) { return f == Fp4Format::nvfp4 ? 0x7F : 0xFF; }

// A matrix built directly from codes: element (r, c) = elem(r, c) * 2^pow2,
// every block scale 2^pow2, weight_scale_2 = 1.
Fp4Matrix hand_matrix(Fp4Format f, int64_t rows, int64_t cols, const std::function<float(int64_t, int64_t)>& elem,
                      int pow2) {
  Fp4Matrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  m.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = e2m1_code(elem(r, c));
      m.packed[static_cast<size_t>(r * (cols / 2) + c / 2)] |= static_cast<uint8_t>((c & 1) ? code << 4 : code);
    }
  m.scales.assign(static_cast<size_t>(rows * m.scale_cols()), scale_bits(f, pow2));
  m.weight_scale_2 = 1.0f;
  return m;
}

std::function<float(int64_t, int64_t)> diag(float a, float shift = 0.0f, int64_t n = 32) {
  return [=](int64_t r, int64_t c) { return r == c ? a : (c == (r + 1) % n ? shift : 0.0f); };
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

std::vector<float> random_vec(int64_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

MoeConfig tiny_cfg(bool shared) {
  MoeConfig c;
  c.name = "tiny";
  c.hidden = 32;
  c.intermediate = 32;
  c.num_experts = 3;
  c.top_k = 2;
  c.scoring = Scoring::softmax;
  c.renormalize = true;
  c.shared_expert = shared;
  c.shared_intermediate = shared ? 32 : 0;
  return c;
}

// Expert 0: gate = I + 0.5*shift, up = 0.5*I, down = 2*I.
// Expert 1: gate = 2*I, up = -0.5*I (codes -1, scale 1/2), down = 3*I (codes 1.5, scale 2).
// Expert 2: NaN block scales; it is never routed to, so never evaluated.
// Shared:   gate = I, up = I, down = 0.5*I (codes 1, scale 1/2).
MoeWeights tiny_weights(Fp4Format f, bool shared) {
  MoeWeights w;
  w.experts.resize(3);
  w.experts[0] = {hand_matrix(f, 32, 32, diag(1.0f, 0.5f), 0), hand_matrix(f, 32, 32, diag(0.5f), 0),
                  hand_matrix(f, 32, 32, diag(2.0f), 0)};
  w.experts[1] = {hand_matrix(f, 32, 32, diag(2.0f), 0), hand_matrix(f, 32, 32, diag(-1.0f), -1),
                  hand_matrix(f, 32, 32, diag(1.5f), 1)};
  w.experts[2] = {hand_matrix(f, 32, 32, diag(1.0f), 0), hand_matrix(f, 32, 32, diag(1.0f), 0),
                  hand_matrix(f, 32, 32, diag(1.0f), 0)};
  for (Fp4Matrix* m : {&w.experts[2].gate, &w.experts[2].up, &w.experts[2].down})
    std::fill(m->scales.begin(), m->scales.end(), nan_scale_bits(f));
  w.has_shared = shared;
  if (shared)
    w.shared = {hand_matrix(f, 32, 32, diag(1.0f), 0), hand_matrix(f, 32, 32, diag(1.0f), 0),
                hand_matrix(f, 32, 32, diag(1.0f), -1)};
  return w;
}

TEST(MoeReference, HandComputedTinyLayer) {
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
    for (bool shared : {false, true}) {
      const MoeConfig c = tiny_cfg(shared);
      const MoeWeights w = tiny_weights(f, shared);
      const int64_t T = 3, H = 32;
      const std::vector<float> x = random_vec(T * H, 51);
      Routing r;
      r.tokens = T;
      r.top_k = 2;
      r.topk_ids = {0, 1, 1, 0, 0, 1};
      r.topk_weights = {0.7f, 0.3f, 0.25f, 0.75f, 1.5f, -0.5f};
      const std::vector<float> out = moe_forward_reference(c, w, x.data(), T, r);
      ASSERT_EQ(out.size(), static_cast<size_t>(T * H));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < H; ++n) {
          const double xn = x[static_cast<size_t>(t * H + n)];
          const double xn1 = x[static_cast<size_t>(t * H + (n + 1) % H)];
          const double y0 = 2.0 * silu(xn + 0.5 * xn1) * (0.5 * xn);
          const double y1 = 3.0 * silu(2.0 * xn) * (-0.5 * xn);
          double expect = 0.0;
          for (int64_t j = 0; j < 2; ++j) {
            const int32_t id = r.topk_ids[static_cast<size_t>(t * 2 + j)];
            expect += static_cast<double>(r.topk_weights[static_cast<size_t>(t * 2 + j)]) * (id == 0 ? y0 : y1);
          }
          if (shared) expect += 0.5 * silu(xn) * xn;
          EXPECT_NEAR(out[static_cast<size_t>(t * H + n)], expect, 1e-6 * (1.0 + std::fabs(expect)))
              << to_string(f) << " shared=" << shared << " t=" << t << " n=" << n;
        }
      }
    }
  }
}

TEST(MoeReference, ExpertWithoutTokensIsNeverEvaluated) {
  // Every token goes to expert 3 alone; every other expert has NaN block
  // scales, so evaluating any of them (even at weight 0) would poison the
  // output. The result must equal expert 3's MLP.
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
    MoeConfig c = preset("glm5-small");
    c.top_k = 1;
    c.shared_expert = false;
    c.shared_intermediate = 0;
    MoeWeights w = random_moe_weights(c, f, 61);
    for (int64_t e = 0; e < c.num_experts; ++e) {
      if (e == 3) continue;
      for (Fp4Matrix* m : {&w.experts[static_cast<size_t>(e)].gate, &w.experts[static_cast<size_t>(e)].up,
                           &w.experts[static_cast<size_t>(e)].down})
        std::fill(m->scales.begin(), m->scales.end(), nan_scale_bits(f));
    }
    const int64_t T = 5, H = c.hidden, I = c.intermediate;
    const std::vector<float> x = random_vec(T * H, 62);
    Routing r;
    r.tokens = T;
    r.top_k = 1;
    r.topk_ids.assign(T, 3);
    r.topk_weights.assign(T, 1.0f);
    const std::vector<float> out = moe_forward_reference(c, w, x.data(), T, r);

    // Expert 3 alone, through the GEMM oracle (fp32 intermediates).
    std::vector<float> h(static_cast<size_t>(T * I)), u(static_cast<size_t>(T * I)), a(static_cast<size_t>(T * I)),
        y(static_cast<size_t>(T * H));
    expert_gemm_reference(w.experts[3].gate, x.data(), T, h.data());
    expert_gemm_reference(w.experts[3].up, x.data(), T, u.data());
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(silu(h[i]) * u[i]);
    expert_gemm_reference(w.experts[3].down, a.data(), T, y.data());
    std::vector<double> expect(y.begin(), y.end());
    for (float v : out) ASSERT_TRUE(std::isfinite(v)) << to_string(f);
    EXPECT_LT(rel_err(out, expect), 1e-6) << to_string(f);
  }
}

// Straightforward per-token forward: dequantize everything, loop over tokens
// and slots, no permutation.
std::vector<double> naive_forward(const MoeConfig& c, const MoeWeights& w, const std::vector<float>& x, int64_t T,
                                  const Routing& r) {
  const int64_t H = c.hidden;
  auto mlp = [&](const ExpertWeights& e, int64_t I, const float* xt, std::vector<double>& y) {
    const auto g = dequantize(e.gate), u = dequantize(e.up), d = dequantize(e.down);
    std::vector<double> a(static_cast<size_t>(I));
    for (int64_t i = 0; i < I; ++i) {
      double hg = 0.0, hu = 0.0;
      for (int64_t k = 0; k < H; ++k) {
        hg += static_cast<double>(xt[k]) * g[static_cast<size_t>(i * H + k)];
        hu += static_cast<double>(xt[k]) * u[static_cast<size_t>(i * H + k)];
      }
      a[static_cast<size_t>(i)] = silu(hg) * hu;
    }
    y.assign(static_cast<size_t>(H), 0.0);
    for (int64_t n = 0; n < H; ++n)
      for (int64_t i = 0; i < I; ++i) y[static_cast<size_t>(n)] += a[static_cast<size_t>(i)] * d[static_cast<size_t>(n * I + i)];
  };
  std::vector<double> out(static_cast<size_t>(T * H), 0.0), y;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < c.top_k; ++j) {
      const int32_t id = r.topk_ids[static_cast<size_t>(t * c.top_k + j)];
      mlp(w.experts[static_cast<size_t>(id)], c.intermediate, x.data() + t * H, y);
      for (int64_t n = 0; n < H; ++n)
        out[static_cast<size_t>(t * H + n)] += r.topk_weights[static_cast<size_t>(t * c.top_k + j)] * y[static_cast<size_t>(n)];
    }
    if (w.has_shared) {
      mlp(w.shared, c.shared_intermediate, x.data() + t * H, y);
      for (int64_t n = 0; n < H; ++n) out[static_cast<size_t>(t * H + n)] += y[static_cast<size_t>(n)];
    }
  }
  return out;
}

TEST(MoeReference, MatchesANaivePerTokenForward) {
  for (const char* name : {"mixtral-small", "deepseek-v3-small"}) {
    for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
      const MoeConfig c = preset(name);
      const MoeWeights w = random_moe_weights(c, f, 71);
      const int64_t T = 3;
      const auto x = random_vec(T * c.hidden, 72);
      const auto logits = random_vec(T * c.num_experts, 73, 2.0f);
      const Routing r = route_reference(c, logits.data(), T, w.correction_bias);
      const auto out = moe_forward_reference(c, w, x.data(), T, r);
      EXPECT_LT(rel_err(out, naive_forward(c, w, x, T, r)), 1e-6) << name << " " << to_string(f);
    }
  }
}

TEST(MoeReference, Glm5SmallSixteenTokensIsFastAndDeterministic) {
  const MoeConfig c = preset("glm5-small");
  const MoeWeights w = random_moe_weights(c, Fp4Format::nvfp4, 81);
  const int64_t T = 16;
  const auto x = random_vec(T * c.hidden, 82);
  const auto logits = random_vec(T * c.num_experts, 83, 2.0f);
  const Routing r = route_reference(c, logits.data(), T, w.correction_bias);
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = moe_forward_reference(c, w, x.data(), T, r);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("forward_ms", std::to_string(ms));
  std::printf("glm5-small T=16 reference forward: %.1f ms\n", ms);
  EXPECT_LT(ms, 1000.0);
  double norm = 0.0;
  for (float v : out) {
    ASSERT_TRUE(std::isfinite(v));
    norm += static_cast<double>(v) * v;
  }
  EXPECT_GT(norm, 0.0);
  const auto again = moe_forward_reference(c, w, x.data(), T, r);
  EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * sizeof(float)), 0);
}

TEST(MoeReference, ExpertGemmOracle) {
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
    // Hand case: codes 1.5 on the diagonal and 0.5 beside it, block scale 2,
    // so W = 3*I + 1*shift over [64, 64] and y[n] = 3 x[n] + x[n+1].
    const Fp4Matrix wm = hand_matrix(f, 64, 64, diag(1.5f, 0.5f, 64), 1);
    const int64_t rows = 4;
    const auto x = random_vec(rows * 64, 91);
    std::vector<float> y(static_cast<size_t>(rows * 64));
    expert_gemm_reference(wm, x.data(), rows, y.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < 64; ++n) {
        const double e = 3.0 * x[static_cast<size_t>(r * 64 + n)] + 1.0 * x[static_cast<size_t>(r * 64 + (n + 1) % 64)];
        EXPECT_NEAR(y[static_cast<size_t>(r * 64 + n)], e, 1e-6 * (1.0 + std::fabs(e)));
      }
    // Random matrix against an element-wise dot with Fp4Matrix::dequant.
    const MoeConfig c = preset("mixtral-small");
    const MoeWeights w = random_moe_weights(c, f, 92);
    const Fp4Matrix& g = w.experts[1].gate;  // [I, H]
    const auto xr = random_vec(3 * g.cols, 93);
    std::vector<float> yr(static_cast<size_t>(3 * g.rows));
    expert_gemm_reference(g, xr.data(), 3, yr.data());
    std::vector<double> er(yr.size(), 0.0);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t n = 0; n < g.rows; ++n)
        for (int64_t k = 0; k < g.cols; ++k)
          er[static_cast<size_t>(r * g.rows + n)] += static_cast<double>(xr[static_cast<size_t>(r * g.cols + k)]) * g.dequant(n, k);
    EXPECT_LT(rel_err(yr, er), 1e-7) << to_string(f);
  }
}

TEST(MoeReference, RandomWeightsAreDeterministicAndShaped) {
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
    const MoeConfig c = preset("deepseek-v3-small");
    const MoeWeights a = random_moe_weights(c, f, 101), b = random_moe_weights(c, f, 101),
                     d = random_moe_weights(c, f, 102);
    ASSERT_EQ(a.experts.size(), static_cast<size_t>(c.num_experts));
    ASSERT_TRUE(a.has_shared);
    EXPECT_EQ(a.shared.gate.rows, c.shared_intermediate);
    EXPECT_EQ(a.shared.down.cols, c.shared_intermediate);
    ASSERT_EQ(a.correction_bias.size(), static_cast<size_t>(c.num_experts));
    EXPECT_EQ(a.correction_bias, b.correction_bias);
    EXPECT_NE(a.correction_bias, d.correction_bias);
    double bias_abs = 0.0;
    for (float v : a.correction_bias) bias_abs += std::fabs(v);
    EXPECT_GT(bias_abs, 0.0);
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const ExpertWeights& x = a.experts[static_cast<size_t>(e)];
      EXPECT_EQ(x.gate.format, f);
      EXPECT_EQ(x.gate.rows, c.intermediate);
      EXPECT_EQ(x.gate.cols, c.hidden);
      EXPECT_EQ(x.up.rows, c.intermediate);
      EXPECT_EQ(x.down.rows, c.hidden);
      EXPECT_EQ(x.down.cols, c.intermediate);
      EXPECT_EQ(x.gate.packed, b.experts[static_cast<size_t>(e)].gate.packed);
      EXPECT_EQ(x.down.scales, b.experts[static_cast<size_t>(e)].down.scales);
    }
    EXPECT_NE(a.experts[0].gate.packed, d.experts[0].gate.packed);
    EXPECT_NE(a.experts[0].gate.packed, a.experts[1].gate.packed);
    // Block scales vary, and the values have std ~ 1/sqrt(fan_in).
    const Fp4Matrix& g = a.experts[2].gate;
    std::set<uint8_t> distinct(g.scales.begin(), g.scales.end());
    EXPECT_GE(distinct.size(), 4u);
    const auto v = dequantize(g);
    double ss = 0.0;
    for (float e : v) ss += static_cast<double>(e) * e;
    const double sd = std::sqrt(ss / static_cast<double>(v.size())) * std::sqrt(static_cast<double>(c.hidden));
    EXPECT_GT(sd, 0.6);
    EXPECT_LT(sd, 2.0);
  }
  MoeConfig m = preset("mixtral-small");
  const MoeWeights w = random_moe_weights(m, Fp4Format::nvfp4, 1);
  EXPECT_FALSE(w.has_shared);
  EXPECT_TRUE(w.correction_bias.empty());
}

// Full-size models draw codes and scales directly (random_moe_weights above
// 2^28 weights): the same spread as the quantized path, std ~ 1/sqrt(fan_in),
// in both formats. MXFP4's block scales once had no such normalization and
// gave weights ~100x too large, which saturates gpt-oss's clamped SwiGLU.
TEST(MoeReference, DirectlyDrawnWeightsHaveTheQuantizedSpread) {
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4})
    for (int64_t cols : {int64_t(1024), int64_t(2880), int64_t(7168)}) {
      const Fp4Matrix a = detail::random_matrix_direct(f, 64, cols, std::mt19937_64(7));
      const Fp4Matrix b = detail::random_matrix_direct(f, 64, cols, std::mt19937_64(7));
      EXPECT_EQ(a.packed, b.packed);
      EXPECT_EQ(a.scales, b.scales);
      EXPECT_GE(std::set<uint8_t>(a.scales.begin(), a.scales.end()).size(), 2u) << "block scales vary";
      const auto v = dequantize(a);
      double ss = 0.0;
      for (float e : v) ss += static_cast<double>(e) * e;
      const double sd = std::sqrt(ss / static_cast<double>(v.size())) * std::sqrt(static_cast<double>(cols));
      EXPECT_GT(sd, 0.6) << to_string(f) << " cols " << cols;
      EXPECT_LT(sd, 2.0) << to_string(f) << " cols " << cols;
    }
}

TEST(MoeReference, BadInputsAreNamed) {
  const MoeConfig c = tiny_cfg(false);
  const MoeWeights w = tiny_weights(Fp4Format::nvfp4, false);
  std::vector<float> x = random_vec(2 * 32, 111);
  Routing r;
  r.tokens = 2;
  r.top_k = 2;
  r.topk_ids = {0, 1, 1, 5};
  r.topk_weights = {0.5f, 0.5f, 0.5f, 0.5f};
  std::string msg = error_of([&] { moe_forward_reference(c, w, x.data(), 2, r); });
  EXPECT_NE(msg.find("expert id 5 at token 1, slot 1"), std::string::npos) << msg;
  r.topk_ids = {0, 1, 1, 0};
  x[33] = std::numeric_limits<float>::infinity();
  msg = error_of([&] { moe_forward_reference(c, w, x.data(), 2, r); });
  EXPECT_NE(msg.find("x at token 1, column 1 is inf"), std::string::npos) << msg;
  x[33] = 0.25f;
  r.topk_weights[2] = std::numeric_limits<float>::quiet_NaN();
  msg = error_of([&] { moe_forward_reference(c, w, x.data(), 2, r); });
  EXPECT_NE(msg.find("topk_weight at token 1, slot 0 is nan"), std::string::npos) << msg;
  r.topk_weights[2] = 0.5f;
  msg = error_of([&] { moe_forward_reference(c, w, x.data(), 3, r); });
  EXPECT_NE(msg.find("routing is for tokens = 2"), std::string::npos) << msg;
  MoeWeights bad = w;
  bad.experts[1].down = hand_matrix(Fp4Format::nvfp4, 32, 64, diag(1.0f), 0);
  msg = error_of([&] { moe_forward_reference(c, bad, x.data(), 2, r); });
  EXPECT_NE(msg.find("expert 1 down: shape [32, 64], expected [32, 32]"), std::string::npos) << msg;
  bad = w;
  bad.experts[0].up.scales.pop_back();
  msg = error_of([&] { moe_forward_reference(c, bad, x.data(), 2, r); });
  EXPECT_NE(msg.find("expert 0 up: scales has 63 bytes"), std::string::npos) << msg;
  bad = w;
  bad.experts.pop_back();
  msg = error_of([&] { moe_forward_reference(c, bad, x.data(), 2, r); });
  EXPECT_NE(msg.find("weights hold 2 experts"), std::string::npos) << msg;
  msg = error_of([&] { moe_forward_reference(tiny_cfg(true), w, x.data(), 2, r); });
  EXPECT_NE(msg.find("has_shared = 0"), std::string::npos) << msg;
  EXPECT_NO_THROW(moe_forward_reference(c, w, x.data(), 2, r));
}

}  // namespace
}  // namespace fp4moe
