// quantize_checkpoint: a bf16/fp32 MoE checkpoint becomes ModelOpt NVFP4
// whose matrices are exactly what quantize_nvfp4 makes of the same values,
// gate_proj and up_proj of each expert sharing the larger amax of the two (as
// ModelOpt's export does); other tensors and files are copied; failures leave
// nothing behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint_test_util.hpp"
#include "fp4moe/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe {
namespace {

using test::TempDir;
constexpr int64_t H = 64, I = 32, E = 4;

const char* kConfig = R"({"model_type":"tiny","hidden_size":64,"moe_intermediate_size":32,"n_routed_experts":4,
  "num_experts_per_tok":2,"scoring_func":"sigmoid","topk_method":"noaux_tc","norm_topk_prob":true,
  "routed_scaling_factor":2.5,"n_shared_experts":1,"num_hidden_layers":1})";

struct Source {
  std::map<std::string, std::vector<float>> values;  // every tensor as fp32
  std::map<std::string, std::vector<int64_t>> shapes;
};

// A one-layer checkpoint: experts and shared expert in `dtype` (F32 or BF16, bf16-exact values),
// router bf16, bias and a norm in F32.
Source write_source(const std::string& dir, io::Dtype dtype) {
  std::filesystem::create_directories(dir);
  test::write_text(dir + "/config.json", kConfig);
  test::write_text(dir + "/tokenizer.json", "{}");
  Source s;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.f, 0.2f);
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    std::vector<float>& v = s.values[name];
    v.resize(size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
    for (float& x : v) x = bf16_to_float(bf16_from_float(d(rng)));
    s.shapes[name] = shape;
  };
  for (int64_t e = -1; e < E; ++e) {
    const std::string p = e < 0 ? "model.layers.0.mlp.shared_experts." : "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    add(p + "gate_proj.weight", {I, H});
    add(p + "up_proj.weight", {I, H});
    add(p + "down_proj.weight", {H, I});
  }
  add("model.layers.0.mlp.gate.weight", {E, H});
  add("model.layers.0.mlp.gate.e_score_correction_bias", {E});
  add("model.norm.weight", {H});
  std::vector<std::vector<uint16_t>> bf16_store;
  std::vector<io::TensorToWrite> t;
  for (const auto& [name, v] : s.values) {
    const bool as_bf16 = name.find("_proj.weight") != std::string::npos ? dtype == io::Dtype::BF16 : name.find("gate.weight") != std::string::npos;
    if (as_bf16) {
      bf16_store.emplace_back(v.size());
      for (size_t i = 0; i < v.size(); ++i) bf16_store.back()[i] = bf16_from_float(v[i]);
      t.push_back({name, io::Dtype::BF16, s.shapes[name], bf16_store.back().data(), v.size() * 2});
    } else {
      t.push_back({name, io::Dtype::F32, s.shapes[name], v.data(), v.size() * 4});
    }
  }
  io::write_safetensors(dir + "/model.safetensors", t);
  return s;
}

void expect_quantized_like_the_format_code(const std::string& out, const Source& s) {
  const io::TensorStore q = io::TensorStore::open(out);
  for (const auto& [name, v] : s.values) {
    if (name.find("_proj.weight") == std::string::npos) {
      EXPECT_EQ(io::read_floats(q.get(name)), v) << name << " copied";
      continue;
    }
    const std::string prefix = name.substr(0, name.size() - 6);
    const int64_t rows = s.shapes.at(name)[0], cols = s.shapes.at(name)[1];
    float amax = nvfp4_amax(v.data(), rows, cols);
    const bool fused = name.find("down_proj") == std::string::npos;
    if (fused) {  // the expert's other half of the fused gate/up projection
      const bool gate = name.find("gate_proj") != std::string::npos;
      const std::string expert = name.substr(0, name.find(gate ? "gate_proj" : "up_proj"));
      const std::string other = expert + (gate ? "up_proj.weight" : "gate_proj.weight");
      amax = std::max(amax, nvfp4_amax(s.values.at(other).data(), rows, cols));
    }
    const Fp4Matrix want = quantize_nvfp4(v.data(), rows, cols, amax);
    if (fused) {
      EXPECT_EQ(io::read_scalar_f32(q.get(prefix + "weight_scale_2")), amax * (1.0f / 2688.0f)) << name << ": the shared amax";
    }
    EXPECT_EQ(io::read_bytes(q.get(prefix + "weight")), want.packed) << name;
    EXPECT_EQ(io::read_bytes(q.get(prefix + "weight_scale")), want.scales) << name;
    EXPECT_EQ(io::read_scalar_f32(q.get(prefix + "weight_scale_2")), want.weight_scale_2) << name;
    EXPECT_EQ(io::read_scalar_f32(q.get(prefix + "input_scale")), 1.0f) << name;
    EXPECT_EQ(q.get(prefix + "weight_scale").info->dtype, io::Dtype::F8_E4M3);
  }
}

