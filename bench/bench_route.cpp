// bench_route: the router kernel's time by token count on the model's router
// settings, at the clock a busy GPU runs (every replay follows 300 us of busy
// SMs; the SM clock is read beside each row): a CUDA graph of 64 launches back
// to back, replayed, divided by 64 (dependent launch overlaps each launch with
// the one before, as in the layer), median of 50 replays; the same for an empty
// kernel launched the same way (the floor under any kernel); and a single
// launch between two events (its launch latency included), median of 200.
#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "bench/clock_probe.hpp"
#include "common/median.hpp"
#include "fp4moe/device.hpp"
#include "bench_device.hpp"
#include "fp4moe/model.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/captured_graph.hpp"
#include "common/cuda_check.hpp"
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
    if (!bench::bench_device("bench_route")) return 0;
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
      kernels::RouteArgs a = kernels::route_args(c, db.get(), T, ids.get(), w.get(), status.get());
      a.logits = dl.get();
      return a;
    };
    fmt::print("{}: E {}, top-{}, {}; µs per launch\n\n", c.name, c.num_experts, c.top_k,
               c.scoring == Scoring::sigmoid ? "sigmoid + bias" : "softmax");
    // Median µs per launch of `launches` replayed from a graph, each replay after busy SMs.
    auto per_launch_us = [&](const std::function<void()>& one) {
      const std::vector<std::function<void()>> launches(64, one);
      one();
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
      const CapturedGraph graph(s, [&] {
        for (const auto& f : launches) f();
      });
      cudaEvent_t ev[2];
      for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
      std::vector<double> us;
      for (int r = 0; r < 55; ++r) {
        bench::keep_sms_busy(300, s);
        FP4MOE_CUDA_CHECK(cudaEventRecord(ev[0], s));
        graph.launch();
        FP4MOE_CUDA_CHECK(cudaEventRecord(ev[1], s));
        FP4MOE_CUDA_CHECK(cudaEventSynchronize(ev[1]));
        float ms = 0;
        FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        if (r >= 5) us.push_back(ms * 1e3 / 64);
      }
      for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventDestroy(e));
      std::sort(us.begin(), us.end());
      return detail::median_of_sorted(us);
    };
    bench::keep_sms_busy(20000, s);  // out of idle clocks first
    fmt::print("| T | router, back to back (graph) | empty kernel, same launch | router minus empty | single router launch (events) | SM MHz |\n");
    fmt::print("|---|---|---|---|---|---|\n");
    for (const int64_t T : tokens) {
      const kernels::RouteArgs a = args(T);
      const double route = per_launch_us([&] { kernels::launch_route(a, s); });
      const double empty = per_launch_us([&] { bench::launch_empty_dependent(s); });
      std::vector<double> singles;
      for (int r = 0; r < 200; ++r) {
        if (r % 20 == 0) bench::keep_sms_busy(300, s);
        singles.push_back(time_on_stream([&] { kernels::launch_route(a, s); }, s, 0, 1).median_ms * 1e3);
      }
      std::sort(singles.begin(), singles.end());
      bench::keep_sms_busy(300, s);
      const double mhz = bench::sm_clock_mhz(s);
      fmt::print("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.0f} |\n", T, route, empty, route - empty,
                 detail::median_of_sorted(singles), mhz);
    }
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const Error& e) {
    fmt::print(stderr, "bench_route: {}\n", e.what());
    return 2;
  }
  return 0;
}
