// Layers built from FP4 tensors already on the GPU (the serving-engine path):
// the GPU prepare equals the host prepare byte for byte, for both formats,
// both scale layouts and both gate/up orders; a layer from device tensors
// equals the host-built layer bitwise; the caller's routing and a held range
// of experts (expert parallelism inside an engine) against the reference.
#include <gtest/gtest.h>

#include <cstring>

#include "format/prepare_gemm.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "gpu_test_util.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/layer_core.hpp"
#include "runtime/prepared_projection.hpp"

namespace fp4moe {
namespace {

// One projection of E experts in the checkpoint layout, on the device.
struct DeviceTensors {
  DeviceBuffer<uint8_t> weight, scale;
  DeviceBuffer<float> scale_2;
  int parts = 1;
  DeviceProjection view() const { return {weight.get(), scale.get(), scale_2.size() ? scale_2.get() : nullptr, parts}; }
};

// experts[e] is a list of row blocks stacked along N (w13: {gate, up} or {up, gate}),
// or with `interleave` 1 alternating row by row (gate 0, up 0, ...).
DeviceTensors upload(const std::vector<std::vector<const Fp4Matrix*>>& experts, ScaleLayout layout, int64_t interleave = 0) {
  std::vector<uint8_t> w, s;
  std::vector<float> s2;
  DeviceTensors d;
  d.parts = int(experts[0].size());
  for (const auto& parts : experts) {
    const Fp4Matrix stacked = stack_rows(parts, interleave);
    w.insert(w.end(), stacked.packed.begin(), stacked.packed.end());
    const std::vector<uint8_t> sc = layout == ScaleLayout::linear
                                        ? stacked.scales
                                        : swizzle_scales_128x4(stacked.scales.data(), stacked.rows, stacked.scale_cols());
    s.insert(s.end(), sc.begin(), sc.end());
    for (const Fp4Matrix* p : parts) s2.push_back(p->weight_scale_2);
  }
  d.weight.upload(w);
  d.scale.upload(s);
  if (experts[0][0]->format == Fp4Format::nvfp4) d.scale_2.upload(s2);
  return d;
}

// Random matrices with the corner cases the prepare treats specially: an
// all-zero block, a block of -0 codes, and (NVFP4) a zero block scale.
std::vector<Fp4Matrix> matrices(Fp4Format f, int64_t E, int64_t n, int64_t k, uint64_t seed) {
  std::vector<Fp4Matrix> m = test::random_fp4_matrices(f, E, n, k, seed, [](int64_t e) { return 0.5f + 0.1f * float(e); });
  for (Fp4Matrix& x : m) {
    std::memset(x.packed.data() + 3 * (k / 2), 0x00, 8);       // row 3, columns 0..15: zero codes
    std::memset(x.packed.data() + 5 * (k / 2) + 8, 0x88, 8);   // row 5, columns 16..31: -0 codes
    if (f == Fp4Format::nvfp4) x.scales[size_t(7 * x.scale_cols() + 2)] = 0x00;  // row 7, block 2: zero scale
  }
  return m;
}

void expect_same(const PreparedProjection& got, const PreparedExpertWeights& want, const std::string& what) {
  ASSERT_EQ(got.weights.download(), want.weights) << what << ": prepared weights differ";
  ASSERT_EQ(got.scales.download(), want.scales) << what << ": prepared scales differ";
  ASSERT_EQ(got.scale_parts, want.scale_parts) << what;
  const std::vector<float> ds = got.dequant_scale.download();
  ASSERT_EQ(0, std::memcmp(ds.data(), want.dequant_scale.data(), ds.size() * 4)) << what << ": global scales differ";
}

// Every source order and scale layout, at aligned shapes, at gpt-oss-like
// ones (H 160, I 96: prepared padded to 256 with zero weights, as the host pads)
// and at K in steps of 64 unpadded (H 320, I 192: half a scale granule past K, zeros).
TEST(GpuDeviceWeights, PrepareOnTheGpuEqualsTheHostPrepare) {
  FP4MOE_REQUIRE_GPU();
  const int64_t E = 3;
  struct Shape {
    int64_t I, H, Ip, Hp;
  };
  for (const Shape s : {Shape{128, 256, 128, 256}, Shape{96, 160, 256, 256}, Shape{192, 320, 192, 320}})
    for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4})
      for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::swizzled_128x4}) {
        const std::string what = std::string(to_string(f)) + (layout == ScaleLayout::linear ? " linear" : " swizzled") +
                                 " I " + std::to_string(s.I) + " H " + std::to_string(s.H);
        const std::vector<Fp4Matrix> gate = matrices(f, E, s.I, s.H, 1), up = matrices(f, E, s.I, s.H, 2),
                                     down = matrices(f, E, s.H, s.I, 3);
        const PreparedExpertWeights host13 = prepare_gated_gemm_weights(gate, up, s.Ip, s.Hp),
                                    host2 = prepare_gemm_weights(down, s.Hp, s.Ip);
        for (const GateUpOrder order :
             {GateUpOrder::gate_up, GateUpOrder::up_gate, GateUpOrder::interleaved}) {
          std::vector<std::vector<const Fp4Matrix*>> w13, w2;
          for (int64_t e = 0; e < E; ++e) {
            w13.push_back(order == GateUpOrder::up_gate ? std::vector<const Fp4Matrix*>{&up[e], &gate[e]}
                                                                  : std::vector<const Fp4Matrix*>{&gate[e], &up[e]});
            w2.push_back({&down[e]});
          }
          const DeviceTensors d13 = upload(w13, layout, order == GateUpOrder::interleaved ? 1 : 0),
                              d2 = upload(w2, layout);
          expect_same(prepare_on_device(d13.view(), f, layout, E, 2 * s.Ip, s.Hp, 2 * s.I, s.H, true, order, "w13"),
                      host13, what + " w13 order " + std::to_string(int(order)));
          expect_same(prepare_on_device(d2.view(), f, layout, E, s.Hp, s.Ip, s.H, s.I, false,
                                        GateUpOrder::gate_up, "w2"),
                      host2, what + " w2");
        }
      }
}

