// The package's GPU layer: fp4moe::MoeLayer as the tvm-ffi object
// "fp4moe.Layer", built from device tensors or a ModelOpt checkpoint, with
// forward entry points that take DLPack tensors and the caller's stream.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/object.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include "config_json.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/layer.hpp"
#include "host_weights.hpp"
#include "common/cuda_check.hpp"
#include "tensor_args.hpp"

namespace fp4moe::python {
namespace {

using tvm::ffi::Optional;
using tvm::ffi::String;
using json = nlohmann::json;

class LayerObj : public tvm::ffi::Object {
 public:
  std::unique_ptr<MoeLayer> layer;
  LayerOptions options;
  int device = 0;

  static constexpr bool _type_mutable = true;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("fp4moe.Layer", LayerObj, tvm::ffi::Object);
};

class Layer : public tvm::ffi::ObjectRef {
 public:
  explicit Layer(tvm::ffi::ObjectPtr<LayerObj> p) : tvm::ffi::ObjectRef(std::move(p)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(Layer, tvm::ffi::ObjectRef, LayerObj);
};

Layer make(std::unique_ptr<MoeLayer> l, const LayerOptions& o) {
  auto obj = tvm::ffi::make_object<LayerObj>();
  obj->options = o;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&obj->device));
  obj->layer = std::move(l);
  return Layer(std::move(obj));
}

// The caller's stream: explicit (a cudaStream_t as an integer), or tvm-ffi's current one for the device.
cudaStream_t stream_of(int64_t stream, int device) {
  if (stream >= 0) return reinterpret_cast<cudaStream_t>(stream);
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));
}

Layer from_tensors(const String& config, const String& options, const String& format, TensorView w13,
                   TensorView w13_scale, Optional<TensorView> w13_scale_2, TensorView w2, TensorView w2_scale,
                   Optional<TensorView> w2_scale_2, const String& w13_order, const String& scale_layout,
                   int64_t expert_begin, int64_t expert_count, Optional<TensorView> s13, Optional<TensorView> s13_scale,
                   Optional<TensorView> s13_scale_2, Optional<TensorView> s2, Optional<TensorView> s2_scale,
                   Optional<TensorView> s2_scale_2, Optional<TensorView> bias, Optional<TensorView> router_weight,
                   Optional<TensorView> w13_bias, Optional<TensorView> w2_bias, Optional<TensorView> router_bias) {
  return guarded([&] {
    const MoeConfig c = config_from_json(config);
    const LayerOptions o = options_from_json(options);
    const Fp4Format f = format_from_string(format);
    FP4MOE_CHECK(w13_order == "gate_up" || w13_order == "up_gate" || w13_order == "interleaved",
                 "w13_order '" << std::string(w13_order) << "' is not gate_up, up_gate or interleaved");
    FP4MOE_CHECK(scale_layout == "linear" || scale_layout == "swizzled_128x4",
                 "scale_layout '" << std::string(scale_layout) << "' is not linear or swizzled_128x4");
    const bool swizzled = scale_layout == "swizzled_128x4";
    if (o.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(o.device));
    const int dev = w13.device().device_id;
    FP4MOE_CHECK(w13.device().device_type == kDLCUDA, "w13: expected a CUDA tensor; got " << describe(w13));
    FP4MOE_CHECK(o.device < 0 || o.device == dev, "w13 is on cuda:" << dev << ", options.device is " << o.device);
    FP4MOE_CUDA_CHECK(cudaSetDevice(dev));
    const int64_t count = expert_count < 0 ? c.num_experts : expert_count;
    FP4MOE_CHECK(expert_begin >= 0 && count >= 1 && expert_begin + count <= c.num_experts,
                 "local_experts (" << expert_begin << ", " << count << ") is not a non-empty range of the model's "
                                   << c.num_experts << " experts");
    DeviceMoeWeights w;
    w.format = f;
    w.w13_order = w13_order == "up_gate"       ? GateUpOrder::up_gate
                  : w13_order == "interleaved" ? GateUpOrder::interleaved
                                               : GateUpOrder::gate_up;
    w.scale_layout = swizzled ? ScaleLayout::swizzled_128x4 : ScaleLayout::linear;
    w.expert_begin = expert_begin;
    w.expert_count = count;
    auto projections = [&](const ExpertTensors& t, const std::string& prefix, int64_t E, int64_t width,
                           DeviceProjection& p13, DeviceProjection& p2) {
      const int parts = check_experts(t, c, f, prefix, E, width, kDLCUDA, dev, swizzled);
      p13 = {data<uint8_t>(t.w13), data<uint8_t>(t.w13_scale), t.w13_scale_2 ? data<float>(*t.w13_scale_2) : nullptr, parts};
      p2 = {data<uint8_t>(t.w2), data<uint8_t>(t.w2_scale), t.w2_scale_2 ? data<float>(*t.w2_scale_2) : nullptr, 1};
    };
    projections({w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2}, "", count, c.intermediate, w.w13, w.w2);
    w.has_shared = c.shared_expert;
    if (c.shared_expert) {
      FP4MOE_CHECK(s13 && s13_scale && s2 && s2_scale, "the model has a shared expert: shared_expert tensors are required");
      projections({*s13, *s13_scale, s13_scale_2, *s2, *s2_scale, s2_scale_2}, "shared_expert.", 1,
                  c.shared_intermediate, w.shared_w13, w.shared_w2);
    }
    if (c.use_correction_bias) {
      FP4MOE_CHECK(bias, "the model uses e_score_correction_bias: it is required");
      check(*bias, {"e_score_correction_bias", {Dt::f32}, {c.num_experts}, kDLCUDA, dev});
      w.correction_bias = data<float>(*bias);
    }
    if (router_weight) {
      check(*router_weight, {"router_weight", {Dt::bf16}, {c.num_experts, c.hidden}, kDLCUDA, dev});
      w.router_weight = data<uint16_t>(*router_weight);
    }
    if (router_bias) {
      FP4MOE_CHECK(router_weight, "router_bias: given without router_weight");
      check(*router_bias, {"router_bias", {Dt::f32}, {c.num_experts}, kDLCUDA, dev});
      w.router_bias = data<float>(*router_bias);
    }
    FP4MOE_CHECK(c.expert_bias == bool(w13_bias) && c.expert_bias == bool(w2_bias),
                 "the model " << (c.expert_bias ? "has expert biases: w13_bias and w2_bias are required"
                                                : "has no expert biases: w13_bias and w2_bias must be None"));
    if (c.expert_bias) {
      check(*w13_bias, {"w13_bias", {Dt::f32, Dt::bf16}, {count, 2 * c.intermediate}, kDLCUDA, dev});
      const bool f32 = is((*w13_bias).dtype(), Dt::f32);
      check(*w2_bias, {"w2_bias", {f32 ? Dt::f32 : Dt::bf16}, {count, c.hidden}, kDLCUDA, dev});
      w.bias_type = f32 ? BiasType::f32 : BiasType::bf16;
      w.w13_bias = f32 ? static_cast<const void*>(data<float>(*w13_bias)) : data<uint16_t>(*w13_bias);
      w.w2_bias = f32 ? static_cast<const void*>(data<float>(*w2_bias)) : data<uint16_t>(*w2_bias);
    }
    return make(std::make_unique<MoeLayer>(c, w, o), o);
  });
}