TEST(CheckpointQuantize, Fp32AndBf16CheckpointsBecomeModelOptNvfp4) {
  for (io::Dtype dtype : {io::Dtype::F32, io::Dtype::BF16}) {
    TempDir dir;
    const Source s = write_source(dir / "in", dtype);
    std::vector<QuantizeProgress> steps;
    const QuantizeSummary sum = quantize_checkpoint(dir / "in", dir / "out", [&](const QuantizeProgress& p) { steps.push_back(p); });
    EXPECT_EQ(sum.quantized_tensors, 3 * (E + 1));
    EXPECT_EQ(sum.copied_tensors, 3);
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.back().tensors_done, steps.back().tensors_total);
    EXPECT_EQ(steps.back().bytes_done, steps.back().bytes_total);
    expect_quantized_like_the_format_code(dir / "out", s);
    EXPECT_TRUE(std::filesystem::exists(dir / "out/tokenizer.json"));
    EXPECT_TRUE(std::filesystem::exists(dir / "out/hf_quant_config.json"));
    // ... and it loads as a layer.
    const MoeCheckpointLayer l = load_moe_layer(dir / "out", 0);
    EXPECT_EQ(l.weights.experts.size(), size_t(E));
    EXPECT_TRUE(l.weights.has_shared);
    const std::vector<float>& gate = s.values.at("model.layers.0.mlp.experts.1.gate_proj.weight");
    const std::vector<float>& up = s.values.at("model.layers.0.mlp.experts.1.up_proj.weight");
    const float amax = std::max(nvfp4_amax(gate.data(), I, H), nvfp4_amax(up.data(), I, H));
    EXPECT_EQ(l.weights.experts[1].up.packed, quantize_nvfp4(up.data(), I, H, amax).packed);
    EXPECT_EQ(l.weights.experts[1].gate.weight_scale_2, l.weights.experts[1].up.weight_scale_2);
  }
}

TEST(CheckpointQuantize, ShardedInputKeepsItsShardsAndIndex) {
  TempDir dir;
  const Source s = write_source(dir / "in", io::Dtype::F32);
  // Split: experts in one shard, the rest in another.
  const io::TensorStore one = io::TensorStore::open(dir / "in");
  std::vector<io::TensorToWrite> a, b;
  std::vector<std::vector<uint8_t>> keep;
  std::string map;
  for (const std::string& n : one.names()) {
    const io::TensorRef r = one.get(n);
    keep.push_back(io::read_bytes(r));
    const bool experts = n.find(".experts.") != std::string::npos;
    (experts ? a : b).push_back({n, r.info->dtype, r.info->shape, nullptr, r.info->bytes()});
    map += (map.empty() ? "" : ",") + ("\"" + n + "\":\"" + (experts ? "a.safetensors" : "b.safetensors") + "\"");
  }
  size_t k = 0;
  for (const std::string& n : one.names()) {
    for (auto* list : {&a, &b})
      for (io::TensorToWrite& t : *list)
        if (t.name == n) t.data = keep[k].data();
    ++k;
  }
  io::write_safetensors(dir / "in/a.safetensors", a);
  io::write_safetensors(dir / "in/b.safetensors", b);
  std::filesystem::remove(dir / "in/model.safetensors");
  test::write_text(dir / "in/model.safetensors.index.json", "{\"weight_map\":{" + map + "}}");

  const QuantizeSummary sum = quantize_checkpoint(dir / "in", dir / "out");
  EXPECT_EQ(sum.files.front(), "a.safetensors");
  EXPECT_TRUE(std::filesystem::exists(dir / "out/model.safetensors.index.json"));
  expect_quantized_like_the_format_code(dir / "out", s);
  const io::TensorStore q = io::TensorStore::open(dir / "out");
  EXPECT_NE(q.get("model.layers.0.mlp.experts.2.down_proj.weight_scale").file->path().find("a.safetensors"), std::string::npos);
}