TEST(GpuDeviceWeights, AnOutOfRangeScaleIsNamed) {
  FP4MOE_REQUIRE_GPU();
  std::vector<Fp4Matrix> m = matrices(Fp4Format::nvfp4, 2, 32, 128, 4);
  m[1].scales[size_t(5 * m[1].scale_cols() + 3)] = 0xB8;  // -1.0: a negative block scale
  const DeviceTensors d = upload({{&m[0]}, {&m[1]}}, ScaleLayout::linear);
  try {
    prepare_on_device(d.view(), Fp4Format::nvfp4, ScaleLayout::linear, 2, 32, 128, 32, 128, false,
                      GateUpOrder::gate_up, "w2");
    FAIL() << "a negative block scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2: expert 1 row 5 columns 48..63"), std::string::npos) << e.what();
  }
}

struct Layered {
  MoeConfig cfg;
  MoeWeights w;
  DeviceTensors w13, w2, s13, s2;
  DeviceBuffer<float> bias;
  DeviceMoeWeights device(int64_t begin, int64_t count) const {
    DeviceMoeWeights d;
    d.w13 = w13.view();
    d.w2 = w2.view();
    d.w13 = {w13.weight.get() + begin * 2 * cfg.intermediate * cfg.hidden / 2,
             w13.scale.get() + begin * 2 * cfg.intermediate * cfg.hidden / 16, w13.scale_2.get() + begin * 2, 2};
    d.w2 = {w2.weight.get() + begin * cfg.hidden * cfg.intermediate / 2,
            w2.scale.get() + begin * cfg.hidden * cfg.intermediate / 16, w2.scale_2.get() + begin, 1};
    d.expert_begin = begin;
    d.expert_count = count;
    d.has_shared = cfg.shared_expert;
    if (d.has_shared) d.shared_w13 = s13.view(), d.shared_w2 = s2.view();
    d.correction_bias = bias.size() ? bias.get() : nullptr;
    return d;
  }
};

Layered make_layered(const std::string& name, uint64_t seed) {
  Layered l;
  l.cfg = preset(name);
  l.w = random_moe_weights(l.cfg, Fp4Format::nvfp4, seed);
  std::vector<std::vector<const Fp4Matrix*>> w13, w2;
  for (const ExpertWeights& e : l.w.experts) w13.push_back({&e.gate, &e.up}), w2.push_back({&e.down});
  l.w13 = upload(w13, ScaleLayout::linear);
  l.w2 = upload(w2, ScaleLayout::linear);
  if (l.cfg.shared_expert) {
    l.s13 = upload({{&l.w.shared.gate, &l.w.shared.up}}, ScaleLayout::linear);
    l.s2 = upload({{&l.w.shared.down}}, ScaleLayout::linear);
  }
  if (l.cfg.use_correction_bias) l.bias.upload(l.w.correction_bias);
  return l;
}