Layer from_modelopt(const String& path, int64_t layer_index, const String& options) {
  return guarded([&] {
    const LayerOptions o = options_from_json(options);
    if (o.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(o.device));
    const MoeCheckpointLayer ck = load_moe_layer(path, layer_index);
    return make(std::make_unique<MoeLayer>(ck.config, ck.weights, o), o);
  });
}

// Random FP4 weights (random_moe_weights: the CLI's and the tests' layers) for a config.
Layer from_random(const String& config, const String& format, int64_t seed, const String& options) {
  return guarded([&] {
    const LayerOptions o = options_from_json(options);
    if (o.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(o.device));
    const MoeConfig c = config_from_json(config);
    return make(std::make_unique<MoeLayer>(c, random_moe_weights(c, format_from_string(format), uint64_t(seed)), o), o);
  });
}

// hidden bf16 [T, H] and out bf16 [T, H] on the layer's device; T <= max_tokens.
int64_t check_io(const LayerObj& l, const TensorView& hidden, const TensorView& out) {
  const MoeConfig& c = l.layer->config();
  check(hidden, {"hidden_states", {Dt::bf16}, {kAny, c.hidden}, kDLCUDA, l.device});
  const int64_t T = hidden.shape()[0];
  FP4MOE_CHECK(T <= l.options.max_tokens, "hidden_states: " << T << " tokens is more than the layer's max_tokens = "
                                                            << l.options.max_tokens);
  check(out, {"out", {Dt::bf16}, {T, c.hidden}, kDLCUDA, l.device});
  FP4MOE_CHECK(data<void>(out) != data<void>(hidden), "out: must not be hidden_states itself");
  return T;
}

void forward(Layer layer, TensorView hidden, TensorView logits, TensorView out, int64_t stream) {
  guarded([&] {
    const LayerObj& l = *layer.get();
    const int64_t T = check_io(l, hidden, out);
    check(logits, {"router_logits", {Dt::f32}, {T, l.layer->config().num_experts}, kDLCUDA, l.device});
    l.layer->forward(stream_of(stream, l.device), data<__nv_bfloat16>(hidden), data<float>(logits), T,
                     data<__nv_bfloat16>(out));
  });
}

