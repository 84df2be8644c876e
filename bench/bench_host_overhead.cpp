// bench_host_overhead: the CPU time of one eager MoeLayer::forward, per token
// count. Three figures: the first forward of a token count (its tiles chosen:
// the tune cache's lookup or the planner's ranking), then the steady state with
// every launch prepared and checked but not handed to the driver (fp4moe's own
// host work, kernels::skip_launches_for_host_timing), and the steady state
// with the launches (what the caller's thread spends, the driver included).
// Median of many calls, std::chrono on the calling thread.
#include <algorithm>
#include <chrono>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "runtime/random_fill.hpp"
#include "common/median.hpp"
#include "fp4moe/device.hpp"
#include "bench_device.hpp"
#include "fp4moe/layer.hpp"
#include "kernels/dependent_launch.hpp"
#include "measure/ceilings.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace fp4moe;
  CLI::App app{"Host (CPU) time of one eager MoeLayer::forward by token count"};
  std::string model = "glm5";
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 1024, 2048};
  int calls = 2000;
  bool tuned = false;
  app.add_option("--model", model, "Preset")->capture_default_str();
  app.add_option("--tokens", tokens, "Token counts")->delimiter(',');
  app.add_option("--calls", calls, "Timed calls per figure")->check(CLI::Range(10, 1000000))->capture_default_str();
  app.add_flag("--tune-cache", tuned, "Let the layer read the tune cache ($FP4MOE_CACHE); default: the planner's tiles");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!bench::bench_device("bench_host_overhead")) return 0;
    const MoeConfig cfg = preset(model);
    int64_t max_t = 1;
    for (int64_t t : tokens) max_t = std::max(max_t, t);
    LayerOptions o;
    o.max_tokens = max_t;
    o.use_tune_cache = tuned;
    const auto t_build = Clock::now();
    MoeLayer layer(cfg, random_moe_weights(cfg, Fp4Format::nvfp4, 1), o);
    fmt::print("{}: layer built in {:.1f} s; {} timed calls per figure\n", cfg.name, us_since(t_build) * 1e-6, calls);
    DeviceBuffer<__nv_bfloat16> x(size_t(max_t * cfg.hidden)), out(size_t(max_t * cfg.hidden));
    DeviceBuffer<float> logits(size_t(max_t * cfg.num_experts));
    fill_random_bf16(x.get(), int64_t(x.size()), 3, 1.0f, nullptr);
    {  // logits: random, finite
      std::vector<float> l(logits.size());
      for (size_t i = 0; i < l.size(); ++i) l[i] = float(int(i * 2654435761u % 2001) - 1000) / 250.0f;
      logits.upload(l);
    }
    cudaStream_t s;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
    auto forward = [&](int64_t T) { layer.forward(s, x.get(), logits.get(), T, out.get()); };

    fmt::print("\n| T | first forward, µs | steady, launches skipped (fp4moe's host work), µs | steady with launches, µs |\n");
    fmt::print("|---|---|---|---|\n");
    for (const int64_t T : tokens) {
      auto t0 = Clock::now();
      forward(T);
      const double first = us_since(t0);
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
      std::vector<double> skipped, launched;
      kernels::skip_launches_for_host_timing(true);
      for (int i = 0; i < calls; ++i) {
        t0 = Clock::now();
        forward(T);
        skipped.push_back(us_since(t0));
      }
      kernels::skip_launches_for_host_timing(false);
      for (int i = 0; i < calls / 10; ++i) {
        t0 = Clock::now();
        forward(T);
        launched.push_back(us_since(t0));
        if (i % 16 == 15) FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));  // the launch queue never fills
      }
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
      layer.check_status(s);
      std::sort(skipped.begin(), skipped.end());
      std::sort(launched.begin(), launched.end());
      fmt::print("| {} | {:.1f} | {:.2f} (min {:.2f}) | {:.1f} (min {:.1f}) |\n", T, first, detail::median_of_sorted(skipped),
                 skipped.front(), detail::median_of_sorted(launched), launched.front());
    }
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const Error& e) {
    fmt::print(stderr, "bench_host_overhead: {}\n", e.what());
    return 2;
  }
  return 0;
}