std::vector<uint16_t> forward(MoeLayer& layer, const test::Bf16Matrix& x, const std::vector<float>* logits,
                              const Routing* routing, int64_t T) {
  const int64_t H = layer.config().hidden;
  DeviceBuffer<uint16_t> dx(x.bits), out(size_t(T * H));
  out.fill_bytes(0xFF);
  auto* hx = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  auto* ho = reinterpret_cast<__nv_bfloat16*>(out.get());
  if (logits) {
    DeviceBuffer<float> dl(*logits);
    layer.forward(nullptr, hx, dl.get(), T, ho);
    layer.check_status(nullptr);
  } else {
    DeviceBuffer<int32_t> ids(routing->topk_ids);
    DeviceBuffer<float> w(routing->topk_weights);
    layer.forward_routed(nullptr, hx, ids.get(), w.get(), T, ho);
    layer.check_status(nullptr);
  }
  return out.download();
}

TEST(GpuDeviceWeights, LayerFromDeviceTensorsEqualsTheHostLayerAndRoutedEqualsRouter) {
  FP4MOE_REQUIRE_GPU();
  for (const char* name : {"glm5-small", "mixtral-small"}) {
    Layered l = make_layered(name, 7);
    const int64_t T = 37;
    const test::Bf16Matrix x = test::random_bf16(T * l.cfg.hidden, 8);
    const std::vector<float> logits = gaussian_logits(T, l.cfg.num_experts, 9);
    for (const bool shared_in_routed : {false, true}) {
      const std::string what = std::string(name) + (shared_in_routed ? " (shared expert in the routed GEMMs)" : "");
      LayerOptions o;
      o.max_tokens = 64;
      o.finalize = FinalizeMode::split;
      // device weights take the shared expert into a slot left after the routed ones (place_experts)
      o.shared_expert_in_routed_gemms = shared_in_routed;
      MoeLayer host(l.cfg, l.w, o), dev(l.cfg, l.device(0, -1), o);
      EXPECT_EQ(dev.core().shared_in_routed(), shared_in_routed && l.cfg.shared_expert) << what;
      EXPECT_EQ(dev.weight_bytes(), host.weight_bytes()) << what;
      const std::vector<uint16_t> a = forward(host, x, &logits, nullptr, T), b = forward(dev, x, &logits, nullptr, T);
      EXPECT_EQ(a, b) << what << ": the layer from device tensors differs from the host-built one";
      const Routing r = route_reference(l.cfg, logits.data(), T, l.w.correction_bias);
      EXPECT_EQ(forward(dev, x, nullptr, &r, T), a) << what << ": forward_routed with the router's choice differs";
    }
  }
}

// gpt-oss as an engine holds it: MXFP4 w13 with gate and up rows alternating
// (the checkpoint's order) and the biases on the device, fp32 or bf16, at its
// small shape and at an unaligned one (H 288, I 160: prepared padded): the
// layer equals the one built from host weights bitwise (for bf16 biases the
// host weights hold the same rounded values).
TEST(GpuDeviceWeights, GptOssWithBiasesAndAlternatingRowsEqualsTheHostLayer) {
  FP4MOE_REQUIRE_GPU();
  MoeConfig unaligned = preset("gpt-oss-small");
  unaligned.name = "gpt-oss-small-unaligned";
  unaligned.hidden = 288;
  unaligned.intermediate = 160;
  for (const MoeConfig& cfg : {preset("gpt-oss-small"), unaligned})
    for (const BiasType type : {BiasType::f32, BiasType::bf16}) {
      const std::string what = cfg.name + (type == BiasType::f32 ? " fp32 biases" : " bf16 biases");
      MoeWeights w = random_moe_weights(cfg, Fp4Format::mxfp4, 31);
      std::vector<std::vector<const Fp4Matrix*>> w13, w2;
      std::vector<float> b13, b2;
      for (ExpertWeights& e : w.experts) {
        for (std::vector<float>* b : {&e.gate_bias, &e.up_bias, &e.down_bias}) {
          ASSERT_FALSE(b->empty()) << what << ": the random gpt-oss experts have no biases";
          if (type == BiasType::bf16)
            for (float& v : *b) v = bf16_to_float(bf16_from_float(v));
        }
        w13.push_back({&e.gate, &e.up});
        w2.push_back({&e.down});
        for (size_t j = 0; j < e.gate_bias.size(); ++j) b13.push_back(e.gate_bias[j]), b13.push_back(e.up_bias[j]);
        b2.insert(b2.end(), e.down_bias.begin(), e.down_bias.end());
      }
      const DeviceTensors d13 = upload(w13, ScaleLayout::linear, 1), d2 = upload(w2, ScaleLayout::linear);
      std::vector<uint16_t> h13(b13.size()), h2(b2.size());
      for (size_t i = 0; i < b13.size(); ++i) h13[i] = bf16_from_float(b13[i]);
      for (size_t i = 0; i < b2.size(); ++i) h2[i] = bf16_from_float(b2[i]);
      const DeviceBuffer<float> f13(b13), f2(b2);
      const DeviceBuffer<uint16_t> g13(h13), g2(h2);
      DeviceMoeWeights d;
      d.format = Fp4Format::mxfp4;
      d.w13 = d13.view();
      d.w2 = d2.view();
      d.w13_order = GateUpOrder::interleaved;
      d.bias_type = type;
      d.w13_bias = type == BiasType::f32 ? static_cast<const void*>(f13.get()) : g13.get();
      d.w2_bias = type == BiasType::f32 ? static_cast<const void*>(f2.get()) : g2.get();
      LayerOptions o;
      o.max_tokens = 64;
      o.finalize = FinalizeMode::split;
      MoeLayer host(cfg, w, o), dev(cfg, d, o);
      EXPECT_EQ(dev.weight_bytes(), host.weight_bytes()) << what;
      for (const int64_t T : {1, 37}) {
        const test::Bf16Matrix x = test::random_bf16(T * cfg.hidden, 8, 3.f);
        const std::vector<float> logits = gaussian_logits(T, cfg.num_experts, 9);
        EXPECT_EQ(forward(dev, x, &logits, nullptr, T), forward(host, x, &logits, nullptr, T))
            << what << " T=" << T << ": the layer from device tensors differs from the host-built one";
      }
    }
}

