#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe::cli {
namespace {

struct RunOptions {
  std::string model = "glm5-small";
  int64_t tokens = 16;
  uint64_t seed = 1;
  std::string format = "nvfp4";
};

Fp4Format parse_format(const std::string& s) {
  if (s == "nvfp4") return Fp4Format::nvfp4;
  if (s == "mxfp4") return Fp4Format::mxfp4;
  throw Error("--format '" + s + "' is not one of nvfp4, mxfp4");
}

void run_reference(const RunOptions& o) {
  const MoeConfig cfg = preset(o.model);
  FP4MOE_CHECK(o.tokens >= 1, "--tokens " << o.tokens << " must be at least 1");
  const Fp4Format format = parse_format(o.format);

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(o.tokens * cfg.hidden));
  for (float& v : x) v = normal(rng);
  std::vector<float> logits(static_cast<size_t>(o.tokens * cfg.num_experts));
  for (float& v : logits) v = normal(rng);

  const auto t0 = std::chrono::steady_clock::now();
  const MoeWeights w = random_moe_weights(cfg, format, o.seed + 1);
  const auto t1 = std::chrono::steady_clock::now();
  const Routing routing = route_reference(cfg, logits.data(), o.tokens, w.correction_bias);
  const std::vector<float> out = moe_forward_reference(cfg, w, x.data(), o.tokens, routing);
  const auto t2 = std::chrono::steady_clock::now();

  double norm = 0;
  for (float v : out) norm += double(v) * v;
  const double ms_w = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double ms_f = std::chrono::duration<double, std::milli>(t2 - t1).count();
  fmt::print("fp4moe run: CPU reference (no GPU path yet)\n");
  fmt::print("  model      {}: H {} I {} E {} top-{} {}{}\n", cfg.name, cfg.hidden, cfg.intermediate,
             cfg.num_experts, cfg.top_k, cfg.scoring == Scoring::sigmoid ? "sigmoid" : "softmax",
             cfg.shared_expert ? " + shared expert" : "");
  fmt::print("  weights    {} (random, seed {}), made in {:.1f} ms\n", to_string(format), o.seed + 1, ms_w);
  fmt::print("  tokens     {}\n", o.tokens);
  fmt::print("  forward    {:.1f} ms (routing, permutation, expert MLPs in double, weighted sum)\n", ms_f);
  fmt::print("  output     [{}, {}], rms {:.4g}\n", o.tokens, cfg.hidden, std::sqrt(norm / out.size()));
}

}  // namespace

void register_run(CLI::App& app) {
  static RunOptions o;
  auto* cmd = app.add_subcommand("run", "Run one MoE layer forward on a built-in problem");
  cmd->add_option("--model", o.model, "Preset: glm5, deepseek-v3, mixtral (each also -small)")->capture_default_str();
  cmd->add_option("--tokens", o.tokens, "Number of tokens")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the random weights and inputs")->capture_default_str();
  cmd->add_option("--format", o.format, "Weight format: nvfp4 or mxfp4")->capture_default_str();
  cmd->callback([] { run_reference(o); });
}

}  // namespace fp4moe::cli