TEST(CheckpointQuantize, BadInputsLeaveNothingBehind) {
  TempDir dir;
  write_source(dir / "in", io::Dtype::F32);
  EXPECT_ERROR_CONTAINS(quantize_checkpoint(dir / "in", dir / "in"), "exists and is not empty");
  EXPECT_ERROR_CONTAINS(quantize_checkpoint(dir / "nothing", dir / "out"), "not a checkpoint directory");

  // A NaN weight: the error names the tensor, row and column; no output directory appears.
  test::rewrite(dir / "in", [](auto& t) {
    const float nan = NAN;
    std::memcpy(t["model.layers.0.mlp.experts.3.gate_proj.weight"].bytes.data() + 4 * (5 * H + 9), &nan, 4);
  });
  EXPECT_ERROR_CONTAINS(quantize_checkpoint(dir / "in", dir / "out"),
                        "experts.3.gate_proj.weight' in " + (dir / "in/model.safetensors") + ": quantize_nvfp4: x[5, 9] = nan is not finite");
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  EXPECT_EQ(test::entries(dir.path()), std::vector<std::string>{"in"}) << "no temporary directory left";

  test::write_text(dir / "in/hf_quant_config.json", R"({"quantization":{"quant_algo":"NVFP4","group_size":16}})");
  EXPECT_ERROR_CONTAINS(quantize_checkpoint(dir / "in", dir / "out"), "already quantized");
}

TEST(CheckpointQuantize, NoExpertsIsAnError) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  test::write_text(dir / "in/config.json", kConfig);
  const std::vector<float> v(H, 1.f);
  io::write_safetensors(dir / "in/model.safetensors", {{"model.norm.weight", io::Dtype::F32, {H}, v.data(), v.size() * 4}});
  EXPECT_ERROR_CONTAINS(quantize_checkpoint(dir / "in", dir / "out"), "no expert weights to quantize");
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

TEST(CheckpointInspect, SaysWhatFp4moeWouldDo) {
  TempDir dir;
  write_source(dir / "in", io::Dtype::BF16);
  CheckpointSummary s = inspect_checkpoint(dir / "in");
  EXPECT_FALSE(s.nvfp4);
  EXPECT_EQ(s.moe_layers, std::vector<int64_t>{0});
  std::string text;
  for (const std::string& l : s.lines) text += l + "\n";
  EXPECT_NE(text.find("model.layers.0.mlp.experts.{0..3}.down_proj.weight  BF16 [64, 32]  x4"), std::string::npos) << text;
  EXPECT_NE(text.find("not quantized: `fp4moe quantize --in"), std::string::npos) << text;
  quantize_checkpoint(dir / "in", dir / "out");
  s = inspect_checkpoint(dir / "out");
  EXPECT_TRUE(s.nvfp4);
  text.clear();
  for (const std::string& l : s.lines) text += l + "\n";
  EXPECT_NE(text.find("quantization: NVFP4, group 16"), std::string::npos) << text;
  EXPECT_NE(text.find("`fp4moe run --checkpoint " + (dir / "out") + " --layer 0`"), std::string::npos) << text;
  EXPECT_TRUE(s.usable()) << text;
  EXPECT_NE(text.find("down_proj.weight_scale_2  F32 []  x4"), std::string::npos) << text;
  EXPECT_ERROR_CONTAINS(inspect_checkpoint(dir / "none"), "no such file or directory");
}

}  // namespace
}  // namespace fp4moe
