// The decode kernels' prepared layout: packing is a bijection onto the
// checkpoint layout, and the kernel's bit tricks give exact values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "format/gemm_pack.hpp"
#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

float bf16_bits_to_float(uint32_t bits16) { return bf16_to_float(static_cast<uint16_t>(bits16)); }

TEST(PrepareGemm, UnpackGivesEveryCodeTimes2ToMinus126) {
  for (int reg = 0; reg < 4; ++reg)
    for (int half = 0; half < 2; ++half)
      for (uint8_t code = 0; code < 16; ++code) {
        const uint32_t w = pack::place_code(0, reg, half, code);
        uint32_t out[4];
        pack::unpack_word(w, out);
        for (int r = 0; r < 4; ++r) {
          const uint32_t lo = out[r] & 0xFFFF, hi = out[r] >> 16;
          const float got = bf16_bits_to_float(half ? hi : lo) * std::ldexp(1.f, 126);
          if (r == reg) {
            EXPECT_EQ(got, e2m1_decode(code)) << "reg " << reg << " half " << half << " code " << int(code);
            EXPECT_EQ(std::signbit(got), (code & 8) != 0);
            EXPECT_EQ(half ? lo : hi, 0u) << "code leaked into the other half";
          } else {
            EXPECT_EQ(out[r], 0u) << "code for reg " << reg << " leaked into reg " << r;
          }
        }
      }
}

// Whole words (8 codes at once): every pattern half is its own code's value,
// so no two codes' bits meet in one output bit.
TEST(PrepareGemm, UnpackWholeWordsMatchTheirCodes) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20000; ++trial) {
    uint8_t codes[4][2];
    uint32_t w = 0;
    for (int reg = 0; reg < 4; ++reg)
      for (int half = 0; half < 2; ++half) {
        codes[reg][half] = static_cast<uint8_t>(rng() & 15);
        w = pack::place_code(w, reg, half, codes[reg][half]);
      }
    uint32_t out[4];
    pack::unpack_word(w, out);
    for (int reg = 0; reg < 4; ++reg)
      for (int half = 0; half < 2; ++half) {
        const uint32_t bits = half ? out[reg] >> 16 : out[reg] & 0xFFFF;
        const uint32_t alone = pack::place_code(0, reg, half, codes[reg][half]);
        uint32_t alone_out[4];
        pack::unpack_word(alone, alone_out);
        EXPECT_EQ(bits, half ? alone_out[reg] >> 16 : alone_out[reg] & 0xFFFF) << "word " << std::hex << w;
        EXPECT_EQ(bf16_bits_to_float(bits) * std::ldexp(1.f, 126), e2m1_decode(codes[reg][half]))
            << "word " << std::hex << w << " reg " << reg << " half " << half;
      }
  }
}

TEST(PrepareGemm, CodeBitsCoverTheWordOnce) {
  uint32_t seen = 0;
  for (const auto& reg : pack::kCodeBits)
    for (const auto& h : reg)
      for (int b : {h.sign, h.m2, h.m1, h.m0}) {
        EXPECT_EQ(seen & (1u << b), 0u) << "bit " << b << " used twice";
        seen |= 1u << b;
      }
  EXPECT_EQ(seen, 0xFFFFFFFFu);
}

