// A forward's timeline: every kernel of the layer's CUDA-graph replay, where
// it starts and how long it runs, from CUPTI's records (kernel_trace.hpp).
// Per model and token count, medians over the replays of:
//   launches         kernels per forward
//   ramp             graph launch (host) to the first kernel's start, and to
//                    the first grouped GEMM's start (a dependent launch may
//                    start it early: it streams weights from then where its
//                    expert offsets were ready at launch, else from the end
//                    of the kernel before it)
//   span             first kernel's start to the last one's end
//   outside GEMMs    the span less the time some grouped GEMM runs
// each measured twice: replays one at a time (a synchronisation before each
// launch, as a decode step that waits for its input), and back to back (the
// next replay queued behind the last, as a busy server runs them, where the
// gap between forwards replaces the launch). Beside them the forward's time
// with no tracer attached (CUDA events, steady state), which shows what the
// tracer itself costs. Options: --with (bench::kLayerOptionNames).
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_device.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "io/atomic_file.hpp"
#include "kernel_trace.hpp"
#include "layer_ab.hpp"
#include "measure/forward_timeline.hpp"
#include "measure/steady_timing.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"

using namespace fp4moe;
using json = nlohmann::json;

namespace {

// "fp4moe::kernels::route_kernel<8>(fp4moe::kernels::RouteArgs)" -> "route_kernel<8>";
// a template argument list longer than 24 characters is elided.
std::string short_name(const std::string& full) {
  std::string s = full.substr(0, full.find('('));
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  const size_t lt = s.find('<');
  const std::string base = s.substr(0, lt);
  const size_t colon = base.rfind("::");
  std::string name = colon == std::string::npos ? base : base.substr(colon + 2);
  if (lt != std::string::npos) name += s.size() - lt <= 24 ? s.substr(lt) : "<...>";
  return name;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each way of launching: every forward's figures and each kernel position's start and length.
struct Figures {
  std::vector<ForwardFigures> forwards;
  std::vector<std::vector<double>> starts, durations;  // per kernel position, us from the forward's first start

  void add(const ForwardSpans& f, const ForwardSpans* previous) {
    forwards.push_back(forward_figures(f, previous));
    const auto& k = f.kernels;
    starts.resize(k.size());
    durations.resize(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      starts[i].push_back(double(k[i].start - k.front().start) / 1e3);
      durations[i].push_back(double(k[i].end - k[i].start) / 1e3);
    }
  }
  // the median of one figure over the forwards that have it (-1: none has)
  double median_of(double ForwardFigures::*field) const {
    std::vector<double> v;
    for (const ForwardFigures& f : forwards)
      if (f.*field >= 0) v.push_back(f.*field);
    return v.empty() ? -1 : median(v);
  }
  json summary() const {
    return {{"span_us", median_of(&ForwardFigures::span)},
            {"outside_gemms_us", median_of(&ForwardFigures::outside_gemms)},
            {"first_kernel_to_first_gemm_us", median_of(&ForwardFigures::first_gemm)},
            {"launch_to_first_kernel_us", median_of(&ForwardFigures::launch_to_first_kernel)},
            {"launch_to_first_gemm_us", median_of(&ForwardFigures::launch_to_first_gemm)},
            {"gap_after_previous_forward_us", median_of(&ForwardFigures::gap)}};
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A forward's timeline: each kernel's start and length in the layer's graph replay (CUPTI)"};
  std::vector<std::string> models = {"glm5", "gpt-oss-120b"}, with;
  std::vector<int64_t> tokens = {1, 2, 4, 8};
  std::string out_path = "bench_forward_timeline.json", activations = "bf16";
  double warm_seconds = 1.0;
  int reps = 50;
  bool tune_cache = false;
  app.add_option("--models", models, "Model presets")->delimiter(',');
  app.add_option("--tokens", tokens, "Token counts T")->delimiter(',')->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  app.add_option("--with", with, "Layer options to turn on (comma separated)")->delimiter(',')
      ->check(CLI::IsMember(bench::kLayerOptionNames));
  app.add_option("--activations", activations, "bf16 or fp8 (MXFP4 models; NVFP4 ones round their weights to e4m3)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--warm-seconds", warm_seconds, "Back-to-back replays before each measurement")->check(CLI::Range(0.0, 30.0));
  app.add_option("--reps", reps, "Forwards traced per way of launching")->check(CLI::Range(3, 10000));
  app.add_flag("--tune-cache", tune_cache, "Read the tune cache ($FP4MOE_CACHE); default: the planner's tiles");
  app.add_option("--out", out_path, "JSON report");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& m : models) (void)preset(m);  // a bad name is refused before the device is asked
    const auto dev = bench::bench_device("bench_forward_timeline");
    if (!dev) return 0;
    const int64_t max_t = *std::max_element(tokens.begin(), tokens.end());
    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&stream));
    json report = {{"device", dev->name}, {"reps", reps}, {"warm_seconds", warm_seconds}, {"with", with},
                   {"activations", activations}, {"tune_cache", tune_cache}};
    json cases = json::array();
    for (const std::string& model : models) {
      const MoeConfig cfg = preset(model);
      const Fp4Format format = checkpoint_format(cfg);
      LayerOptions o;
      o.max_tokens = max_t;
      o.use_tune_cache = tune_cache;
      o.activations = parse_activation_format(activations);
      o.fp8_rounds_nvfp4 = o.activations == ActivationFormat::fp8 && format == Fp4Format::nvfp4;
      for (const std::string& w : with) bench::set_layer_option(o, w);
      MoeLayer layer(cfg, random_moe_weights(cfg, format, 3), o);
      DeviceBuffer<__nv_bfloat16> x(size_t(max_t * cfg.hidden)), y(size_t(max_t * cfg.hidden));
      DeviceBuffer<float> logits(size_t(max_t * cfg.num_experts));
      for (const int64_t T : tokens) {
        fill_random_bf16(x.get(), T * cfg.hidden, 40 + uint64_t(T), 1.f, stream);
        logits.upload(gaussian_logits(T, cfg.num_experts, 50 + uint64_t(T)));
        const auto fwd = [&] { layer.forward(stream, x.get(), logits.get(), T, y.get()); };
        fwd();
        layer.check_status(stream);
        const double untraced_us = time_graph_steady(fwd, stream, warm_seconds, reps, 0, 0).steady.median_ms * 1e3;
        Figures one, queued;
        std::vector<KernelSpan> layout;  // one forward's kernels, for the table's names
        size_t dropped = 0;
        int one_launch_each = 0;  // back-to-back forwards whose kernels share one correlation id
        {
          // tracing on before the graph is made: CUPTI sees a graph's kernels from its instantiation
          bench::KernelTrace trace;
          const CapturedGraph graph(stream, fwd);
          const auto t0 = std::chrono::steady_clock::now();
          while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < warm_seconds) {
            for (int i = 0; i < 16; ++i) graph.launch();
            FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
            (void)trace.take();
          }
          for (int r = 0; r < reps; ++r) {  // one at a time
            ForwardSpans f;
            f.launched = bench::KernelTrace::now();
            graph.launch();
            FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
            f.kernels = trace.take();
            FP4MOE_CHECK(!f.kernels.empty(), model << " T=" << T << ": the tracer saw no kernel of a forward");
            FP4MOE_CHECK(layout.empty() || f.kernels.size() == layout.size(),
                         model << " T=" << T << ": a forward ran " << f.kernels.size() << " kernels, another "
                               << layout.size());
            if (layout.empty()) layout = f.kernels;
            one.add(f, nullptr);
          }
          for (int r = 0; r < reps; ++r) graph.launch();  // back to back
          FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
          const std::vector<KernelSpan> all = trace.take();
          const std::vector<ForwardSpans> fs = split_forwards(all, layout.size());
          FP4MOE_CHECK(fs.size() == size_t(reps), model << " T=" << T << ": " << all.size() << " kernels traced for "
                                                         << reps << " forwards of " << layout.size());
          for (size_t r = 0; r < fs.size(); ++r) queued.add(fs[r], r ? &fs[r - 1] : nullptr);
          // the forwards were told apart by count in start order; a graph launch's kernels share its
          // correlation id, which confirms it where CUPTI gives one
          for (const ForwardSpans& f : fs)
            one_launch_each += std::all_of(f.kernels.begin(), f.kernels.end(), [&](const KernelSpan& k) {
              return k.correlation == f.kernels.front().correlation;
            });
          dropped = trace.dropped();
        }
        layer.check_status(stream);
        FP4MOE_CHECK(dropped == 0, "bench_forward_timeline: CUPTI dropped " << dropped << " records");
        const json s1 = one.summary(), s2 = queued.summary();
        fmt::print("{} T={}: {} launches; untraced {:.1f} us. One at a time: launch -> first kernel {:.1f} us, "
                   "-> first GEMM {:.1f} us, span {:.1f} us, outside GEMMs {:.1f} us. Back to back: gap {:.1f} us, "
                   "first GEMM after {:.1f} us, span {:.1f} us, outside GEMMs {:.1f} us\n",
                   model, T, layout.size(), untraced_us, s1["launch_to_first_kernel_us"].get<double>(),
                   s1["launch_to_first_gemm_us"].get<double>(), s1["span_us"].get<double>(),
                   s1["outside_gemms_us"].get<double>(), s2["gap_after_previous_forward_us"].get<double>(),
                   s2["first_kernel_to_first_gemm_us"].get<double>(), s2["span_us"].get<double>(),
                   s2["outside_gemms_us"].get<double>());
        fmt::print("  {:>2}  {:<34} {:>6}  {:>9} {:>9}  {:>9} {:>9}\n", "#", "kernel", "CTAs", "start us", "us",
                   "start us", "us");
        json kernels = json::array();
        for (size_t i = 0; i < layout.size(); ++i) {
          const double a0 = median(one.starts[i]), a1 = median(one.durations[i]);
          const double b0 = median(queued.starts[i]), b1 = median(queued.durations[i]);
          fmt::print("  {:>2}  {:<34} {:>6}  {:>9.2f} {:>9.2f}  {:>9.2f} {:>9.2f}\n", i, short_name(layout[i].name),
                     layout[i].ctas, a0, a1, b0, b1);
          kernels.push_back({{"name", layout[i].name}, {"ctas", layout[i].ctas}, {"one_at_a_time_start_us", a0},
                             {"one_at_a_time_us", a1}, {"back_to_back_start_us", b0}, {"back_to_back_us", b1}});
        }
        std::fflush(stdout);
        cases.push_back({{"model", model}, {"tokens", T}, {"launches", layout.size()}, {"untraced_us", untraced_us},
                         {"one_at_a_time", s1}, {"back_to_back", s2}, {"kernels", kernels},
                         {"back_to_back_forwards_of_one_correlation", one_launch_each},
                         {"plan", layer.describe(T)}});
      }
    }
    report["cases"] = cases;
    io::write_file_atomically(out_path, report.dump(1) + "\n");
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_forward_timeline: {}\n", e.what());
    return 1;
  }
  return 0;
}
