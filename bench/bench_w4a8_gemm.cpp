// W4A8 against W4A16: each MoE GEMM step (its row copy and the grouped GEMM,
// as the layer's forward plan holds it) with e4m3 activations and with bf16,
// on the same routings, in one run. For each path the fastest fitting tile
// is found by a short sweep; then the two are timed interleaved at steady
// state (rounds of A then B, CUDA-graph replays after warm-up back to back),
// and the ratio is reported per round and as the median. Weights are random
// bytes in each path's prepared layout (MXFP4 shapes: the FP8 fold takes
// MXFP4), activations random bf16.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include <fmt/core.h>

#include "format/prepare_gemm.hpp"
#include "io/atomic_file.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/reference.hpp"
#include "measure/steady_timing.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"
#include "interleaved_rounds.hpp"
#include "bench_device.hpp"
#include "routed_batch.hpp"
#include "step_launches.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/device_limits.hpp"
#include "runtime/gemm_step.hpp"
#include "runtime/random_fill.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/timing.hpp"

using namespace fp4moe;
using json = nlohmann::json;

namespace {

using Act = plan::ActivationType;

struct GemmShape {
  const char* name;
  int64_t n, k;
  bool gathered;  // GEMM1 gathers token rows; GEMM2 reads the permuted rows in order
};

// One path's weights: random bytes in its prepared layout (every byte a valid
// code pair or word), scale bytes in the range real weights take.
struct PathWeights {
  DeviceBuffer<uint8_t> w, s;
  DeviceBuffer<float> scale;  // bf16: dequant_scale [E]; e4m3: row_scale [E][N]
  ProjectionView view;
  PathWeights(Act act, int64_t E, const GemmShape& g, cudaStream_t stream)
      : w(size_t(E * g.n * g.k / 2)), s(size_t(E * pack::scale_bytes(g.n, g.k))), scale(size_t(act == Act::e4m3 ? E * g.n : E)) {
    fill_random_bytes(w.get(), int64_t(w.size()), 11, 0, 255, stream);
    if (act == Act::e4m3) fill_random_bytes(s.get(), int64_t(s.size()), 12, 0, 11, stream);  // fold codes u
    else fill_random_bytes(s.get(), int64_t(s.size()), 12, 0x98, 0xB8, stream);             // MXFP4 scales near 1
    std::vector<float> v(scale.size(), act == Act::e4m3 ? 1.0f / 1024 : 1.0f);
    scale.upload(v);
    view = {w.get(), s.get(), act == Act::e4m3 ? nullptr : scale.get(), nullptr, 1, Fp4Format::mxfp4, g.n, g.k, E};
    view.activations = act;
    view.row_scale = act == Act::e4m3 ? scale.get() : nullptr;
  }
};

// The steps of every routing on `tile`.
std::vector<GemmStepLaunch> steps_on(const ProjectionView& w, const std::vector<GemmOperands>& ops, int tile,
                                     const plan::DeviceLimits& device) {
  kernels::GemmLaunch launch;
  launch.tile = tile;
  return bench::prepare_steps(w, ops, launch, device);
}
using bench::enqueue_each;

// The fastest tile of a path on these operands: every fitting tile of its type, a short graph timing each.
std::pair<int, double> fastest_tile(const ProjectionView& w, const std::vector<GemmOperands>& ops,
                                    const plan::DeviceLimits& device, cudaStream_t stream) {
  int best = -1;
  double best_ms = 1e30;
  for (int t = 0; t < plan::kNumGemmTiles; ++t) {
    if (!plan::fit_gemm_tile(t, w.n, w.k, device.budget, 0, w.activations).fits) continue;
    const std::vector<GemmStepLaunch> steps = steps_on(w, ops, t, device);
    const double ms = time_graph_sequence(enqueue_each(steps, stream), stream, 2, 10).median_ms;
    if (ms < best_ms) best_ms = ms, best = t;
  }
  return {best, best_ms};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"W4A8 (e4m3 activations) against W4A16 grouped GEMM steps, interleaved"};
  std::vector<std::string> models = {"glm5", "gpt-oss-120b"};
  std::vector<int64_t> tokens = {1, 4, 8, 32, 128, 512, 1024, 2048, 8192};
  std::string out_path = "bench_w4a8_gemm.json";
  double warm_seconds = 0.5;
  int reps = 30, rounds = 3, routings = 4, promotion = 0;
  bool compare_promotion = false;
  app.add_option("--models", models, "Model presets")->delimiter(',');
  app.add_option("--tokens", tokens, "Token counts T")->delimiter(',')->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--out", out_path, "JSON output");
  app.add_option("--warm-seconds", warm_seconds, "Back-to-back replays before each timed A or B")->check(CLI::Range(0.0, 30.0));
  app.add_option("--reps", reps, "Timed replays per A or B")->check(CLI::Range(3, 10000));
  app.add_option("--rounds", rounds, "Interleaved A, B rounds")->check(CLI::Range(1, 20));
  app.add_option("--routings", routings, "Routings replayed back to back per launch (weights beyond L2)")
      ->check(CLI::Range(1, 16));
  app.add_option("--fp8-promotion-stages", promotion, "W4A8: K stages between promotions of the partial sums (0: once per item)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--compare-promotion", compare_promotion,
               "Also time W4A8 with its partial sums promoted every stage, interleaved with the other two");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& m : models) (void)preset(m);  // a bad name is refused before the device is asked
    const auto dev = bench::bench_device("bench_w4a8_gemm", /*need_sm90=*/true);
    if (!dev) return 0;
    const plan::DeviceLimits device = device_limits(dev->index);
    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&stream));
    json report;
    report["device"] = dev->name;
    report["warm_seconds"] = warm_seconds;
    report["reps"] = reps;
    report["rounds"] = rounds;
    json cases = json::array();
    fmt::print("{:<13} {:<6} {:>5}  {:<34} {:>9}  {:<34} {:>9}  {:>7}\n", "model", "gemm", "T", "W4A16 tile", "us",
               "W4A8 tile", "us", "speedup");
    for (const std::string& model : models) {
      const MoeConfig cfg = preset(model);
      const int64_t E = cfg.num_experts;
      // as the sm_90 layer runs them (granule 64: gpt-oss at its own 2880)
      const int64_t H = padded_features(cfg.hidden, kPreparedKGranule), I = padded_features(cfg.intermediate, kPreparedKGranule);
      const bool biased = cfg.expert_bias;
      const GemmShape shapes[] = {{"gemm1", 2 * I, H, true}, {"gemm2", H, I, false}};
      const int64_t max_t = *std::max_element(tokens.begin(), tokens.end());
      for (const GemmShape& g : shapes) {
        PathWeights bf16(Act::bf16, E, g, stream), fp8(Act::e4m3, E, g, stream);
        DeviceBuffer<float> bias(biased ? size_t(E * g.n) : 0);
        if (biased) {
          bias.fill_bytes(0);
          bf16.view.bias = fp8.view.bias = bias.get();
        }
        const int64_t pairs_max = max_t * cfg.top_k;
        DeviceBuffer<__nv_bfloat16> x(size_t((g.gathered ? max_t : pairs_max) * g.k)), y(size_t(pairs_max * g.n));
        DeviceBuffer<__nv_bfloat16> copy(size_t(pairs_max * g.k));
        DeviceBuffer<uint8_t> copy_e4m3(size_t(pairs_max * g.k)), split(size_t(plan::kSplitKWorkspaceBytes));
        DeviceBuffer<float> row_scales(static_cast<size_t>(pairs_max));
        split.fill_bytes(0);
        fill_random_bf16(x.get(), int64_t(x.size()), 14, 1.f, stream);
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (const int64_t T : tokens) {
          std::vector<bench::RoutedBatch> rbs;
          std::vector<DeviceBuffer<int32_t>> doffs, dgathers;
          std::vector<GemmOperands> ops;
          for (int i = 0; i < routings; ++i) {
            rbs.push_back(bench::route_random(cfg, T, 1000 + uint64_t(T) + 7919 * uint64_t(i)));
            doffs.emplace_back(rbs.back().offsets);
            dgathers.emplace_back(rbs.back().gather);
          }
          for (int i = 0; i < routings; ++i) {
            GemmOperands io;
            io.x = x.get();
            io.gather = g.gathered ? dgathers[size_t(i)].get() : nullptr;
            io.rows = rbs[size_t(i)].pairs;
            io.offsets = doffs[size_t(i)].get();
            io.offsets_ready_at_launch = true;  // uploaded before any launch
            io.epilogue = g.gathered ? kernels::GemmEpilogue::swiglu : kernels::GemmEpilogue::store;
            if (g.gathered && cfg.activation == Activation::clamped_swiglu) io.activation = kernels::GemmActivation::clamped_swiglu;
            io.y = y.get();
            io.split_workspace = split.get();
            io.split_workspace_bytes = int64_t(split.bytes());
            io.row_copy = copy.get();
            io.row_copy_e4m3 = copy_e4m3.get();
            io.row_scales = row_scales.get();
            io.fp8_promotion_stages = promotion;
            ops.push_back(io);
          }
          const auto [tile_a, sweep_a] = fastest_tile(bf16.view, ops, device, stream);
          const auto [tile_b, sweep_b] = fastest_tile(fp8.view, ops, device, stream);
          if (tile_a < 0 || tile_b < 0) {
            fmt::print("{:<13} {:<6} {:>5}  no fitting tile (W4A16 {}, W4A8 {})\n", model, g.name, T, tile_a, tile_b);
            continue;
          }
          const std::vector<GemmStepLaunch> steps_a = steps_on(bf16.view, ops, tile_a, device);
          const std::vector<GemmStepLaunch> steps_b = steps_on(fp8.view, ops, tile_b, device);
          std::vector<GemmStepLaunch> steps_c;  // W4A8 promoted every stage
          if (compare_promotion) {
            steps_c = steps_b;
            for (GemmStepLaunch& st : steps_c) st.gemm.params.fp8_promotion_stages = 1;
          }
          auto timed = [&](const std::vector<GemmStepLaunch>& steps) {
            return [&] { return time_graph_sequence_steady(enqueue_each(steps, stream), stream, warm_seconds, reps, 0, 0); };
          };
          std::vector<std::pair<std::string, std::function<SteadyTiming()>>> sides = {{"w4a16", timed(steps_a)},
                                                                                      {"w4a8", timed(steps_b)}};
          if (compare_promotion) sides.emplace_back("w4a8_promoted_every_stage", timed(steps_c));
          const bench::InterleavedTiming ab = bench::time_interleaved(sides, rounds);
          const double a_us = ab.median_ms[0] * 1e3, b_us = ab.median_ms[1] * 1e3, speedup = ab.ratio;
          const json& per_round = ab.rounds;
          fmt::print("{:<13} {:<6} {:>5}  {:<34} {:>9.2f}  {:<34} {:>9.2f}  {:>6.2f}x", model, g.name, T,
                     plan::gemm_tile_name(tile_a), a_us, plan::gemm_tile_name(tile_b), b_us, speedup);
          if (compare_promotion) fmt::print("  (promoted every stage: {:.2f} us)", ab.median_ms[2] * 1e3);
          fmt::print("\n");
          std::fflush(stdout);
          cases.push_back({{"model", model}, {"gemm", g.name}, {"n", g.n}, {"k", g.k}, {"tokens", T},
                           {"routings", routings}, {"w4a16_tile", plan::gemm_tile_name(tile_a)}, {"w4a16_us", a_us},
                           {"w4a8_tile", plan::gemm_tile_name(tile_b)}, {"w4a8_us", b_us}, {"speedup", speedup},
                           {"sweep_w4a16_us", sweep_a * 1e3}, {"sweep_w4a8_us", sweep_b * 1e3}, {"rounds", per_round},
                           {"fp8_promotion_stages", promotion}});
          if (compare_promotion) cases.back()["w4a8_promoted_every_stage_us"] = ab.median_ms[2] * 1e3;
        }
      }
    }
    report["cases"] = cases;
    io::write_file_atomically(out_path, report.dump(1) + "\n");
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_w4a8_gemm: {}\n", e.what());
    return 1;
  }
  return 0;
}
