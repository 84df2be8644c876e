// The package's host functions: version, presets and configs, the planner,
// FP4 quantize/dequantize and the CPU reference layer, on CPU tensors (numpy
// through DLPack). Registered as global tvm-ffi functions "fp4moe.*".
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include "config_json.hpp"
#include "fp4moe/format.hpp"
#include "fp4moe/model.hpp"
#include "fp4moe/reference.hpp"
#include "fp4moe/version.hpp"
#include "host_weights.hpp"
#include "plan/plan_query.hpp"
#include "tensor_args.hpp"

namespace fp4moe::python {
namespace {

using tvm::ffi::Optional;
using tvm::ffi::String;
using json = nlohmann::json;

String preset_json(const String& name) { return guarded([&] { return String(config_to_json(preset(name)).dump()); }); }

String checkpoint_format_name(const String& config) {
  return guarded([&] { return String(to_string(checkpoint_format(config_from_json(config)))); });
}

String preset_names_json() {
  return guarded([] { return String(json(fp4moe::preset_names()).dump()); });
}

String hf_config_json(const String& path) {
  return guarded([&] { return String(config_to_json(config_from_hf_json(path)).dump()); });
}

String plan_json(const String& query) {
  return guarded([&] {
    json j;
    try {
      j = json::parse(std::string(query));
    } catch (const json::exception& e) {
      throw Error(std::string("plan: not valid JSON (") + e.what() + ")");
    }
    plan::PlanQuery q;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      try {
        if (key == "arch") q.arch = it->get<std::string>();
        else if (key == "kernel") q.kernel = it->get<std::string>();
        else if (key == "format") q.format = it->get<std::string>();
        else if (key == "tile") q.tile = it->is_number() ? std::to_string(it->get<int>()) : it->get<std::string>();
        else if (key == "epilogue") q.epilogue = it->get<std::string>();
        else if (key == "cutlass") q.cutlass_version = it->get<std::string>();
        else if (key == "swap_ab") q.swap_ab = it->get<bool>();
        else if (key == "sweep") q.sweep = it->get<bool>();
        else if (key == "stages") q.stages = it->get<int>();
        else if (key == "n") q.n = it->get<int64_t>();
        else if (key == "k") q.k = it->get<int64_t>();
        else if (key == "activations") q.activations = it->get<std::string>();
        else
          throw Error("plan: unknown argument '" + key +
                      "' (known: arch, kernel, format, tile, epilogue, cutlass, swap_ab, sweep, stages, n, k, activations)");
      } catch (const json::exception&) {
        throw Error("plan: argument '" + key + "' has the wrong type: " + it->dump());
      }
    }
    return String(plan::to_json(q, plan::answer(q)).dump());
  });
}

double quantize_into(TensorView x, const String& format, double amax, TensorView packed, TensorView scales) {
  return guarded([&] {
    const Fp4Format f = format_from_string(format);
    check(x, {"x", {Dt::f32}, {kAny, kAny}, kDLCPU});
    const int64_t rows = x.shape()[0], cols = x.shape()[1];
    const int block = f == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize;
    FP4MOE_CHECK(cols % block == 0, "x: " << cols << " columns is not a multiple of the " << to_string(f) << " block "
                                          << block);
    check(packed, {"packed", {Dt::u8}, {rows, cols / 2}, kDLCPU});
    check(scales, {"scales", {Dt::u8, f == Fp4Format::nvfp4 ? Dt::e4m3 : Dt::e8m0}, {rows, cols / block}, kDLCPU});
    const float* xp = data<float>(x);
    Fp4Matrix m = f == Fp4Format::mxfp4 ? quantize_mxfp4(xp, rows, cols)
                  : amax > 0          ? quantize_nvfp4(xp, rows, cols, float(amax))
                                      : quantize_nvfp4(xp, rows, cols);
    std::copy(m.packed.begin(), m.packed.end(), data<uint8_t>(packed));
    std::copy(m.scales.begin(), m.scales.end(), data<uint8_t>(scales));
    return double(m.weight_scale_2);
  });
}

void dequantize_into(TensorView packed, TensorView scales, double scale_2, const String& format, TensorView out) {
  guarded([&] {
    const Fp4Format f = format_from_string(format);
    check(out, {"out", {Dt::f32}, {kAny, kAny}, kDLCPU});
    const int64_t rows = out.shape()[0], cols = out.shape()[1];
    const int block = f == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize;
    FP4MOE_CHECK(cols % block == 0, "out: " << cols << " columns is not a multiple of the block " << block);
    const Fp4Matrix m = matrix_from(f, packed, scales, float(scale_2), rows, cols, "packed", "scales");
    const std::vector<float> v = dequantize(m);
    std::copy(v.begin(), v.end(), data<float>(out));
  });
}

void route_into(const String& config, TensorView logits, Optional<TensorView> bias, TensorView ids, TensorView weights) {
  guarded([&] {
    const MoeConfig c = config_from_json(config);
    check(logits, {"router_logits", {Dt::f32}, {kAny, c.num_experts}, kDLCPU});
    const int64_t T = logits.shape()[0];
    std::vector<float> b;
    if (bias) {
      check(*bias, {"e_score_correction_bias", {Dt::f32}, {c.num_experts}, kDLCPU});
      b.assign(data<float>(*bias), data<float>(*bias) + c.num_experts);
    }
    check(ids, {"topk_ids", {Dt::i32}, {T, c.top_k}, kDLCPU});
    check(weights, {"topk_weights", {Dt::f32}, {T, c.top_k}, kDLCPU});
    const Routing r = route_reference(c, data<float>(logits), T, b);
    std::copy(r.topk_ids.begin(), r.topk_ids.end(), data<int32_t>(ids));
    std::copy(r.topk_weights.begin(), r.topk_weights.end(), data<float>(weights));
  });
}

// The CPU reference layer (double accumulation) on checkpoint-layout tensors.
void reference_forward(const String& config, const String& format, TensorView w13, TensorView w13_scale,
                       Optional<TensorView> w13_scale_2, TensorView w2, TensorView w2_scale, Optional<TensorView> w2_scale_2,
                       Optional<TensorView> s13, Optional<TensorView> s13_scale, Optional<TensorView> s13_scale_2,
                       Optional<TensorView> s2, Optional<TensorView> s2_scale, Optional<TensorView> s2_scale_2,
                       Optional<TensorView> bias, TensorView hidden, Optional<TensorView> logits,
                       Optional<TensorView> topk_ids, Optional<TensorView> topk_weights, TensorView out,
                       const String& activations) {
  guarded([&] {
    const MoeConfig c = config_from_json(config);
    const Fp4Format f = format_from_string(format);
    const ActivationFormat act = parse_activation_format(std::string(activations));
    MoeWeights w;
    w.experts = experts_from(c, f, {w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2}, "", c.num_experts,
                             c.intermediate, kDLCPU);
    w.has_shared = c.shared_expert;
    if (c.shared_expert) {
      FP4MOE_CHECK(s13 && s13_scale && s2 && s2_scale, "the model has a shared expert: shared_expert tensors are required");
      w.shared = experts_from(c, f, {*s13, *s13_scale, s13_scale_2, *s2, *s2_scale, s2_scale_2}, "shared_expert.", 1,
                              c.shared_intermediate, kDLCPU)[0];
    }
    if (c.use_correction_bias) {
      FP4MOE_CHECK(bias, "the model uses e_score_correction_bias: it is required");
      check(*bias, {"e_score_correction_bias", {Dt::f32}, {c.num_experts}, kDLCPU});
      w.correction_bias.assign(data<float>(*bias), data<float>(*bias) + c.num_experts);
    }
    check(hidden, {"hidden_states", {Dt::f32}, {kAny, c.hidden}, kDLCPU});
    const int64_t T = hidden.shape()[0];
    check(out, {"out", {Dt::f32}, {T, c.hidden}, kDLCPU});
    Routing r;
    if (logits) {
      check(*logits, {"router_logits", {Dt::f32}, {T, c.num_experts}, kDLCPU});
      r = route_reference(c, data<float>(*logits), T, w.correction_bias);
    } else {
      FP4MOE_CHECK(topk_ids && topk_weights, "give router_logits, or topk_ids and topk_weights");
      check(*topk_ids, {"topk_ids", {Dt::i32}, {T, c.top_k}, kDLCPU});
      check(*topk_weights, {"topk_weights", {Dt::f32}, {T, c.top_k}, kDLCPU});
      r.tokens = T;
      r.top_k = c.top_k;
      r.topk_ids.assign(data<int32_t>(*topk_ids), data<int32_t>(*topk_ids) + T * c.top_k);
      r.topk_weights.assign(data<float>(*topk_weights), data<float>(*topk_weights) + T * c.top_k);
    }
    const std::vector<float> y = moe_forward_reference(c, w, data<float>(hidden), T, r, act);
    std::copy(y.begin(), y.end(), data<float>(out));
  });
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("fp4moe.version", [] { return String(kVersion); })
      .def("fp4moe.preset", preset_json)
      .def("fp4moe.preset_names", preset_names_json)
      .def("fp4moe.checkpoint_format", checkpoint_format_name)
      .def("fp4moe.config_from_hf", hf_config_json)
      .def("fp4moe.plan", plan_json)
      .def("fp4moe.quantize", quantize_into)
      .def("fp4moe.dequantize", dequantize_into)
      .def("fp4moe.route_reference", route_into)
      .def("fp4moe.reference_forward", reference_forward);
}

}  // namespace fp4moe::python