// The biases a model has must come with the tensors, and only those.
TEST(GpuDeviceWeights, BiasesAreRequiredExactlyWhenTheModelHasThem) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig cfg = preset("gpt-oss-small");
  const MoeWeights w = random_moe_weights(cfg, Fp4Format::mxfp4, 5);
  std::vector<std::vector<const Fp4Matrix*>> w13, w2;
  for (const ExpertWeights& e : w.experts) w13.push_back({&e.gate, &e.up}), w2.push_back({&e.down});
  const DeviceTensors d13 = upload(w13, ScaleLayout::linear), d2 = upload(w2, ScaleLayout::linear);
  DeviceMoeWeights d;
  d.format = Fp4Format::mxfp4;
  d.w13 = d13.view();
  d.w2 = d2.view();
  try {
    MoeLayer layer(cfg, d);
    FAIL() << "gpt-oss without its biases was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has expert biases; DeviceMoeWeights::w13_bias and w2_bias are null and null"),
              std::string::npos)
        << e.what();
  }
}

TEST(GpuDeviceWeights, HeldExpertRangeAndBadIds) {
  FP4MOE_REQUIRE_GPU();
  Layered l = make_layered("mixtral-small", 11);
  const MoeConfig& c = l.cfg;
  const int64_t T = 29, begin = 2, count = 3;
  const test::Bf16Matrix x = test::random_bf16(T * c.hidden, 12);
  const std::vector<float> logits = gaussian_logits(T, c.num_experts, 13);
  Routing r = route_reference(c, logits.data(), T, {});
  LayerOptions o;
  o.max_tokens = T;
  o.finalize = FinalizeMode::split;
  MoeLayer layer(c, l.device(begin, count), o);
  EXPECT_EQ(layer.expert_begin(), begin);
  EXPECT_EQ(layer.expert_count(), count);
  const std::vector<uint16_t> got = forward(layer, x, nullptr, &r, T);
  // The reference: pairs of experts outside [begin, begin + count) weigh nothing.
  Routing held = r;
  for (size_t q = 0; q < held.topk_ids.size(); ++q)
    if (held.topk_ids[q] < begin || held.topk_ids[q] >= begin + count) held.topk_weights[q] = 0.f;
  const std::vector<float> ref = moe_forward_reference(c, l.w, x.values.data(), T, held);
  std::vector<float> g(got.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = bf16_to_float(got[i]);
  int64_t unwritten = 0;
  const double err = test::rel_frobenius(g, ref, &unwritten);
  EXPECT_EQ(unwritten, 0);
  EXPECT_LT(err, 1e-2);
  std::printf("  held experts [%lld, %lld) of %lld: rel err %.3e\n", (long long)begin, (long long)(begin + count),
              (long long)c.num_experts, err);

  // A bad id: reported by check_status, its pair dropped, every output still written.
  Routing bad = r;
  bad.topk_ids[5] = int32_t(c.num_experts);
  DeviceBuffer<uint16_t> dx(x.bits), out(size_t(T * c.hidden));
  DeviceBuffer<int32_t> ids(bad.topk_ids);
  DeviceBuffer<float> w(bad.topk_weights);
  out.fill_bytes(0xFF);
  layer.forward_routed(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), ids.get(), w.get(), T,
                       reinterpret_cast<__nv_bfloat16*>(out.get()));
  EXPECT_THROW(layer.check_status(nullptr), Error);
  for (uint16_t v : out.download()) ASSERT_NE(v, 0xFFFF) << "an output element was not written";
}

}  // namespace
}  // namespace fp4moe
