// fp4moe run --input IN --output OUT: replay captured activations through one
// layer, on the GPU (MoeLayer) or, without one, the CPU reference; write what
// it computed and, with --check, the CPU reference and the error between them.
// The output file is written whole or not at all (io::write_replay_outputs).
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/core.h>

#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "io/replay.hpp"
#include "run_layer.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe::cli {
namespace {

constexpr double kCheckTolerance = 1e-2;  // relative Frobenius, as every GPU check (docs/reference.md)

std::string describe_input(const io::ReplayInputs& in, const MoeConfig& cfg) {
  return fmt::format("{}: hidden_states {} [{}, {}], router_logits {}", in.path, io::dtype_name(in.hidden_dtype), in.tokens,
                     cfg.hidden,
                     in.router_logits.empty() ? "computed from the router weight (fp32 hidden . weight^T)" : "from the file");
}

io::ReplayOutputs outputs_for(const RunLayer& layer, const io::ReplayInputs& in, const std::string& device) {
  io::ReplayOutputs out;
  out.tokens = in.tokens;
  out.hidden = layer.cfg.hidden;
  out.top_k = layer.cfg.top_k;
  out.metadata = {{"producer", "fp4moe run"},
                  {"weights", layer.source},
                  {"model", describe_model(layer.cfg)},
                  {"input", in.path},
                  {"device", device},
                  {"router_logits", in.router_logits.empty() ? "computed from mlp.gate.weight" : "from the input"}};
  return out;
}

void print_error(const io::ReplayOutputs& out) {
  int64_t worst = 0;
  for (int64_t t = 1; t < out.tokens; ++t)
    if (!(out.error_per_token[size_t(t)] <= out.error_per_token[size_t(worst)])) worst = t;
  fmt::print("  error      output vs reference: rel. Frobenius {:.3e} (worst token {}: {:.3e})\n", out.error, worst,
             out.error_per_token[size_t(worst)]);
}

void write(const io::ReplayOutputs& out, const std::string& path) {
  io::write_replay_outputs(path, out);
  fmt::print("  wrote      {}: output, topk_ids, topk_weights{}\n", path,
             out.checked ? ", reference_output, reference_topk_ids, reference_topk_weights, error, error_per_token" : "");
}

int64_t tokens_routed_differently(const io::ReplayOutputs& out) {
  int64_t n = 0;
  for (int64_t t = 0; t < out.tokens; ++t)
    n += !std::equal(out.topk_ids.begin() + t * out.top_k, out.topk_ids.begin() + (t + 1) * out.top_k,
                     out.reference_topk_ids.begin() + t * out.top_k);
  return n;
}

}  // namespace

