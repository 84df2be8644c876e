// fp4moe tune: measure the best tile per GEMM and token bucket on this GPU and
// keep it in the tune cache, which every MoeLayer on this GPU then uses.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "run_layer.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "plan/tune_cache.hpp"
#include "progress.hpp"

namespace fp4moe::cli {
namespace {

struct TuneOptions {
  std::string model = "glm5";
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 1024, 2048};
  std::string cache;
  std::string format = "auto";  // the model's checkpoint format (as fp4moe bench's), or nvfp4 / mxfp4
  bool deterministic = false;
  std::string activations = "bf16";
  bool fp8_rounds_nvfp4 = false;
};

void run_tune(const TuneOptions& o) {
  std::string why;
  const auto devs = list_devices(&why);
  FP4MOE_CHECK(!devs.empty(), "fp4moe tune measures kernels and needs a CUDA GPU; none found (" << why << ")");
  const MoeConfig cfg = model_config(o.model);
  for (int64_t t : o.tokens) FP4MOE_CHECK(t >= 1, "--tokens " << t << " must be at least 1");
  fmt::print("fp4moe tune on {} (sm_{}): {}, {} weights, {} activations, token counts", devs[0].name, devs[0].cc, cfg.name,
             o.format == "auto" ? to_string(checkpoint_format(cfg)) : o.format, o.activations);
  for (int64_t t : o.tokens) fmt::print(" {}", t);
  fmt::print("\n");
  const Fp4Format format = o.format == "auto" ? checkpoint_format(cfg) : parse_fp4_format(o.format);
  const MoeWeights w = random_moe_weights(cfg, format, 2);
  LayerOptions lo;
  lo.max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  lo.tune_cache = o.cache;
  lo.deterministic = o.deterministic;
  lo.activations = parse_activation_format(o.activations);
  lo.fp8_rounds_nvfp4 = o.fp8_rounds_nvfp4;
  MoeLayer layer(cfg, w, lo);
  Progress bar("tune");
  const auto rows = layer.tune(o.tokens, [&](int d, int n, const std::string& what) { bar.update(d, n, what); });
  fmt::print("\n{:>7} {:>6} {:<14} {:<26} {:>9} {:<26} {:>9} {:>8}\n", "bucket", "tokens", "GEMM", "default tile", "ms",
             "tuned tile", "ms", "speedup");
  for (const auto& r : rows)
    fmt::print("{:>7} {:>6} {:<14} {:<26} {:>9.4f} {:<26} {:>9.4f} {:>7.2f}x\n", r.bucket, r.tokens, r.gemm,
               r.default_tile, r.default_ms, r.tuned_tile, r.tuned_ms, r.default_ms / r.tuned_ms);
  fmt::print("saved to {}\n", plan::TuneCache::default_path(o.cache));
}

}  // namespace

void register_tune(CLI::App& app) {
  static TuneOptions o;
  auto* cmd = app.add_subcommand("tune", "Measure the fastest tile per GEMM and token bucket; keep it in the tune cache");
  cmd->add_option("--model", o.model, "Preset or config.json")->capture_default_str();
  cmd->add_option("--tokens", o.tokens, "Token counts (comma separated); each stands for its per-expert bucket")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--cache", o.cache, "Tune cache file (default: $FP4MOE_CACHE, else ~/.cache/fp4moe/tune.json)");
  cmd->add_option("--format", o.format, "The random experts' FP4 format: auto (the model's checkpoint's), nvfp4 or mxfp4")
      ->check(CLI::IsMember({"auto", "nvfp4", "mxfp4"}))
      ->capture_default_str();
  cmd->add_flag("--deterministic", o.deterministic, "Tune the split-finalize layer");
  cmd->add_option("--activations", o.activations, "bf16, or fp8 (W4A8; NVFP4 weights with --fp8-rounds-nvfp4): tunes that layer's GEMMs")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_flag("--fp8-rounds-nvfp4", o.fp8_rounds_nvfp4, "fp8 activations with NVFP4 weights: accept each weight rounded to e4m3 (docs/fp8.md, NVFP4)");
  cmd->callback([] { run_tune(o); });
}

}  // namespace fp4moe::cli