void forward_routed(Layer layer, TensorView hidden, TensorView ids, TensorView weights, TensorView out, int64_t stream) {
  guarded([&] {
    const LayerObj& l = *layer.get();
    const int64_t T = check_io(l, hidden, out), k = l.layer->config().top_k;
    check(ids, {"topk_ids", {Dt::i32}, {T, k}, kDLCUDA, l.device});
    check(weights, {"topk_weights", {Dt::f32}, {T, k}, kDLCUDA, l.device});
    l.layer->forward_routed(stream_of(stream, l.device), data<__nv_bfloat16>(hidden), data<int32_t>(ids),
                            data<float>(weights), T, data<__nv_bfloat16>(out));
  });
}

void forward_from_hidden(Layer layer, TensorView hidden, TensorView out, int64_t stream) {
  guarded([&] {
    const LayerObj& l = *layer.get();
    const int64_t T = check_io(l, hidden, out);
    l.layer->forward_from_hidden(stream_of(stream, l.device), data<__nv_bfloat16>(hidden), T, data<__nv_bfloat16>(out));
  });
}

// The last routing the layer computed, copied into ids int32 [T, k] and weights fp32 [T, k] on `stream`.
void topk(Layer layer, TensorView ids, TensorView weights, int64_t stream) {
  guarded([&] {
    const LayerObj& l = *layer.get();
    const int64_t k = l.layer->config().top_k;
    check(ids, {"topk_ids", {Dt::i32}, {kAny, k}, kDLCUDA, l.device});
    const int64_t T = ids.shape()[0];
    FP4MOE_CHECK(T <= l.options.max_tokens, "topk_ids: " << T << " rows is more than max_tokens");
    check(weights, {"topk_weights", {Dt::f32}, {T, k}, kDLCUDA, l.device});
    const cudaStream_t s = stream_of(stream, l.device);
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(data<int32_t>(ids), l.layer->topk_ids(), size_t(T * k) * 4, cudaMemcpyDeviceToDevice, s));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(data<float>(weights), l.layer->topk_weights(), size_t(T * k) * 4,
                                      cudaMemcpyDeviceToDevice, s));
  });
}

String info(Layer layer) {
  return guarded([&] {
    const LayerObj& l = *layer.get();
    const MoeLayer& m = *l.layer;
    const FinalizeMode f = m.finalize_mode();
    json j = {{"config", config_to_json(m.config())},
              {"max_tokens", l.options.max_tokens},
              {"device", l.device},
              {"finalize", f == FinalizeMode::split ? "split" : "fused"},
              {"local_experts", {m.expert_begin(), m.expert_count()}},
              {"weight_bytes", m.weight_bytes()},
              {"workspace_bytes", m.workspace_bytes()},
              {"has_router_weight", m.has_router_weight()}};
    return String(j.dump());
  });
}

String describe_tiles(Layer layer, int64_t tokens) {
  return guarded([&] {
    FP4MOE_CHECK(tokens >= 1 && tokens <= layer->options.max_tokens,
                 "describe: tokens = " << tokens << " is outside 1..max_tokens = " << layer->options.max_tokens);
    return String(layer->layer->describe(tokens));
  });
}

String tune(Layer layer, const String& tokens_json) {
  return guarded([&] {
    std::vector<int64_t> tokens;
    try {
      tokens = json::parse(std::string(tokens_json)).get<std::vector<int64_t>>();
    } catch (const json::exception&) {
      throw Error("tune: tokens must be a list of integers, got " + std::string(tokens_json));
    }
    for (int64_t t : tokens)
      FP4MOE_CHECK(t >= 1 && t <= layer->options.max_tokens,
                   "tune: tokens = " << t << " is outside 1..max_tokens = " << layer->options.max_tokens);
    json rows = json::array();
    for (const MoeLayer::TuneRow& r : layer->layer->tune(tokens))
      rows.push_back({{"gemm", r.gemm}, {"tokens", r.tokens}, {"bucket", r.bucket}, {"default_tile", r.default_tile},
                      {"tuned_tile", r.tuned_tile}, {"default_ms", r.default_ms}, {"tuned_ms", r.tuned_ms}});
    return String(rows.dump());
  });
}

void check_status(Layer layer, int64_t stream) {
  guarded([&] { layer->layer->check_status(stream_of(stream, layer->device)); });
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<LayerObj>();
  refl::GlobalDef()
      .def("fp4moe.layer_from_tensors", from_tensors)
      .def("fp4moe.layer_from_modelopt", from_modelopt)
      .def("fp4moe.layer_from_random", from_random)
      .def("fp4moe.layer_forward", forward)
      .def("fp4moe.layer_forward_routed", forward_routed)
      .def("fp4moe.layer_forward_from_hidden", forward_from_hidden)
      .def("fp4moe.layer_topk", topk)
      .def("fp4moe.layer_info", info)
      .def("fp4moe.layer_describe", describe_tiles)
      .def("fp4moe.layer_tune", tune)
      .def("fp4moe.layer_check_status", check_status);
}

}  // namespace fp4moe::python