void replay_on_cpu(const RunLayer& layer, const ReplayRequest& r, const std::string& why_no_gpu) {
  fmt::print("fp4moe run: no GPU ({}): replaying on the CPU reference\n", why_no_gpu);
  fmt::print("  model      {}\n", describe_model(layer.cfg));
  fmt::print("  weights    {}\n", layer.source);
  for (const std::string& n : layer.notes) fmt::print("             {}\n", n);
  const io::ReplayInputs in = io::read_replay_inputs(r.input, layer.cfg);
  fmt::print("  input      {}\n", describe_input(in, layer.cfg));
  const auto t0 = std::chrono::steady_clock::now();
  const io::ReferenceReplay ref = io::replay_reference(layer.cfg, layer.weights, in);
  fmt::print("  forward    {:.1f} ms (CPU reference: exact dequantization, double accumulation)\n",
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  io::ReplayOutputs out = outputs_for(layer, in, "CPU reference");
  out.output.resize(ref.output.size());
  for (size_t i = 0; i < ref.output.size(); ++i) out.output[i] = bf16_from_float(ref.output[i]);
  out.topk_ids = ref.routing.topk_ids;
  out.topk_weights = ref.routing.topk_weights;
  if (r.check) {
    // The reference is what ran: the error is only the output's rounding to bf16.
    out.checked = true;
    out.reference_output = ref.output;
    out.reference_topk_ids = ref.routing.topk_ids;
    out.reference_topk_weights = ref.routing.topk_weights;
    io::set_replay_error(out);
    print_error(out);
    fmt::print("             (on the CPU the output is the reference rounded to bf16)\n");
  }
  write(out, r.output);
}

void replay_on_gpu(const RunLayer& layer, const ReplayRequest& r, const DeviceInfo& dev) {
  const MoeConfig& cfg = layer.cfg;
  fmt::print("fp4moe run on {} (sm_{}, {} SMs): replay\n", dev.name, dev.cc, dev.sm_count);
  fmt::print("  model      {}\n", describe_model(cfg));
  fmt::print("  weights    {}\n", layer.source);
  for (const std::string& n : layer.notes) fmt::print("             {}\n", n);
  const io::ReplayInputs in = io::read_replay_inputs(r.input, cfg);
  fmt::print("  input      {}\n", describe_input(in, cfg));
  const int64_t T = in.tokens;
  if (!in.hidden_exact_in_bf16)
    fmt::print("             hidden_states rounded to bf16 for the GPU layer (its activations are bf16)\n");

  // Logits: from the file; else on the device from the bf16 hidden states,
  // unless rounding to bf16 changed them: then on the host from the fp32 values.
  const bool device_logits = in.router_logits.empty() && in.hidden_exact_in_bf16;
  FP4MOE_CHECK(!in.router_logits.empty() || !layer.weights.router_weight.empty(),
               in.path << ": no tensor 'router_logits', and the layer has no router weight to compute them from");
  const std::vector<float> host_logits =
      device_logits ? std::vector<float>{} : io::replay_router_logits(cfg, layer.weights, in, in.hidden);

  LayerOptions lo;
  lo.max_tokens = T;
  lo.deterministic = r.deterministic;
  MoeLayer moe(cfg, layer.weights, lo);
  DeviceBuffer<uint16_t> dx(in.hidden_bf16), dout(size_t(T * cfg.hidden));
  DeviceBuffer<float> dl(host_logits);
  dout.fill_bytes(0xFF);  // an unwritten element reads as NaN
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  auto* y = reinterpret_cast<__nv_bfloat16*>(dout.get());
  if (device_logits)
    moe.forward_from_hidden(nullptr, x, T, y);
  else
    moe.forward(nullptr, x, dl.get(), T, y);
  moe.check_status(nullptr);

  io::ReplayOutputs out = outputs_for(layer, in, dev.name);
  out.output = dout.download();
  out.topk_ids.resize(size_t(T * cfg.top_k));
  out.topk_weights.resize(out.topk_ids.size());
  FP4MOE_CUDA_CHECK(cudaMemcpy(out.topk_ids.data(), moe.topk_ids(), out.topk_ids.size() * 4, cudaMemcpyDeviceToHost));
  FP4MOE_CUDA_CHECK(cudaMemcpy(out.topk_weights.data(), moe.topk_weights(), out.topk_weights.size() * 4, cudaMemcpyDeviceToHost));
  fmt::print("  forward    {} tokens, {} finalize\n", T, moe.finalize_mode() == FinalizeMode::split ? "split" : "fused");

  bool passed = true;
  if (r.check) {
    // Routing: the reference router on the reference's logits. Experts: the
    // reference layer on the GPU's routing and the bf16 inputs the GPU saw, so
    // the error measures the expert computation alone.
    out.checked = true;
    const std::vector<float> ref_logits = io::replay_router_logits(cfg, layer.weights, in, in.hidden);
    const Routing ref_route = route_reference(cfg, ref_logits.data(), T, layer.weights.correction_bias);
    out.reference_topk_ids = ref_route.topk_ids;
    out.reference_topk_weights = ref_route.topk_weights;
    Routing gpu_route{T, cfg.top_k, out.topk_ids, out.topk_weights};
    std::vector<float> x_seen(in.hidden_bf16.size());
    for (size_t i = 0; i < x_seen.size(); ++i) x_seen[i] = bf16_to_float(in.hidden_bf16[i]);
    out.reference_output = moe_forward_reference(cfg, layer.weights, x_seen.data(), T, gpu_route);
    io::set_replay_error(out);
    const int64_t rerouted = tokens_routed_differently(out);
    const bool bitwise = rerouted == 0 && std::memcmp(out.topk_weights.data(), ref_route.topk_weights.data(),
                                                      out.topk_weights.size() * 4) == 0;
    fmt::print("  check      routing {}\n",
               bitwise ? "bitwise equal to the CPU reference's"
                       : fmt::format("differs from the CPU reference's for {} of {} tokens{}", rerouted, T,
                                     device_logits ? " (logits from cuBLAS: expected only at near-ties)" : ""));
    print_error(out);
    // Logits computed on the device may order near-ties differently; given or host logits must route bitwise.
    passed = std::isfinite(out.error) && out.error < kCheckTolerance && (bitwise || device_logits);
  }
  write(out, r.output);
  FP4MOE_CHECK(passed, "--check failed (the outputs are written to " << r.output << "): error " << out.error
                                                                      << ", tolerance " << kCheckTolerance);
}

}  // namespace fp4moe::cli
