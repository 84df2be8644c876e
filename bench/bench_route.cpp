// bench_route: the router kernel's time by token count on the model's router
// settings: a CUDA graph of 64 launches back to back, replayed, divided by 64
// (dependent launch overlaps each launch with the one before, as in the
// layer), median of 50 replays; and a single launch between two events (its
// launch latency included), median of 200.
#include <functional>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "fp4moe/device.hpp"
#include "fp4moe/model.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device_buffer.hpp"

int main(int argc, char** argv) {
  using namespace fp4moe;
  CLI::App app{"Router kernel time by token count"};
  std::string model = "glm5";
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  app.add_option("--model", model, "Preset")->capture_default_str();
  app.add_option("--tokens", tokens, "Token counts")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    std::string why;
    if (list_devices(&why).empty()) {
      fmt::print("bench_route: no CUDA device ({}): nothing to measure\n", why);
      return 0;
    }
    const MoeConfig c = preset(model);
    int64_t max_t = 1;
    for (int64_t t : tokens) max_t = std::max(max_t, t);
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.f, 2.f);
    std::vector<float> logits(size_t(max_t * c.num_experts)), bias(size_t(c.num_experts));
    for (float& l : logits) l = d(rng);
    for (float& b : bias) b = d(rng) * 0.05f;
    DeviceBuffer<float> dl(logits), db(bias), w(size_t(max_t * c.top_k));
    DeviceBuffer<int32_t> ids(size_t(max_t * c.top_k)), status(1);
    status.fill_bytes(0);
    cudaStream_t s;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
    auto args = [&](int64_t T) {
      kernels::RouteArgs a;
      a.logits = dl.get();
      a.bias = c.use_correction_bias ? db.get() : nullptr;
      a.tokens = T;
      a.experts = int(c.num_experts);
      a.top_k = int(c.top_k);
      a.sigmoid = c.scoring == Scoring::sigmoid;
      a.renormalize = c.renormalize;
      a.n_group = int(c.n_group);
      a.topk_group = int(c.topk_group);
      a.routed_scaling_factor = c.routed_scaling_factor;
      a.topk_ids = ids.get();
      a.topk_weights = w.get();
      a.status = status.get();
      return a;
    };
    fmt::print("{}: E {}, top-{}, {}; µs per launch\n\n", c.name, c.num_experts, c.top_k,
               c.scoring == Scoring::sigmoid ? "sigmoid + bias" : "softmax");
    fmt::print("| T | back to back (graph) | single launch (events) |\n");
    fmt::print("|---|---|---|\n");
    for (const int64_t T : tokens) {
      const kernels::RouteArgs a = args(T);
      const std::vector<std::function<void()>> launches(64, [&] { kernels::launch_route(a, s); });
      const double graph = time_graph_sequence(launches, s, 5, 50).median_ms * 1e3;
      const double single = time_on_stream([&] { kernels::launch_route(a, s); }, s, 20, 200).median_ms * 1e3;
      fmt::print("| {} | {:.2f} | {:.2f} |\n", T, graph, single);
    }
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const Error& e) {
    fmt::print(stderr, "bench_route: {}\n", e.what());
    return 2;
  }
  return 0;
}
