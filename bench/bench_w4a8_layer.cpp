// W4A8 against W4A16 for the whole layer: two MoeLayers on the same FP4
// weights (MXFP4, or NVFP4 with the rounded fold: --format), one with bf16
// activations and one with e4m3 (LayerOptions::activations), their forwards timed interleaved at steady state (rounds of A
// then B, CUDA-graph replays after back-to-back warm-up) on the same hidden
// states and router logits (bench/layer_ab.hpp). Per token count: the median
// of each side, the median of the rounds' ratios, each side's stage times
// (MoeLayer::profile), and how far the e4m3 output is from the bf16 one.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "layer_ab.hpp"

using namespace fp4moe;

int main(int argc, char** argv) {
  CLI::App app{"W4A8 (e4m3 activations) against W4A16: the whole MoE layer, interleaved"};
  bench::LayerAbRun run;
  run.models = {"glm5", "gpt-oss-120b"};
  run.tokens = {1, 2, 4, 8, 32, 128, 512, 1024, 2048, 4096, 8192};
  run.out_path = "bench_w4a8_layer.json";
  std::string format = "mxfp4";
  app.add_option("--models", run.models, "Model presets (their experts in --format)")->delimiter(',');
  app.add_option("--format", format, "The experts' FP4 format: mxfp4 (exact fold), or nvfp4 (W4A8 rounds each weight: "
                                     "LayerOptions::fp8_rounds_nvfp4)")
      ->check(CLI::IsMember({"mxfp4", "nvfp4"}))
      ->capture_default_str();
  bench::add_layer_ab_options(app, run);
  CLI11_PARSE(app, argc, argv);
  const Fp4Format weight_format = format == "nvfp4" ? Fp4Format::nvfp4 : Fp4Format::mxfp4;
  run.format = [&](const MoeConfig&) { return weight_format; };
  run.format_name = format;
  bench::LayerAb ab{"w4a16", "w4a8", [](LayerOptions& a, LayerOptions& b, const MoeConfig&, Fp4Format f) {
                      // the shared expert runs bf16 apart under fp8 activations; A too, so that only the activations differ
                      a.shared_expert_in_routed_gemms = false;
                      b = a;
                      b.activations = ActivationFormat::fp8;
                      b.fp8_rounds_nvfp4 = f == Fp4Format::nvfp4;
                    }};
  return bench::run_layer_ab("bench_w4a8_layer", run, ab);
}
