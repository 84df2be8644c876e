// One layer option against the defaults, the whole MoE layer interleaved
// (bench/layer_ab.hpp): A has LayerOptions' defaults plus --with, B also
// --change. The experts are in the model's checkpoint format
// (checkpoint_format: MXFP4 for gpt-oss, NVFP4 otherwise). The options
// --change and --with name: bench::kLayerOptionNames (layer_ab.hpp).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "layer_ab.hpp"

using namespace fp4moe;

int main(int argc, char** argv) {
  CLI::App app{"A layer option against the defaults: the whole MoE layer, interleaved"};
  bench::LayerAbRun run;
  run.models = {"glm5", "gpt-oss-120b"};
  run.tokens = {1, 2, 4, 8, 64, 512, 2048};
  run.out_path = "bench_layer_ab.json";
  std::string change;
  std::vector<std::string> with;
  app.add_option("--change", change, "The option B has and A has not")->required()->check(CLI::IsMember(bench::kLayerOptionNames));
  app.add_option("--with", with, "Options both sides have (comma separated)")->delimiter(',')->check(CLI::IsMember(bench::kLayerOptionNames));
  app.add_option("--models", run.models, "Model presets")->delimiter(',');
  bench::add_layer_ab_options(app, run);
  CLI11_PARSE(app, argc, argv);
  for (const std::string& w : with)
    if (w == change) {
      fmt::print(stderr, "bench_layer_ab: --with {} is the option --change compares; give it once\n", w);
      return 2;
    }
  run.format = [](const MoeConfig& cfg) { return checkpoint_format(cfg); };
  run.format_name = "the model's checkpoint's (checkpoint_format)";
  bench::LayerAb ab{"default", change, [&](LayerOptions& a, LayerOptions& b, const MoeConfig&, Fp4Format) {
                      for (const std::string& w : with) bench::set_layer_option(a, w);
                      b = a;
                      bench::set_layer_option(b, change);
                    }};
  return bench::run_layer_ab("bench_layer_ab", run, ab);
}
