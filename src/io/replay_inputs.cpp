// read_replay_inputs: a captured hidden_states (and router_logits) file,
// checked against the layer before anything runs.
#include <cmath>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "io/replay.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io {
namespace {

void check_finite(const std::vector<float>& v, int64_t cols, const TensorRef& t) {
  for (size_t i = 0; i < v.size(); ++i)
    FP4MOE_CHECK(std::isfinite(v[i]), t.where() << ": row " << int64_t(i) / cols << " (the first with a non-finite value) has "
                                                << v[i] << " at column " << int64_t(i) % cols);
}

}  // namespace

ReplayInputs read_replay_inputs(const std::string& path, const MoeConfig& cfg) {
  const TensorStore store = TensorStore::open(path);
  FP4MOE_CHECK(store.contains("hidden_states"), path << ": no tensor 'hidden_states' (the layer's input, bf16 or fp32 [T, H])");
  const TensorRef h = store.get("hidden_states");
  expect_dtype(h, {Dtype::BF16, Dtype::F32});
  const std::vector<int64_t>& shape = h.info->shape;
  FP4MOE_CHECK(!shape.empty() && shape.back() == cfg.hidden,
               h.where() << " has shape " << shape_string(shape) << ": its last dimension must be the layer's hidden size H = "
                         << cfg.hidden << " (" << cfg.name << ")");
  ReplayInputs in;
  in.path = path;
  in.hidden_dtype = h.info->dtype;
  in.tokens = h.info->numel() / cfg.hidden;
  FP4MOE_CHECK(in.tokens > 0, h.where() << " has shape " << shape_string(shape) << ": no tokens");
  in.hidden = read_floats(h);
  check_finite(in.hidden, cfg.hidden, h);
  in.hidden_bf16.resize(in.hidden.size());
  for (size_t i = 0; i < in.hidden.size(); ++i) {
    in.hidden_bf16[i] = bf16_from_float(in.hidden[i]);
    in.hidden_exact_in_bf16 = in.hidden_exact_in_bf16 && bf16_to_float(in.hidden_bf16[i]) == in.hidden[i];
  }

  if (store.contains("router_logits")) {
    const TensorRef l = store.get("router_logits");
    expect_dtype(l, {Dtype::F32});
    const std::vector<int64_t> want{in.tokens, cfg.num_experts};
    FP4MOE_CHECK(l.info->shape.size() == 2 && l.info->shape[1] == cfg.num_experts,
                 l.where() << " has shape " << shape_string(l.info->shape) << ", expected [T, E] with E = "
                           << cfg.num_experts << " experts (" << cfg.name << ")");
    expect_shape(l, want, "T = " + std::to_string(in.tokens) + " tokens from hidden_states");
    in.router_logits = read_floats(l);
    check_finite(in.router_logits, cfg.num_experts, l);
  }
  return in;
}

}  // namespace fp4moe::io
