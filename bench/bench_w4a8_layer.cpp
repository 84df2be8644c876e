// W4A8 against W4A16 for the whole layer: two MoeLayers on the same FP4
// weights (MXFP4, or NVFP4 with the rounded fold: --format), one with bf16
// activations and one with e4m3 (LayerOptions::activations), their forwards timed interleaved at steady state (rounds of A
// then B, CUDA-graph replays after back-to-back warm-up) on the same hidden
// states and router logits. Per token count: the median of each side, the
// median of the rounds' ratios, each side's stage times (MoeLayer::profile),
// and how far the e4m3 output is from the bf16 one.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include <fmt/core.h>

#include "io/atomic_file.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "measure/steady_timing.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"
#include "interleaved_rounds.hpp"
#include "bench_device.hpp"

using namespace fp4moe;
using json = nlohmann::json;

namespace {

double bf16_to_double(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ||a - b|| / ||b|| over two bf16 outputs.
double relative_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_to_double(a[i]), y = bf16_to_double(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

json stages_json(const std::vector<MoeLayer::StageTime>& st) {
  json j = json::object();
  for (const auto& s : st) j[s.stage] = s.median_ms * 1e3;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"W4A8 (e4m3 activations) against W4A16: the whole MoE layer, interleaved"};
  std::vector<std::string> models = {"glm5", "gpt-oss-120b"};
  std::vector<int64_t> tokens = {1, 2, 4, 8, 32, 128, 512, 1024, 2048, 4096, 8192};
  std::string out_path = "bench_w4a8_layer.json";
  double warm_seconds = 0.5;
  int reps = 30, rounds = 3;
  bool tuned = false;
  std::string format = "mxfp4";
  app.add_option("--models", models, "Model presets (their experts in --format)")->delimiter(',');
  app.add_option("--format", format, "The experts' FP4 format: mxfp4 (exact fold), or nvfp4 (W4A8 rounds each weight: "
                                     "LayerOptions::fp8_rounds_nvfp4)")
      ->check(CLI::IsMember({"mxfp4", "nvfp4"}))
      ->capture_default_str();
  app.add_option("--tokens", tokens, "Token counts T")->delimiter(',')->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--out", out_path, "JSON output");
  app.add_option("--warm-seconds", warm_seconds, "Back-to-back replays before each timed A or B")->check(CLI::Range(0.0, 30.0));
  app.add_option("--reps", reps, "Timed replays per A or B")->check(CLI::Range(3, 10000));
  app.add_option("--rounds", rounds, "Interleaved A, B rounds")->check(CLI::Range(1, 20));
  app.add_flag("--tune-cache", tuned, "Both layers read the tune cache ($FP4MOE_CACHE); default: the planner's tiles");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& m : models) (void)preset(m);  // a bad name is refused before the device is asked
    const auto dev = bench::bench_device("bench_w4a8_layer", /*need_sm90=*/true);
    if (!dev) return 0;
    const int64_t max_t = *std::max_element(tokens.begin(), tokens.end());
    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&stream));
    json report;
    report["device"] = dev->name;
    report["warm_seconds"] = warm_seconds;
    report["reps"] = reps;
    report["rounds"] = rounds;
    report["tune_cache"] = tuned;
    report["format"] = format;
    json cases = json::array();
    fmt::print("{:<13} {:>5}  {:>10} {:>10}  {:>7}  {:>9}  {:>21}  {:>21}\n", "model", "T", "W4A16 us", "W4A8 us",
               "speedup", "rel diff", "GEMM1 us (A / B)", "GEMM2 us (A / B)");
    for (const std::string& model : models) {
      const MoeConfig cfg = preset(model);
      const Fp4Format weight_format = format == "nvfp4" ? Fp4Format::nvfp4 : Fp4Format::mxfp4;
      const MoeWeights w = random_moe_weights(cfg, weight_format, 3);
      LayerOptions oa;
      oa.max_tokens = max_t;
      oa.use_tune_cache = tuned;
      // the shared expert runs bf16 apart under fp8 activations; A too, so that only the activations differ
      oa.shared_expert_in_routed_gemms = false;
      LayerOptions ob = oa;
      ob.activations = ActivationFormat::fp8;
      ob.fp8_rounds_nvfp4 = weight_format == Fp4Format::nvfp4;
      MoeLayer a(cfg, w, oa), b(cfg, w, ob);
      DeviceBuffer<__nv_bfloat16> x(size_t(max_t * cfg.hidden)), ya(size_t(max_t * cfg.hidden)),
          yb(size_t(max_t * cfg.hidden));
      DeviceBuffer<float> logits(size_t(max_t * cfg.num_experts));
      for (const int64_t T : tokens) {
        fill_random_bf16(x.get(), T * cfg.hidden, 40 + uint64_t(T), 1.f, stream);
        logits.upload(gaussian_logits(T, cfg.num_experts, 50 + uint64_t(T)));
        ya.fill_bytes(0xFF);
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
        const bench::InterleavedTiming ab = bench::time_interleaved(
            {{"w4a16", [&] { return time_graph_steady(fwd_a, stream, warm_seconds, reps, 0, 0); }},
             {"w4a8", [&] { return time_graph_steady(fwd_b, stream, warm_seconds, reps, 0, 0); }}},
            rounds);
        const json sa = stages_json(a.profile(stream, x.get(), logits.get(), T, ya.get(), 10));
        const json sb = stages_json(b.profile(stream, x.get(), logits.get(), T, yb.get(), 10));
        const double a_us = ab.median_ms[0] * 1e3, b_us = ab.median_ms[1] * 1e3, speedup = ab.ratio;
        auto stage = [](const json& s, const char* k) { return s.contains(k) ? s[k].get<double>() : 0.0; };
        fmt::print("{:<13} {:>5}  {:>10.2f} {:>10.2f}  {:>6.2f}x  {:>9.2e}  {:>9.1f} / {:>9.1f}  {:>9.1f} / {:>9.1f}\n",
                   model, T, a_us, b_us, speedup, diff, stage(sa, "gemm1"), stage(sb, "gemm1"), stage(sa, "gemm2"),
                   stage(sb, "gemm2"));
        std::fflush(stdout);
        cases.push_back({{"model", model}, {"tokens", T}, {"w4a16_us", a_us}, {"w4a8_us", b_us}, {"speedup", speedup},
                         {"w4a8_against_w4a16_rel", diff}, {"w4a16_stages_us", sa}, {"w4a8_stages_us", sb},
                         {"w4a16_plan", a.describe(T)}, {"w4a8_plan", b.describe(T)}, {"rounds", ab.rounds}});
      }
    }
    report["cases"] = cases;
    io::write_file_atomically(out_path, report.dump(1) + "\n");
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_w4a8_layer: {}\n", e.what());
    return 1;
  }
  return 0;
}