void expect_prepared_matches(Fp4Format f, uint64_t seed, int64_t k = 256) {
  const int64_t n = 48;
  std::mt19937_64 rng(seed);
  std::vector<Fp4Matrix> experts;
  for (int e = 0; e < 3; ++e) {
    std::vector<float> x(size_t(n * k));
    std::normal_distribution<float> d(0.f, 1.f);
    for (int64_t i = 0; i < n * k; ++i) {
      // rows of very different magnitude: subnormal e4m3 scales and zero blocks
      const int64_t row = i / k;
      const float mag = row % 7 == 3 ? 3e-4f : row % 7 == 5 ? 0.f : 1.f;
      x[size_t(i)] = d(rng) * mag;
    }
    x[5] = 40.f;  // sets amax: the tiny rows fall into e4m3's subnormal range
    experts.push_back(quantize(f, x.data(), n, k));
  }
  const PreparedExpertWeights p = prepare_gemm_weights(experts);
  ASSERT_EQ(int64_t(p.weights.size()), 3 * n * k / 2);
  ASSERT_EQ(int64_t(p.scales.size()), 3 * pack::scale_bytes(n, k));
  // past K in the last scale granule (K not a multiple of 128): zero bytes
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = k; c < pack::scale_granules(k) * 128; c += 16)
        ASSERT_EQ(p.scales[size_t(e * p.scale_bytes_per_expert() + pack::scale_offset(k, r, c))], 0) << r << " " << c;
  const uint32_t add = prepared_scale_exponent_add(f);
  int subnormal_blocks = 0;
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const Fp4Matrix& m = experts[size_t(e)];
        const float scale = m.scale(r, c / m.block_size());
        const float want = e2m1_decode(m.code(r, c)) * scale;
        const float got = e2m1_decode(prepared_code(p, e, r, c)) * prepared_scale_value(p, e, r, c);
        ASSERT_EQ(got, want) << "expert " << e << " [" << r << ", " << c << "]";
        if (c % 16 == 0 && f == Fp4Format::nvfp4 && scale > 0 && scale < std::ldexp(1.f, -6)) ++subnormal_blocks;
        // The kernel's operand: bf16 of scale * 2^116 from the prepared byte.
        if (c % 16 == 0 && want != 0) {
          const float sv = prepared_scale_value(p, e, r, c);
          int ex = 0;
          const float fr = std::frexp(sv, &ex);
          const uint32_t byte = uint32_t((ex - 1 + (f == Fp4Format::nvfp4 ? 9 : 20)) << 3) | uint32_t((fr * 2 - 1) * 8);
          const uint32_t pair = pack::scale_operands(byte | (byte << 16), add);
          EXPECT_EQ(bf16_bits_to_float(pair & 0xFFFF), sv * std::ldexp(1.f, 116));
          EXPECT_EQ(pair >> 16, pair & 0xFFFF);
        }
      }
  if (f == Fp4Format::nvfp4) {
    EXPECT_GT(subnormal_blocks, 0) << "the test should cover e4m3 subnormal scales";
  }
  EXPECT_EQ(p.dequant_scale[0], pack::kAccumulatorFactor * experts[0].weight_scale_2);
}

TEST(PrepareGemm, Nvfp4RoundTripsThroughThePreparedLayout) { expect_prepared_matches(Fp4Format::nvfp4, 1); }
TEST(PrepareGemm, Mxfp4RoundTripsThroughThePreparedLayout) { expect_prepared_matches(Fp4Format::mxfp4, 2); }
// K in steps of 64 (gpt-oss's 2880): the codes exactly, the last scale granule half used
TEST(PrepareGemm, KInStepsOf64RoundTripsThroughThePreparedLayout) {
  expect_prepared_matches(Fp4Format::nvfp4, 3, 192);
  expect_prepared_matches(Fp4Format::mxfp4, 4, 2880);
}

TEST(PrepareGemm, BadShapesAreNamed) {
  std::vector<float> x(20 * 128, 1.f);
  const Fp4Matrix m = quantize_nvfp4(x.data(), 20, 128);
  try {
    prepare_gemm_weights(std::vector<Fp4Matrix>{m});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("N = 20"), std::string::npos) << e.what();
  }
  std::vector<float> y(16 * 96, 1.f);
  EXPECT_THROW(prepare_gemm_weights(std::vector<Fp4Matrix>{quantize_nvfp4(y.data(), 16, 96)}), Error);
  std::vector<float> z(16 * 128, 1.f);
  const Fp4Matrix a = quantize_nvfp4(z.data(), 16, 128), b = quantize_mxfp4(z.data(), 16, 128);
  EXPECT_THROW(prepare_gemm_weights(std::vector<Fp4Matrix>{a, b}), Error);
  EXPECT_THROW(prepare_gemm_weights(std::vector<Fp4Matrix>{}), Error);
}

