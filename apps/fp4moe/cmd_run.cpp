// fp4moe run: one MoE layer forward on a built-in (or config.json) problem or
// a checkpoint's layer (--checkpoint DIR --layer L), on the GPU when there is
// one (checked against the CPU reference with --check), else the CPU
// reference (a preset at a reduced size). With --input/--output it replays
// captured activations instead (run_replay.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "run_layer.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/timing.hpp"

namespace fp4moe::cli {
namespace {

struct RunOptions {
  std::string model = "glm5-small";
  int64_t tokens = 16;
  uint64_t seed = 1;
  std::string format = "nvfp4";
  bool check = false;
  bool deterministic = false;
  bool cpu = false;
  int reps = 20;
  std::string checkpoint;  // with layer: a ModelOpt NVFP4 checkpoint's MoE layer instead of random weights
  int64_t layer = -1;
  std::string input, output;  // replay
  int ep = 0, tp = 0;          // the layer across this many local GPUs
  std::string dispatch = "allgather";
  int64_t capacity = -1;
  std::string activations = "bf16";
  bool fp8_rounds_nvfp4 = false;
};

}  // namespace

MoeConfig model_config(const std::string& m) {
  if (m.size() > 5 && m.substr(m.size() - 5) == ".json") return config_from_hf_json(m);
  return preset(m);
}

std::string describe_model(const MoeConfig& cfg) {
  return fmt::format("{}: H {} I {} E {} top-{} {}{}{}", cfg.name, cfg.hidden, cfg.intermediate, cfg.num_experts,
                     cfg.top_k, cfg.scoring == Scoring::sigmoid ? "sigmoid" : "softmax",
                     cfg.n_group > 1 ? fmt::format(" ({} groups, top {})", cfg.n_group, cfg.topk_group) : "",
                     cfg.shared_expert ? " + shared expert" : "");
}

namespace {

RunLayer random_layer(const MoeConfig& cfg, const std::string& format_name, uint64_t seed) {
  const Fp4Format format = parse_fp4_format(format_name);
  return RunLayer{cfg, random_moe_weights(cfg, format, seed + 1), fmt::format("{} (random, seed {})", to_string(format), seed + 1), {}};
}

RunLayer checkpoint_layer(const std::string& dir, int64_t layer) {
  MoeCheckpointLayer c = load_moe_layer(dir, layer);
  return RunLayer{std::move(c.config), std::move(c.weights), fmt::format("nvfp4, checkpoint {} layer {}", dir, layer),
                  std::move(c.notes)};
}

void print_notes(const RunLayer& l) {
  for (const std::string& n : l.notes) fmt::print("             {}\n", n);
}

struct Inputs {
  std::vector<uint16_t> x_bits;
  std::vector<float> x, logits;
};
Inputs random_inputs(const MoeConfig& cfg, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  Inputs in;
  in.x_bits.resize(size_t(T * cfg.hidden));
  in.x.resize(in.x_bits.size());
  for (size_t i = 0; i < in.x.size(); ++i) in.x_bits[i] = bf16_from_float(normal(rng)), in.x[i] = bf16_to_float(in.x_bits[i]);
  in.logits = gaussian_logits(T, cfg.num_experts, seed + 1);
  return in;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A preset too large for the CPU reference runs in its -small form.
MoeConfig cpu_sized(MoeConfig cfg, const std::string& why) {
  if (cfg.name.find("-small") == std::string::npos && cfg.hidden * cfg.intermediate * cfg.num_experts > (int64_t(1) << 28)) {
    const std::string small = cfg.name + "-small";
    try {
      cfg = preset(small);
    } catch (const Error&) {
      throw Error("no GPU (" + why + ") and " + cfg.name + " is too large for the CPU reference; try a -small preset");
    }
  }
  return cfg;
}

// The checkpoint's layer, or the preset with random weights (on the CPU
// reference reduced to its -small form when `why_cpu` is given).
RunLayer choose_layer(const RunOptions& o, const std::string* why_cpu = nullptr) {
  if (!o.checkpoint.empty()) return checkpoint_layer(o.checkpoint, o.layer);
  const MoeConfig cfg = model_config(o.model);
  return random_layer(why_cpu ? cpu_sized(cfg, *why_cpu) : cfg, o.format, o.seed);
}

void run_cpu(const RunOptions& o, const std::string& why) {
  auto t0 = std::chrono::steady_clock::now();
  const RunLayer layer = choose_layer(o, &why);
  const MoeConfig& cfg = layer.cfg;
  const MoeWeights& w = layer.weights;
  const double ms_w = ms_since(t0);
  fmt::print("fp4moe run: no GPU ({}): CPU reference{}\n", why, o.checkpoint.empty() ? " at a reduced size" : "");
  const Inputs in = random_inputs(cfg, o.tokens, o.seed);
  t0 = std::chrono::steady_clock::now();
  // (the GPU layer's refusal, here too: the reference would round NVFP4 weights as the opted-in fold does)
  FP4MOE_CHECK(o.activations != "fp8" || o.fp8_rounds_nvfp4 || w.experts.empty() || w.experts[0].gate.format != Fp4Format::nvfp4,
               "fp4moe run: fp8 activations with nvfp4 weights round each weight to e4m3: pass --fp8-rounds-nvfp4 to "
               "accept it");
  const Routing routing = route_reference(cfg, in.logits.data(), o.tokens, w.correction_bias);
  const std::vector<float> out =
      moe_forward_reference(cfg, w, in.x.data(), o.tokens, routing, parse_activation_format(o.activations));
  const double ms_f = ms_since(t0);
  double norm = 0;
  for (float v : out) norm += double(v) * v;
  fmt::print("  model      {}\n", describe_model(cfg));
  fmt::print("  weights    {}, {} in {:.1f} ms\n", layer.source, o.checkpoint.empty() ? "made" : "loaded", ms_w);
  print_notes(layer);
  fmt::print("  tokens     {}\n", o.tokens);
  fmt::print("  forward    {:.1f} ms (routing, permutation, expert MLPs in double{}, weighted sum)\n", ms_f,
             o.activations == "fp8" ? ", each GEMM's input rows on e4m3" : "");
  fmt::print("  output     [{}, {}], rms {:.4g}\n", o.tokens, cfg.hidden, std::sqrt(norm / double(out.size())));
}

void run_gpu(const RunOptions& o, const RunLayer& source, double ms_weights, const DeviceInfo& dev) {
  const MoeConfig& cfg = source.cfg;
  const MoeWeights& w = source.weights;
  const int64_t T = o.tokens;
  fmt::print("fp4moe run on {} (sm_{}, {} SMs)\n", dev.name, dev.cc, dev.sm_count);
  fmt::print("  model      {}\n", describe_model(cfg));
  fmt::print("  weights    {}, {} in {:.0f} ms\n", source.source, o.checkpoint.empty() ? "made" : "loaded", ms_weights);
  print_notes(source);
  LayerOptions lo;
  lo.max_tokens = T;
  lo.deterministic = o.deterministic;
  lo.activations = parse_activation_format(o.activations);
  lo.fp8_rounds_nvfp4 = o.fp8_rounds_nvfp4;
  auto t0 = std::chrono::steady_clock::now();
  MoeLayer layer(cfg, w, lo);
  fmt::print("  prepared   {:.2f} GB of weights on the GPU in {:.0f} ms; workspace {:.1f} MB\n",
             double(layer.weight_bytes()) / 1e9, ms_since(t0), double(layer.workspace_bytes()) / 1e6);
  fmt::print("  plan       {}", layer.describe(T));

  const Inputs in = random_inputs(cfg, T, o.seed);
  DeviceBuffer<uint16_t> dx(in.x_bits), dout(size_t(T * cfg.hidden));
  DeviceBuffer<float> dl(in.logits);
  dout.fill_bytes(0xFF);
  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  auto fwd = [&] {
    layer.forward(s, reinterpret_cast<const __nv_bfloat16*>(dx.get()), dl.get(), T,
                  reinterpret_cast<__nv_bfloat16*>(dout.get()));
  };
  const TimingStats t = time_on_stream(fwd, s, 3, o.reps);
  layer.check_status(s);

  // Bytes that must move: the active experts' weights and scales (+ the shared expert), activations in and out.
  std::vector<int32_t> ids(size_t(T * cfg.top_k));
  FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), layer.topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
  const std::set<int32_t> active(ids.begin(), ids.end());
  const double per_weight = fp4_bytes_per_weight(w.experts.at(0).gate.format);
  const double per_expert = 3.0 * double(cfg.hidden) * double(cfg.intermediate) * per_weight;
  const double shared = cfg.shared_expert ? 3.0 * double(cfg.hidden) * double(cfg.shared_intermediate) * per_weight : 0;
  const double bytes = double(active.size()) * per_expert + shared + 2.0 * 2.0 * double(T * cfg.hidden);
  fmt::print("  tokens     {} ({} experts active)\n", T, active.size());
  fmt::print("  forward    {:.4f} ms median of {} (min {:.4f}, max {:.4f}), {:.2f} TB/s of weights and activations\n",
             t.median_ms, t.reps, t.min_ms, t.max_ms, bytes / (t.median_ms * 1e-3) / 1e12);
  fmt::print("  finalize   {}\n", layer.finalize_mode() == FinalizeMode::split ? "split (deterministic)" : "fused");
  if (o.check) {
    const Routing routing = route_reference(cfg, in.logits.data(), T, w.correction_bias);
    std::vector<int32_t> gids(ids.size());
    std::vector<float> gw(ids.size());
    FP4MOE_CUDA_CHECK(cudaMemcpy(gw.data(), layer.topk_weights(), gw.size() * 4, cudaMemcpyDeviceToHost));
    const bool same_route = ids == routing.topk_ids && gw == routing.topk_weights;
    t0 = std::chrono::steady_clock::now();
    // (fp8: the reference quantizes the routed GEMMs' inputs as the layer does)
    const std::vector<float> ref = moe_forward_reference(cfg, w, in.x.data(), T, routing, lo.activations);
    const std::vector<uint16_t> got = dout.download();
    double num = 0, den = 0;
    int64_t nans = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const float g = bf16_to_float(got[i]);
      if (std::isnan(g)) ++nans;
      num += (double(g) - ref[i]) * (double(g) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    const double err = std::sqrt(num / den);
    fmt::print("  check      routing {} the CPU reference's; output rel. Frobenius error {:.3e}{} (reference {:.0f} ms)\n",
               same_route ? "bitwise equal to" : "DIFFERS from", err, nans ? fmt::format(", {} unwritten", nans) : "",
               ms_since(t0));
    // fp8: each FP8 wgmma keeps fewer bits than fp32 (docs/fp8.md): up to about 1e-2 per GEMM with outlier channels
    const double tolerance = lo.activations == ActivationFormat::fp8 ? 3e-2 : 1e-2;
    FP4MOE_CHECK(same_route && nans == 0 && err < tolerance, "--check failed: routing " << (same_route ? "ok" : "differs")
                                                                                     << ", error " << err << ", " << nans
                                                                                     << " unwritten");
  }
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
}

// Replay: the layer at its real size (the input's H must match it), on the GPU or the CPU reference.
void run_replay(const RunOptions& o, const std::vector<DeviceInfo>& devs, const std::string& why) {
  FP4MOE_CHECK(o.activations == "bf16", "--activations " << o.activations
                                                         << " with --input: a replay runs the layer with bf16 activations, "
                                                            "as the captured module does");
  RunLayer layer = choose_layer(o);
  if (o.checkpoint.empty()) {
    // Random weights have no router: one is drawn (bf16, std 1/sqrt(H), so
    // logits of unit-variance inputs are about unit variance) for inputs
    // without router_logits.
    std::mt19937_64 rng(o.seed + 2);
    std::normal_distribution<float> normal(0.f, 1.f / std::sqrt(float(layer.cfg.hidden)));
    layer.weights.router_weight.resize(size_t(layer.cfg.num_experts * layer.cfg.hidden));
    for (uint16_t& v : layer.weights.router_weight) v = bf16_from_float(normal(rng));
  }
  const ReplayRequest r{o.input, o.output, o.check, o.deterministic};
  if (devs.empty()) return replay_on_cpu(layer, r, why);
  replay_on_gpu(layer, r, devs[0]);
}

void run(const RunOptions& o) {
  FP4MOE_CHECK(o.tokens >= 1, "--tokens " << o.tokens << " must be at least 1");
  FP4MOE_CHECK(o.checkpoint.empty() == (o.layer < 0), (o.checkpoint.empty() ? "--layer needs --checkpoint DIR"
                                                                              : "--checkpoint needs --layer L (an MoE layer's index)"));
  FP4MOE_CHECK(o.input.empty() == o.output.empty(), (o.input.empty() ? "--output needs --input IN.safetensors"
                                                                     : "--input needs --output OUT.safetensors"));
  std::string why;
  const auto devs = o.cpu ? std::vector<DeviceInfo>{} : list_devices(&why);
  if (o.cpu) why = "--cpu given";
  if (!o.input.empty()) return run_replay(o, devs, why);
  FP4MOE_CHECK(o.dispatch == "allgather" || o.ep, "--dispatch " << o.dispatch << " needs --ep");
  FP4MOE_CHECK(o.capacity < 0 || o.dispatch == "alltoall", "--capacity needs --dispatch alltoall");
  if (o.ep || o.tp) {
    FP4MOE_CHECK(!(o.ep && o.tp), "--ep and --tp are one or the other");
    FP4MOE_CHECK(!devs.empty(), "--" << (o.ep ? "ep" : "tp") << " needs GPUs; " << why);
    ParallelRequest r;
    r.mode = o.ep ? "ep" : "tp";
    r.dispatch = o.dispatch;
    r.capacity = o.capacity;
    r.ranks = o.ep ? o.ep : o.tp;
    r.tokens = {o.tokens};
    r.seed = o.seed;
    r.reps = o.reps;
    r.check = o.check;
    r.layer.activations = parse_activation_format(o.activations);
    r.layer.fp8_rounds_nvfp4 = o.fp8_rounds_nvfp4;
    return run_parallel(choose_layer(o), r, devs);
  }
  if (devs.empty()) return run_cpu(o, why);
  const auto t0 = std::chrono::steady_clock::now();
  const RunLayer layer = choose_layer(o);
  run_gpu(o, layer, ms_since(t0), devs[0]);
}

}  // namespace

void register_run(CLI::App& app) {
  static RunOptions o;
  auto* cmd = app.add_subcommand("run", "Run one MoE layer forward (GPU, or the CPU reference without one); "
                                        "replay captured activations with --input/--output");
  auto* model = cmd->add_option("--model", o.model, "Preset (glm5, deepseek-v3, mixtral, each also -small) or a config.json")
                    ->capture_default_str();
  auto* checkpoint = cmd->add_option("--checkpoint", o.checkpoint, "A ModelOpt NVFP4 checkpoint directory (with --layer)");
  checkpoint->excludes(model);
  cmd->add_option("--layer", o.layer, "The checkpoint's MoE layer to run")->check(CLI::NonNegativeNumber);
  cmd->add_option("--input", o.input, "Replay: safetensors with hidden_states [T, H] (bf16/fp32) and optionally router_logits [T, E] (fp32)");
  cmd->add_option("--output", o.output, "Replay: safetensors to write output, topk_ids, topk_weights (and the reference with --check)");
  cmd->add_option("--tokens", o.tokens, "Number of tokens")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the random weights and inputs")->capture_default_str();
  cmd->add_option("--format", o.format, "Weight format: nvfp4 or mxfp4")->capture_default_str();
  cmd->add_option("--reps", o.reps, "Timed repetitions (GPU)")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_flag("--check", o.check, "Compare with the CPU reference (routing bitwise, output within 1e-2); "
                                    "with --output also writes the reference and the error");
  cmd->add_flag("--deterministic", o.deterministic, "Split finalize: bitwise identical run to run");
  cmd->add_option("--activations", o.activations, "bf16, or fp8 (W4A8: e4m3 activations, sm_90; NVFP4 weights with --fp8-rounds-nvfp4)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_flag("--fp8-rounds-nvfp4", o.fp8_rounds_nvfp4, "fp8 activations with NVFP4 weights: accept each weight rounded to e4m3 (docs/fp8.md, NVFP4)");
  cmd->add_flag("--cpu", o.cpu, "Run the CPU reference even when a GPU is present");
  cmd->add_option("--ep", o.ep, "Expert parallelism over this many local GPUs, one thread each; "
                                "--tokens per rank; --check compares every rank with the single-GPU layer")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--tp", o.tp, "Tensor parallelism over this many local GPUs (as --ep)")->check(CLI::Range(1, 64));
  cmd->add_option("--dispatch", o.dispatch, "With --ep: allgather, or alltoall (each token only to the ranks of its experts)")
      ->check(CLI::IsMember({"allgather", "alltoall"}))
      ->capture_default_str();
  cmd->add_option("--capacity", o.capacity, "With --dispatch alltoall: rows per peer (default: --tokens, never drops a pair)")
      ->check(CLI::PositiveNumber);
  cmd->callback([] { run(o); });
}

}  // namespace fp4moe::cli
