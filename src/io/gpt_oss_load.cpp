// gpt-oss checkpoints (OpenAI's MXFP4 layout, as transformers reads them):
// per MoE layer
//   mlp.experts.gate_up_proj_blocks  U8   [E, 2I, H/32, 16]  rows interleaved: 2i gate_i, 2i+1 up_i
//   mlp.experts.gate_up_proj_scales  U8   [E, 2I, H/32]      e8m0 block scales
//   mlp.experts.gate_up_proj_bias    BF16 [E, 2I]            interleaved likewise
//   mlp.experts.down_proj_{blocks,scales,bias}  [E, H, I/32, 16], [E, H, I/32], [E, H]
//   mlp.router.weight BF16 [E, H], mlp.router.bias [E]
// config.json: quantization_config.quant_method = "mxfp4".
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fp4moe/checkpoint.hpp"
#include "fp4moe/error.hpp"
#include "io/gpt_oss.hpp"
#include "io/modelopt.hpp"

namespace fp4moe::io::gpt_oss {
namespace {

namespace fs = std::filesystem;

std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + ".mlp."; }

// Rows [row0, row0 + step * n) every `step` rows of expert e's [rows, K] blocks and scales.
Fp4Matrix matrix_rows(const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales, int64_t e, int64_t rows,
                      int64_t K, int64_t row0, int64_t step, int64_t n) {
  Fp4Matrix m;
  m.format = Fp4Format::mxfp4;
  m.rows = n;
  m.cols = K;
  m.packed.resize(size_t(n * K / 2));
  m.scales.resize(size_t(n * K / 32));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t src = e * rows + row0 + r * step;
    std::copy_n(blocks.begin() + src * (K / 2), K / 2, m.packed.begin() + r * (K / 2));
    std::copy_n(scales.begin() + src * (K / 32), K / 32, m.scales.begin() + r * (K / 32));
  }
  return m;
}

std::vector<float> row_values(const std::vector<float>& v, int64_t e, int64_t rows, int64_t row0, int64_t step, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) out[size_t(r)] = v[size_t(e * rows + row0 + r * step)];
  return out;
}

struct Projection {
  std::vector<uint8_t> blocks, scales;
  std::vector<float> bias;
};

Projection read_projection(const TensorStore& store, const std::string& prefix, int64_t E, int64_t rows, int64_t K) {
  Projection p;
  const TensorRef b = store.get(prefix + "_blocks");
  expect_dtype(b, {Dtype::U8});
  expect_shape(b, {E, rows, K / 32, 16}, "[E, rows, K/32, 16] from config.json");
  p.blocks = read_bytes(b);
  const TensorRef s = store.get(prefix + "_scales");
  expect_dtype(s, {Dtype::U8});
  expect_shape(s, {E, rows, K / 32}, "[E, rows, K/32] from config.json");
  p.scales = read_bytes(s);
  for (size_t i = 0; i < p.scales.size(); ++i)
    FP4MOE_CHECK(p.scales[i] != 0xFF, s.where() << ": scale byte " << i << " is 0xFF (e8m0 NaN)");
  const TensorRef bias = store.get(prefix + "_bias");
  expect_shape(bias, {E, rows}, "[E, rows] from config.json");
  p.bias = read_floats(bias);
  for (size_t i = 0; i < p.bias.size(); ++i)
    FP4MOE_CHECK(std::isfinite(p.bias[i]), bias.where() << ": value " << i << " is " << p.bias[i]);
  return p;
}

}  // namespace

bool is_gpt_oss_checkpoint(const std::string& dir) {
  std::ifstream f(fs::path(dir) / modelopt::kModelConfigFile);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("quantization_config") && j["quantization_config"].is_object() &&
         j["quantization_config"].value("quant_method", std::string()) == "mxfp4";
}

std::vector<int64_t> moe_layers(const TensorStore& store) {
  std::vector<int64_t> layers;
  const std::string head = "model.layers.", tail = ".mlp.experts.gate_up_proj_blocks";
  for (const std::string& n : store.names()) {
    if (n.size() <= head.size() + tail.size() || n.compare(0, head.size(), head) != 0 ||
        n.compare(n.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string num = n.substr(head.size(), n.size() - head.size() - tail.size());
    if (!num.empty() && std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      layers.push_back(std::stoll(num));
  }
  std::sort(layers.begin(), layers.end());
  return layers;
}

void check_layer_tensors(const TensorStore& store, const MoeConfig& c, int64_t layer) {
  const std::string pre = layer_prefix(layer);
  const int64_t E = c.num_experts, H = c.hidden, I = c.intermediate;
  for (const auto& [proj, rows, K] : {std::tuple{std::string("experts.gate_up_proj"), 2 * I, H},
                                      std::tuple{std::string("experts.down_proj"), H, I}}) {
    const TensorRef b = store.get(pre + proj + "_blocks");
    expect_dtype(b, {Dtype::U8});
    expect_shape(b, {E, rows, K / 32, 16}, "[E, rows, K/32, 16] from config.json");
    const TensorRef s = store.get(pre + proj + "_scales");
    expect_dtype(s, {Dtype::U8});
    expect_shape(s, {E, rows, K / 32}, "[E, rows, K/32] from config.json");
    expect_shape(store.get(pre + proj + "_bias"), {E, rows}, "[E, rows] from config.json");
  }
  expect_shape(store.get(pre + "router.weight"), {E, H}, "[E, H] from config.json");
  expect_shape(store.get(pre + "router.bias"), {E}, "[E] from config.json");
}

MoeCheckpointLayer read_layer(const TensorStore& store, const MoeConfig& c, int64_t layer) {
  FP4MOE_CHECK(layer >= 0, "--layer " << layer << " is negative");
  const std::string pre = layer_prefix(layer);
  FP4MOE_CHECK(store.contains(pre + "experts.gate_up_proj_blocks"),
               store.path() << ": layer " << layer << " has no tensor '" << pre << "experts.gate_up_proj_blocks'");
  const int64_t E = c.num_experts, H = c.hidden, I = c.intermediate;
  const Projection gu = read_projection(store, pre + "experts.gate_up_proj", E, 2 * I, H);
  const Projection dn = read_projection(store, pre + "experts.down_proj", E, H, I);
  MoeCheckpointLayer out;
  out.layer = layer;
  out.config = c;
  MoeWeights& w = out.weights;
  w.experts.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights& x = w.experts[size_t(e)];
    x.gate = matrix_rows(gu.blocks, gu.scales, e, 2 * I, H, 0, 2, I);
    x.up = matrix_rows(gu.blocks, gu.scales, e, 2 * I, H, 1, 2, I);
    x.down = matrix_rows(dn.blocks, dn.scales, e, H, I, 0, 1, H);
    x.gate_bias = row_values(gu.bias, e, 2 * I, 0, 2, I);
    x.up_bias = row_values(gu.bias, e, 2 * I, 1, 2, I);
    x.down_bias = row_values(dn.bias, e, H, 0, 1, H);
  }
  const TensorRef router = store.get(pre + "router.weight");
  expect_shape(router, {E, H}, "[E, H] from config.json");
  w.router_weight = read_bf16_bits(router);
  const TensorRef rb = store.get(pre + "router.bias");
  expect_shape(rb, {E}, "[E] from config.json");
  w.router_bias = read_floats(rb);
  out.notes.push_back("gpt-oss MXFP4 layout: gate/up rows interleaved, expert and router biases");
  return out;
}

}  // namespace fp4moe::io::gpt_oss