TEST(PrepareGemm, StackRowsInterleaves) {
  std::vector<float> g(32 * 128), u(32 * 128);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(i % 7) - 3.f, u[i] = float(i % 5) - 2.f;
  Fp4Matrix gm = quantize_nvfp4(g.data(), 32, 128), um = quantize_nvfp4(u.data(), 32, 128);
  const Fp4Matrix* parts[] = {&gm, &um};
  const Fp4Matrix s = stack_rows(parts, 16);
  ASSERT_EQ(s.rows, 64);
  EXPECT_EQ(s.code(0, 3), gm.code(0, 3));
  EXPECT_EQ(s.code(16, 3), um.code(0, 3));
  EXPECT_EQ(s.code(32, 5), gm.code(16, 5));
  EXPECT_EQ(s.code(48, 5), um.code(16, 5));
  EXPECT_THROW(stack_rows(parts, 12), Error);
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

TEST(PrepareGemm, GatedWeightsInterleaveAndKeepBothGlobalScales) {
  std::vector<float> g(32 * 128), u(32 * 128);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(int(i % 11) - 5), u[i] = 0.01f * float(int(i % 7) - 3);
  const std::vector<Fp4Matrix> gate = {quantize_nvfp4(g.data(), 32, 128)}, up = {quantize_nvfp4(u.data(), 32, 128)};
  ASSERT_NE(gate[0].weight_scale_2, up[0].weight_scale_2);
  const PreparedExpertWeights p = prepare_gated_gemm_weights(gate, up);
  EXPECT_EQ(p.n, 64);
  EXPECT_EQ(p.scale_parts, 2);
  ASSERT_EQ(p.dequant_scale.size(), 2u);
  EXPECT_EQ(p.dequant_scale[0], pack::kAccumulatorFactor * gate[0].weight_scale_2);
  EXPECT_EQ(p.dequant_scale[1], pack::kAccumulatorFactor * up[0].weight_scale_2);
  // rows 0-15 gate 0-15, 16-31 up 0-15, 32-47 gate 16-31, 48-63 up 16-31
  for (int64_t c = 0; c < 128; c += 7) {
    EXPECT_EQ(prepared_code(p, 0, 3, c), gate[0].code(3, c));
    EXPECT_EQ(prepared_code(p, 0, 16 + 3, c), up[0].code(3, c));
    EXPECT_EQ(prepared_code(p, 0, 32 + 5, c), gate[0].code(16 + 5, c));
    EXPECT_EQ(prepared_code(p, 0, 48 + 5, c), up[0].code(16 + 5, c));
  }
  EXPECT_THROW(prepare_gated_gemm_weights(gate, std::vector<Fp4Matrix>{}), Error);
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

// gpt-oss's 2880 is not a multiple of the K granule: a shape prepared padded
// holds every value where it was and zeros in the pad, for plain and gated
// weights; the biases follow the prepared row order.
TEST(PrepareGemm, PaddedShapesKeepEveryValueAndZeroThePad) {
  const int64_t rows = 40, k = 96;  // MXFP4: three blocks of 32
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<Fp4Matrix> gate, up;
  for (int e = 0; e < 2; ++e) {
    std::vector<float> x(size_t(rows * k));
    for (float& v : x) v = d(rng);
    gate.push_back(quantize_mxfp4(x.data(), rows, k));
    for (float& v : x) v = d(rng);
    up.push_back(quantize_mxfp4(x.data(), rows, k));
  }
  EXPECT_EQ(padded_features(2880), 3072);
  EXPECT_EQ(padded_features(2880, 128), 2944);
  EXPECT_EQ(padded_features(3072), 3072);
  EXPECT_EQ(padded_features(384), 384);  // a multiple of the K granule runs as it is
  EXPECT_EQ(padded_features(96), 256);
  EXPECT_EQ(padded_features(96, 128), 128);
  const int64_t rp = 48, kp = padded_features(k, kPreparedKGranule);
  const PreparedExpertWeights plain = prepare_gemm_weights(gate, rp, kp);
  const PreparedExpertWeights gated = prepare_gated_gemm_weights(gate, up, rp, kp);
  ASSERT_EQ(plain.n, rp);
  ASSERT_EQ(plain.k, kp);
  ASSERT_EQ(gated.n, 2 * rp);
  auto value = [](const PreparedExpertWeights& p, int64_t e, int64_t r, int64_t c) {
    return e2m1_decode(prepared_code(p, e, r, c)) * prepared_scale_value(p, e, r, c);
  };
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t r = 0; r < 2 * rp; ++r)
      for (int64_t c = 0; c < kp; ++c) {
        const int64_t src = (r / 32) * 16 + r % 16;  // the gated row's source row
        const Fp4Matrix& m = (r / 16) % 2 ? up[size_t(e)] : gate[size_t(e)];
        const float want = src < rows && c < k ? m.dequant(src, c) : 0.f;
        ASSERT_EQ(value(gated, e, r, c), want) << "gated expert " << e << " [" << r << ", " << c << "]";
        if (r < rp) {
          ASSERT_EQ(value(plain, e, r, c), r < rows && c < k ? gate[size_t(e)].dequant(r, c) : 0.f)
              << "expert " << e << " [" << r << ", " << c << "]";
        }
      }
  // biases: [E][N], the gated ones interleaved as the rows, zero in the pad
  std::vector<float> gb(static_cast<size_t>(rows)), ub(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) gb[size_t(i)] = float(i), ub[size_t(i)] = -float(i) - 1;
  const std::vector<float>* g[] = {&gb, &gb};
  const std::vector<float>* u[] = {&ub, &ub};
  const std::vector<float> b = prepared_gated_bias(g, u, 2 * rp);
  ASSERT_EQ(int64_t(b.size()), 2 * 2 * rp);
  for (int64_t r = 0; r < 2 * rp; ++r) {
    const int64_t src = (r / 32) * 16 + r % 16;
    const float want = src >= rows ? 0.f : (r / 16) % 2 ? ub[size_t(src)] : gb[size_t(src)];
    EXPECT_EQ(b[size_t(2 * rp + r)], want) << "row " << r;
  }
  const std::vector<float> pb = prepared_bias(g, rp);
  EXPECT_EQ(pb[size_t(rp + 7)], 7.f);
  EXPECT_EQ(pb[size_t(rp + rows)], 0.f);
  // a prepared shape smaller than the experts', or an unpaddable K, is named
  EXPECT_THROW(prepare_gemm_weights(gate, 32, kp), Error);
  try {
    prepare_gemm_weights(gate, rp, 100);
    FAIL() << "K = 100 was prepared";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("K = 100"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4moe

namespace fp4moe {
namespace {

// The device prepare finds each prepared gated row's checkpoint row with
// pack::gated_source_row: for every order a checkpoint holds w13 in ([gate;
// up], [up; gate], rows alternating) and a padded I, that row is the one the
// host packer put there, and padding rows are marked -1 (zero weights).
TEST(PrepareGemm, GatedSourceRowIsTheHostPackersRowForEveryOrder) {
  const int64_t I = 40, Ip = 64, k = 128;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(size_t(I * k));
  for (float& v : x) v = d(rng);
  const Fp4Matrix gate = quantize_mxfp4(x.data(), I, k);
  for (float& v : x) v = d(rng);
  const Fp4Matrix up = quantize_mxfp4(x.data(), I, k);
  const PreparedExpertWeights p = prepare_gated_gemm_weights(std::vector<Fp4Matrix>{gate}, std::vector<Fp4Matrix>{up}, Ip);
  const Fp4Matrix* gate_up[] = {&gate, &up};
  const Fp4Matrix* up_gate[] = {&up, &gate};
  struct Order {
    GateUpOrder order;
    Fp4Matrix source;  // w13 as the checkpoint holds it, [2I, k]
  };
  const Order orders[] = {{GateUpOrder::gate_up, stack_rows(gate_up)},
                          {GateUpOrder::up_gate, stack_rows(up_gate)},
                          {GateUpOrder::interleaved, stack_rows(gate_up, 1)}};
  for (const Order& o : orders)
    for (int64_t r = 0; r < 2 * Ip; ++r) {
      const int64_t src = pack::gated_source_row(r, I, o.order);
      const bool padding = (r / 32) * 16 + r % 16 >= I;
      ASSERT_EQ(src < 0, padding) << "order " << int(o.order) << " prepared row " << r;
      for (int64_t c = 0; c < k; c += 5)
        ASSERT_EQ(prepared_code(p, 0, r, c), padding ? 0 : o.source.code(src, c))
            << "order " << int(o.order) << " prepared row " << r << " column " << c;
    }
}

}  // namespace
}  // namespace fp4moe
