// Two MoeLayers on the same FP4 weights, A and B, whose LayerOptions differ in
// what the caller sets, their forwards timed interleaved at steady state
// (rounds of A then B, CUDA-graph replays after back-to-back warm-up) on the
// same hidden states and router logits. Per model and token count: the median
// of each side, the median of the rounds' ratios (A over B: above 1, B is
// faster), each side's stage times (MoeLayer::profile), how far B's output is
// from A's, and both plans. bench_w4a8_layer and bench_layer_ab run it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench_device.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "interleaved_rounds.hpp"
#include "io/atomic_file.hpp"
#include "measure/steady_timing.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"

namespace fp4moe::bench {

// The layer options a benchmark turns on by name (--change, --with):
//   balanced-split           LayerOptions::balanced_split
//   shared-expert-in-routed  LayerOptions::shared_expert_in_routed_gemms
//   no-split-k               LayerOptions::split_k = false
inline const std::vector<std::string> kLayerOptionNames = {"balanced-split", "shared-expert-in-routed", "no-split-k"};

inline void set_layer_option(LayerOptions& o, const std::string& option) {
  if (option == "balanced-split") o.balanced_split = true;
  else if (option == "shared-expert-in-routed") o.shared_expert_in_routed_gemms = true;
  else if (option == "no-split-k") o.split_k = false;
  else {
    std::string known;
    for (const std::string& n : kLayerOptionNames) known += (known.empty() ? "" : ", ") + n;
    FP4MOE_CHECK(false, "layer option '" << option << "' is not one of " << known);
  }
}

struct LayerAb {
  std::string a, b;  // the sides' names: table columns and the JSON's keys
  // B's difference from A (both start from the run's options), for a model and its experts' format
  std::function<void(LayerOptions& a, LayerOptions& b, const MoeConfig& cfg, Fp4Format format)> configure;
};

struct LayerAbRun {
  std::vector<std::string> models;
  std::vector<int64_t> tokens;
  std::string out_path;
  double warm_seconds = 0.5;
  int reps = 30, rounds = 3;
  bool tune_cache = false;  // both layers read the tune cache; else the planner's tiles
  // the experts' format for a model
  std::function<Fp4Format(const MoeConfig&)> format;
  std::string format_name;  // for the report
};

// The run's options both benchmarks take (--models is the caller's: its help differs).
inline void add_layer_ab_options(CLI::App& app, LayerAbRun& run) {
  app.add_option("--tokens", run.tokens, "Token counts T")->delimiter(',')->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--out", run.out_path, "JSON output");
  app.add_option("--warm-seconds", run.warm_seconds, "Back-to-back replays before each timed A or B")
      ->check(CLI::Range(0.0, 30.0));
  app.add_option("--reps", run.reps, "Timed replays per A or B")->check(CLI::Range(3, 10000));
  app.add_option("--rounds", run.rounds, "Interleaved A, B rounds")->check(CLI::Range(1, 20));
  app.add_flag("--tune-cache", run.tune_cache, "Both layers read the tune cache ($FP4MOE_CACHE); default: the planner's tiles");
}

inline double relative_difference(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = bf16_to_float(got[i]), y = bf16_to_float(ref[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

inline nlohmann::json stages_json(const std::vector<MoeLayer::StageTime>& st) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& s : st) j[s.stage] = s.median_ms * 1e3;
  return j;
}

// Runs every model and token count, prints a table, writes the JSON; 1 on error.
inline int run_layer_ab(const char* program, const LayerAbRun& run, const LayerAb& ab) {
  using json = nlohmann::json;
  try {
    for (const std::string& m : run.models) (void)preset(m);  // a bad name is refused before the device is asked
    const auto dev = bench_device(program, /*need_sm90=*/true);
    if (!dev) return 0;
    const int64_t max_t = *std::max_element(run.tokens.begin(), run.tokens.end());
    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&stream));
    json report;
    report["device"] = dev->name;
    report["a"] = ab.a;
    report["b"] = ab.b;
    report["warm_seconds"] = run.warm_seconds;
    report["reps"] = run.reps;
    report["rounds"] = run.rounds;
    report["tune_cache"] = run.tune_cache;
    report["format"] = run.format_name;
    json cases = json::array();
    fmt::print("{:<13} {:>5}  {:>10} {:>10}  {:>7}  {:>9}  {:>21}  {:>21}\n", "model", "T", ab.a + " us", ab.b + " us",
               "speedup", "rel diff", "GEMM1 us (A / B)", "GEMM2 us (A / B)");
    for (const std::string& model : run.models) {
      const MoeConfig cfg = preset(model);
      const Fp4Format format = run.format(cfg);
      const MoeWeights w = random_moe_weights(cfg, format, 3);
      LayerOptions oa;
      oa.max_tokens = max_t;
      oa.use_tune_cache = run.tune_cache;
      LayerOptions ob = oa;
      ab.configure(oa, ob, cfg, format);
      MoeLayer a(cfg, w, oa), b(cfg, w, ob);
      DeviceBuffer<__nv_bfloat16> x(size_t(max_t * cfg.hidden)), ya(size_t(max_t * cfg.hidden)),
          yb(size_t(max_t * cfg.hidden));
      DeviceBuffer<float> logits(size_t(max_t * cfg.num_experts));
      for (const int64_t T : run.tokens) {
        fill_random_bf16(x.get(), T * cfg.hidden, 40 + uint64_t(T), 1.f, stream);
        logits.upload(gaussian_logits(T, cfg.num_experts, 50 + uint64_t(T)));
        ya.fill_bytes(0xFF);  // poisoned: a row left unwritten shows as a NaN difference
        yb.fill_bytes(0xFF);
        a.forward(stream, x.get(), logits.get(), T, ya.get());
        b.forward(stream, x.get(), logits.get(), T, yb.get());
        a.check_status(stream);
        b.check_status(stream);
        std::vector<uint16_t> out_a(size_t(T * cfg.hidden)), out_b(out_a.size());
        FP4MOE_CUDA_CHECK(cudaMemcpy(out_a.data(), ya.get(), out_a.size() * 2, cudaMemcpyDeviceToHost));
        FP4MOE_CUDA_CHECK(cudaMemcpy(out_b.data(), yb.get(), out_b.size() * 2, cudaMemcpyDeviceToHost));
        const double diff = relative_difference(out_b, out_a);
        FP4MOE_CHECK(std::isfinite(diff), model << " T=" << T << ": a non-finite output");
        const auto fwd_a = [&] { a.forward(stream, x.get(), logits.get(), T, ya.get()); };
        const auto fwd_b = [&] { b.forward(stream, x.get(), logits.get(), T, yb.get()); };
        const InterleavedTiming t = time_interleaved(
            {{ab.a, [&] { return time_graph_steady(fwd_a, stream, run.warm_seconds, run.reps, 0, 0); }},
             {ab.b, [&] { return time_graph_steady(fwd_b, stream, run.warm_seconds, run.reps, 0, 0); }}},
            run.rounds);
        const json sa = stages_json(a.profile(stream, x.get(), logits.get(), T, ya.get(), 10));
        const json sb = stages_json(b.profile(stream, x.get(), logits.get(), T, yb.get(), 10));
        const double a_us = t.median_ms[0] * 1e3, b_us = t.median_ms[1] * 1e3;
        auto stage = [](const json& s, const char* k) { return s.contains(k) ? s[k].get<double>() : 0.0; };
        fmt::print("{:<13} {:>5}  {:>10.2f} {:>10.2f}  {:>6.2f}x  {:>9.2e}  {:>9.1f} / {:>9.1f}  {:>9.1f} / {:>9.1f}\n",
                   model, T, a_us, b_us, t.ratio, diff, stage(sa, "gemm1"), stage(sb, "gemm1"), stage(sa, "gemm2"),
                   stage(sb, "gemm2"));
        std::fflush(stdout);
        cases.push_back({{"model", model},
                         {"tokens", T},
                         {ab.a + "_us", a_us},
                         {ab.b + "_us", b_us},
                         {"speedup", t.ratio},
                         {ab.b + "_against_" + ab.a + "_rel", diff},
                         {ab.a + "_stages_us", sa},
                         {ab.b + "_stages_us", sb},
                         {ab.a + "_plan", a.describe(T)},
                         {ab.b + "_plan", b.describe(T)},
                         {"rounds", t.rounds}});
      }
    }
    report["cases"] = cases;
    io::write_file_atomically(run.out_path, report.dump(1) + "\n");
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace fp4moe::bench
