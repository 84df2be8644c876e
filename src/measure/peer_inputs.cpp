#include "measure/peer_inputs.hpp"

#include <cstring>
#include <functional>

#include "fp4moe/error.hpp"
#include "io/safetensors.hpp"

namespace fp4moe {

namespace {

using io::Dtype;
using io::TensorToWrite;

// One stacked projection: every expert's matrix of `pick` back to back.
struct Stacked {
  std::vector<uint8_t> codes, scales;
  std::vector<float> global, bias;
};

Stacked stack(const std::vector<const ExpertWeights*>& experts, bool gate_up) {
  Stacked s;
  for (const ExpertWeights* e : experts) {
    auto add = [&](const Fp4Matrix& m, const std::vector<float>& b) {
      s.codes.insert(s.codes.end(), m.packed.begin(), m.packed.end());
      s.scales.insert(s.scales.end(), m.scales.begin(), m.scales.end());
      s.global.push_back(m.weight_scale_2);
      s.bias.insert(s.bias.end(), b.begin(), b.end());
    };
    if (gate_up) {
      add(e->gate, e->gate_bias);
      add(e->up, e->up_bias);
    } else {
      add(e->down, e->down_bias);
    }
  }
  return s;
}

}  // namespace

void write_peer_inputs(const std::string& path, const MoeConfig& cfg, const MoeWeights& w, const PeerInputs& in) {
  FP4MOE_CHECK(!w.experts.empty(), "peer inputs " << path << ": no experts");
  FP4MOE_CHECK(in.x_rows >= 1 && int64_t(in.x.size()) == in.x_rows * cfg.hidden,
               "peer inputs " << path << ": x holds " << in.x.size() << " values for " << in.x_rows << " rows of "
                              << cfg.hidden);
  const int64_t H = cfg.hidden, I = cfg.intermediate, E = int64_t(w.experts.size());
  const int g = w.experts[0].gate.block_size();
  std::vector<Stacked> keep;  // the bytes must outlive write_safetensors
  keep.reserve(4);
  std::vector<TensorToWrite> t;
  auto add_projection = [&](const std::string& name, std::vector<const ExpertWeights*> experts, bool gate_up,
                            int64_t n, int64_t k) {
    keep.push_back(stack(experts, gate_up));
    const Stacked& s = keep.back();
    const int64_t e = int64_t(experts.size());
    FP4MOE_CHECK(int64_t(s.codes.size()) == e * n * k / 2 && int64_t(s.scales.size()) == e * n * (k / g),
                 "peer inputs: " << name << " holds " << s.codes.size() << " code bytes, expected " << e * n * k / 2);
    t.push_back({name + ".codes", Dtype::U8, {e, n, k / 2}, s.codes.data(), s.codes.size()});
    t.push_back({name + ".scales", Dtype::U8, {e, n, k / g}, s.scales.data(), s.scales.size()});
    const int64_t per_expert = gate_up ? 2 : 1;
    t.push_back({name + ".global", Dtype::F32, gate_up ? std::vector<int64_t>{e, 2} : std::vector<int64_t>{e},
                 s.global.data(), s.global.size() * 4});
    FP4MOE_CHECK(int64_t(s.global.size()) == e * per_expert, "peer inputs: " << name << " global scales");
    if (!s.bias.empty()) {
      FP4MOE_CHECK(int64_t(s.bias.size()) == e * n, "peer inputs: " << name << " holds " << s.bias.size()
                                                                    << " bias values, expected " << e * n);
      t.push_back({name + ".bias", Dtype::F32, {e, n}, s.bias.data(), s.bias.size() * 4});
    }
  };
  std::vector<const ExpertWeights*> routed;
  for (const ExpertWeights& e : w.experts) routed.push_back(&e);
  add_projection("w13", routed, true, 2 * I, H);
  add_projection("w2", routed, false, H, I);
  if (w.has_shared) {
    const int64_t Is = cfg.shared_intermediate;
    add_projection("shared13", {&w.shared}, true, 2 * Is, H);
    add_projection("shared2", {&w.shared}, false, H, Is);
  }
  if (!w.correction_bias.empty())
    t.push_back({"correction_bias", Dtype::F32, {E}, w.correction_bias.data(), w.correction_bias.size() * 4});
  t.push_back({"x", Dtype::BF16, {in.x_rows, H}, in.x.data(), in.x.size() * 2});
  for (const auto& [T, l] : in.logits) {
    FP4MOE_CHECK(int64_t(l.size()) == T * E, "peer inputs: logits of T = " << T << " hold " << l.size() << " values");
    t.push_back({"logits." + std::to_string(T), Dtype::F32, {T, E}, l.data(), l.size() * 4});
  }
  io::write_safetensors(path, t, {{"format", g == 16 ? "nvfp4" : "mxfp4"}, {"model", cfg.name}});
}

}  // namespace fp4moe
