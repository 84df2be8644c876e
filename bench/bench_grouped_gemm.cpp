// Benchmark of the FP4 grouped GEMM on GLM-5 shapes: every
// fitting tile, the planner's default, the ceilings of this run and the
// cuBLAS bf16 per-expert peer on the same routing. Writes JSON for
// bench/peers.py (torch._grouped_mm) and prints a table. Launches are timed
// replayed from a CUDA graph, as decode runs in serving engines (and as the
// peers are timed); the best tile's eager time is reported next to it.
#include <map>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include <fmt/core.h>

#include "format/prepared_layout.hpp"
#include "routed_batch.hpp"
#include "step_launches.hpp"
#include "runtime/random_fill.hpp"
#include "io/atomic_file.hpp"
#include "fp4moe/device.hpp"
#include "bench_device.hpp"
#include "fp4moe/reference.hpp"
#include "kernels/fp4_grouped_gemm.hpp"
#include "runtime/device_limits.hpp"
#include "runtime/gemm_step.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/split_k.hpp"
#include "runtime/captured_graph.hpp"
#include "measure/ceilings.hpp"
#include "measure/cublas_peer.hpp"
#include "runtime/device_buffer.hpp"
#include "measure/report_json.hpp"
#include "measure/steady_timing.hpp"
#include "runtime/timing.hpp"

using namespace fp4moe;
using json = nlohmann::json;
using bench::RoutedBatch;
using bench::batch_of;
using bench::random_routing;
using bench::route_random;
using bench::enqueue_each;
using bench::prepare_steps;

namespace {

struct Gemm {
  const char* name;
  int64_t n, k;
  bool gathered;  // GEMM1 gathers token rows; GEMM2 reads the permuted rows in order
};

// The steps replayed from a CUDA graph, one per routing, back to back (the time is per launch).
TimingStats time_gemm(const std::vector<GemmStepLaunch>& steps, cudaStream_t stream, int warmup, int reps) {
  return time_graph_sequence(enqueue_each(steps, stream), stream, warmup, reps);
}

// The same at steady state (steady_timing.hpp): after idle_ms idle, 10 timed
// replays (the burst), then warm_seconds of back-to-back replays and the timed
// ones with the SM clock and power beside them. Times per launch.
SteadyTiming time_gemm_steady(const std::vector<GemmStepLaunch>& steps, cudaStream_t stream, int reps, double warm_seconds,
                              int idle_ms, bool burst = true) {
  return time_graph_sequence_steady(enqueue_each(steps, stream), stream, warm_seconds, reps, idle_ms, burst ? 10 : 0);
}

// The random routing with its experts renumbered by rows: the kernels walk
// experts in id order, so these time the same work in another order (the
// order's share of the time). `sorted`: most rows first, as a largest-first
// schedule would take them; `mixed`: most and fewest alternating, so the items
// that run at the same time mix wide and narrow K loops.
RoutedBatch route_reordered(const MoeConfig& cfg, int64_t T, uint64_t seed, bool mixed) {
  Routing r = random_routing(cfg, T, seed);
  std::vector<int64_t> rows(size_t(cfg.num_experts), 0);
  for (const int32_t e : r.topk_ids) ++rows[size_t(e)];
  std::vector<int32_t> by_rows(size_t(cfg.num_experts));
  std::iota(by_rows.begin(), by_rows.end(), 0);
  std::stable_sort(by_rows.begin(), by_rows.end(), [&](int32_t a, int32_t b) { return rows[size_t(a)] > rows[size_t(b)]; });
  std::vector<int32_t> order = by_rows;
  if (mixed)
    for (size_t i = 0; i < order.size(); ++i) order[i] = by_rows[i % 2 ? order.size() - 1 - i / 2 : i / 2];
  std::vector<int32_t> new_id(size_t(cfg.num_experts));
  for (size_t i = 0; i < order.size(); ++i) new_id[size_t(order[i])] = int32_t(i);
  for (int32_t& e : r.topk_ids) e = new_id[size_t(e)];
  return batch_of(cfg, r);
}

// Pair i = t k + j goes to expert (i + shift) mod E: every expert gets T k / E
// rows (give or take one), so where that is a whole number of a tile's chunks
// (e.g. 256 rows at T = 8192 on 128-token chunks) no expert leaves a short last
// chunk. Against the random routing this isolates what ragged counts cost.
RoutedBatch route_balanced(const MoeConfig& cfg, int64_t T, uint64_t shift) {
  Routing r;
  r.tokens = T;
  r.top_k = cfg.top_k;
  for (int64_t i = 0; i < T * cfg.top_k; ++i) {
    r.topk_ids.push_back(int32_t((i + int64_t(shift)) % cfg.num_experts));
    r.topk_weights.push_back(1.0f / float(cfg.top_k));
  }
  return batch_of(cfg, r);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode grouped GEMM benchmark (GLM-5 shapes)"};
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 1024, 2048};
  std::string out_path = "bench_decode.json";
  int reps = 50;
  bool all_tiles = true;
  app.add_option("--tokens", tokens, "Token counts T")->delimiter(',');
  app.add_option("--out", out_path, "JSON output");
  app.add_option("--reps", reps, "Timed repetitions per case")->check(CLI::Range(3, 10000));
  app.add_flag("!--default-tile-only", all_tiles, "Time only the planner's default tile");
  std::string only_gemm;
  int only_tile = -1;
  bool skip_peers = false;
  app.add_option("--gemm", only_gemm, "Only this GEMM (gemm1, or gemm1p with --permuted-gemm1, or gemm2)");
  app.add_option("--tile", only_tile, "Only this tile index (profiling)")->check(CLI::Range(0, plan::kNumGemmTiles - 1));
  app.add_flag("--no-peers", skip_peers, "Skip the cuBLAS peer and the diagnostics");
  kernels::GemmProbe probe = kernels::GemmProbe::none;
  const std::map<std::string, kernels::GemmProbe> probes{{"none", kernels::GemmProbe::none},
                                                         {"loads_only", kernels::GemmProbe::loads_only},
                                                         {"math_only", kernels::GemmProbe::math_only},
                                                         {"no_output", kernels::GemmProbe::no_output}};
  app.add_option("--probe", probe, "A part of the kernel left out in every timed launch (diagnostics; results are "
                                   "garbage): none, loads_only, math_only, no_output")
      ->transform(CLI::CheckedTransformer(probes));
  int k_splits = 0;
  app.add_option("--k-splits", k_splits, "Split-K parts for warp-specialized tiles: 0 the planner's choice, 1 none")
      ->check(CLI::Range(0, plan::kMaxKSplits));
  int rotate = 0;
  app.add_option("--rotate", rotate,
                 "Routings timed back to back per case, each launch on the next (0: enough for 0.25 ms of floor, at most 16)")
      ->check(CLI::Range(0, 64));
  bool early_start = true;
  app.add_flag("!--no-early-start", early_start,
               "Warp-specialized tiles wait for the previous launch before reading their schedule and weights");
  std::string routing = "random";
  app.add_option("--routing", routing,
                 "random (i.i.d. top-k); sorted or mixed (the same with the experts numbered, in the order the kernels "
                 "walk them, by rows, most first, or most and fewest alternating); balanced (every expert T k / E rows: "
                 "no ragged chunks)")
      ->check(CLI::IsMember({"random", "sorted", "mixed", "balanced"}));
  bool permuted_gemm1 = false;
  app.add_flag("--permuted-gemm1", permuted_gemm1,
               "GEMM1 reads its rows already in expert order (as torch._grouped_mm does) instead of gathering them");
  // The sweep's slowest tiles hold the H200 at its power cap, and the SM clock
  // drops by up to a quarter for seconds after; the dequantization-bound kernels
  // slow down with it while the copy ceiling does not. The best tile is re-timed
  // after this much idle time, so that it runs at the clock its own load sets.
  double warm_seconds = 2.0;
  app.add_option("--warm-seconds", warm_seconds,
                 "Back-to-back replays before the best tile of each case is timed (the steady state, the headline)")
      ->check(CLI::Range(0.0, 60.0));
  int cooldown_ms = 1000;
  app.add_option("--cooldown-ms", cooldown_ms, "Idle milliseconds before the best tile's after-idle burst is timed")
      ->check(CLI::Range(0, 60000));
  CLI11_PARSE(app, argc, argv);
  try {
    const auto found = bench::bench_device("bench_grouped_gemm");
    if (!found) return 0;
    const DeviceInfo& dev = *found;
    const plan::DeviceLimits limits = device_limits(dev.index);
    const plan::SmemBudget& budget = limits.budget;
    const MoeConfig cfg = preset("glm5");
    const int64_t E = cfg.num_experts;
    const Gemm gemms[] = {{permuted_gemm1 ? "gemm1p" : "gemm1", 2 * cfg.intermediate, cfg.hidden, !permuted_gemm1},
                          {"gemm2", cfg.hidden, cfg.intermediate, false}};
    if (!only_gemm.empty() && only_gemm != gemms[0].name && only_gemm != gemms[1].name) {
      fmt::print(stderr, "bench_grouped_gemm: --gemm {} is none of {} and {}\n", only_gemm, gemms[0].name, gemms[1].name);
      return 2;
    }

    fmt::print("device: {} (sm_{}, {} SMs)\n", dev.name, dev.cc, dev.sm_count);
    const Ceilings ceil = measure_ceilings(warm_seconds);
    fmt::print("ceilings at steady state: copy {:.3f} TB/s, cuBLAS bf16 {:.1f} TFLOP/s ({:.0f} MHz, {:.0f} W); "
               "at the start: {:.3f} TB/s, {:.1f} TFLOP/s\n",
               ceil.copy_tb_per_s, ceil.bf16_tflop_per_s, ceil.gemm_sensors.sm_clock_mhz_median,
               ceil.gemm_sensors.power_w_median, ceil.copy_tb_per_s_burst, ceil.bf16_tflop_per_s_burst);
    if (ceil.energy.measured())
      fmt::print("energy model: {:.0f} pJ/byte, {:.3f} pJ/bf16 FLOP, {:.3f} pJ/FP8 FLOP, static {:.0f} W, cap {:.0f} W "
                 "(fit rms {:.1f} W)\n",
                 ceil.energy.joules_per_byte * 1e12, ceil.energy.joules_per_bf16_flop * 1e12,
                 ceil.energy.joules_per_fp8_flop * 1e12, ceil.energy.static_w,
                 ceil.energy.power_cap_w, ceil.energy.fit_rms_w);
    else
      fmt::print("energy model: not measured ({})\n", ceil.energy.why_not);

    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&stream));

    json report;
    report["device"] = dev.name;
    report["cc"] = dev.cc;
    report["sm_count"] = dev.sm_count;
    report["ceilings"] = ceilings_json(ceil);
    report["cooldown_ms_before_retime"] = cooldown_ms;
    report["warm_seconds"] = warm_seconds;
    report["model"] = cfg.name;
    report["routing"] = routing;
    report["experts"] = E;
    json cases = json::array();

    const int64_t max_t = *std::max_element(tokens.begin(), tokens.end());
    for (const Gemm& g : gemms) {
      if (!only_gemm.empty() && only_gemm != g.name) continue;
      // FP4 weights in the prepared layout, random: every code and scale byte is
      // a valid value, so random bytes in the prepared layout are random weights.
      DeviceBuffer<uint8_t> w(size_t(E * g.n * g.k / 2)), s(size_t(E * pack::scale_bytes(g.n, g.k)));
      fill_random_bytes(w.get(), int64_t(w.size()), 11, 0, 255, stream);
      fill_random_bytes(s.get(), int64_t(s.size()), 12, 0x40, 0x60, stream);  // prepared UE5M3 scales in [2^-1, 2^3]
      std::vector<float> gs(size_t(E), 1.0f / 512);
      DeviceBuffer<float> dgs(gs);
      const ProjectionView weights{w.get(), s.get(), dgs.get(), nullptr, 1, Fp4Format::nvfp4, g.n, g.k, E};
      // The same shapes as bf16 for cuBLAS (values differ; the bytes moved are what matter).
      std::unique_ptr<CublasGroupedPeer> peer;
      if (!skip_peers) peer = std::make_unique<CublasGroupedPeer>(E, std::vector<CublasGroupedPeer::Shape>{{g.n, g.k}},
                                                                  max_t * cfg.top_k, stream);
      const int64_t xrows = g.gathered ? max_t : max_t * cfg.top_k;
      DeviceBuffer<__nv_bfloat16> x(size_t(xrows * g.k)), y(size_t(max_t * cfg.top_k * g.n));
      DeviceBuffer<__nv_bfloat16> workspace(g.gathered ? size_t(max_t * cfg.top_k * g.k) : 0);
      DeviceBuffer<uint8_t> split_workspace(size_t(plan::kSplitKWorkspaceBytes));
      split_workspace.fill_bytes(0);  // the arrival counters start at zero; every launch leaves them so
      fill_random_bf16(x.get(), int64_t(x.size()), 14, 1.f, stream);
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));

      for (int64_t T : tokens) {
        // Small launches are timed back to back over several routings, as a
        // serving engine replays a step: a single launch's graph-launch cost and
        // first DRAM round trip are not what a layer of a running model pays, and
        // one routing repeated could find its weights in L2 (50 MB).
        auto floor_of = [&](const RoutedBatch& rb) {
          const double weight_bytes = double(rb.active) * double(g.n * g.k) * fp4_bytes_per_weight(Fp4Format::nvfp4);
          const double act_in = double(g.gathered ? T : rb.pairs) * double(g.k) * 2;
          const double out_bytes = double(rb.pairs) * double(g.n) * 2;
          const double bytes = weight_bytes + act_in + out_bytes;
          const double flops = 2.0 * double(rb.pairs) * double(g.n) * double(g.k);
          return std::array<double, 5>{bytes, flops, floor_ms(ceil, bytes, flops), floor_ms(ceil, bytes, flops, true),
                                       energy_floor_ms(ceil, bytes, flops)};
        };
        auto route = [&](size_t i) {
          const uint64_t seed = 1000 + uint64_t(T) + 7919 * i;
          return routing == "balanced" ? route_balanced(cfg, T, 37 * i)
                 : routing == "random"   ? route_random(cfg, T, seed)
                                         : route_reordered(cfg, T, seed, routing == "mixed");
        };
        std::vector<RoutedBatch> rbs{route(0)};
        const int routings = rotate > 0 ? rotate : std::clamp(int(std::ceil(0.25 / floor_of(rbs[0])[2])), 1, 16);
        while (int(rbs.size()) < routings) rbs.push_back(route(rbs.size()));
        const RoutedBatch& rb = rbs[0];
        std::vector<DeviceBuffer<int32_t>> doffs, dgathers;
        std::vector<GemmOperands> ops;
        double bytes = 0, flops = 0, case_floor_ms = 0, burst_floor_ms = 0, case_energy_floor_ms = 0, active = 0;  // per launch: the mean over the routings
        int64_t max_rows = 0;
        std::vector<std::vector<int32_t>> counts_rotation;
        for (const RoutedBatch& r : rbs) {
          doffs.emplace_back(r.offsets);
          dgathers.emplace_back(r.gather);
          const auto f = floor_of(r);
          bytes += f[0] / routings, flops += f[1] / routings, case_floor_ms += f[2] / routings, burst_floor_ms += f[3] / routings;
          case_energy_floor_ms += f[4] / routings;
          active += double(r.active) / routings;
          max_rows = std::max(max_rows, r.max_rows);
          counts_rotation.push_back(r.counts);
        }
        for (int i = 0; i < routings; ++i) {
          GemmOperands io;
          io.x = x.get();
          io.gather = g.gathered ? dgathers[size_t(i)].get() : nullptr;
          io.rows = rb.pairs;
          io.offsets = doffs[size_t(i)].get();
          io.offsets_ready_at_launch = early_start;  // uploaded before any launch
          io.y = y.get();
          io.split_workspace = split_workspace.get();
          io.split_workspace_bytes = int64_t(split_workspace.bytes());
          io.row_copy = workspace.size() ? workspace.get() : nullptr;
          ops.push_back(io);
        }

        // --k-splits applies to the tiles that can split (warp-specialized)
        auto tile_splits = [&](int tile) { return plan::kGemmTiles[tile].splits_k() ? k_splits : 0; };
        const int def_tile = plan::rank_gemm_tiles(g.n, g.k, budget, double(rb.pairs) / E,
                                                     int64_t(std::lround(active)), dev.sm_count);
        json tiles = json::array();
        double best_ms = 1e30;
        int best_tile = -1;
        double default_ms = 0, best_all_warps_ms = 1e30;
        int best_all_warps = -1;
        // At prefill sizes (128+ tokens per expert) the sweep leaves out the tiles of
        // under 64 tokens: never ranked there and 2x to 8x slower, they
        // kept the GPU at its power cap for minutes before the prefill tiles, which
        // come last in the list, were timed.
        const bool prefill_size = double(rb.pairs) / E >= 128;
        for (int tile = 0; tile < plan::kNumGemmTiles; ++tile) {
          if (!all_tiles && tile != def_tile) continue;
          if (only_tile >= 0 && tile != only_tile) continue;
          if (only_tile < 0 && prefill_size && plan::kGemmTiles[tile].nt < 64 && tile != def_tile) continue;
          const plan::SmemPlan pl = plan::plan_gemm_tile(tile, g.n, g.k, budget);
          if (!pl.fits) continue;
          const kernels::GemmLaunch L{tile, pl.stages, 0, probe, tile_splits(tile)};
          const TimingStats t = time_gemm(prepare_steps(weights, ops, L, limits), stream, 5, reps);
          tiles.push_back({{"tile", plan::gemm_tile_name(tile)}, {"stages", pl.stages}, {"median_ms", t.median_ms},
                           {"min_ms", t.min_ms}, {"max_ms", t.max_ms}});
          if (t.median_ms < best_ms) best_ms = t.median_ms, best_tile = tile;
          if (tile == def_tile) default_ms = t.median_ms;
          if (!plan::kGemmTiles[tile].wgmma && !plan::kGemmTiles[tile].warp_specialized && t.median_ms < best_all_warps_ms)
            best_all_warps_ms = t.median_ms, best_all_warps = tile;
        }
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        // the best tile's launch, as the sweep ran it: after idle, then at steady state (the headline)
        const kernels::GemmLaunch best_launch{best_tile, plan::plan_gemm_tile(best_tile, g.n, g.k, budget).stages, 0,
                                                probe, tile_splits(best_tile)};
        const std::vector<GemmStepLaunch> best_steps = prepare_steps(weights, ops, best_launch, limits);
        const int best_grid = best_steps[0].gemm.grid;
        const SteadyTiming steady = time_gemm_steady(best_steps, stream, reps, warm_seconds, cooldown_ms);
        const TimingStats& best = steady.steady;
        const json steady_json = {{"burst_ms", steady.burst.median_ms},
                                  {"burst_floor_ms", burst_floor_ms},
                                  {"burst_floor_fraction", burst_floor_ms / steady.burst.median_ms},
                                  {"sm_clock_mhz_median", steady.sensors.sm_clock_mhz_median},
                                  {"sm_clock_mhz_min", steady.sensors.sm_clock_mhz_min},
                                  {"power_w_median", steady.sensors.power_w_median},
                                  {"power_w_max", steady.sensors.power_w_max},
                                  {"sensor_samples", steady.sensors.samples}};
        // The same tile, one launch per graph (the method of earlier runs; early
        // start, on since, measured slower with nothing before it to overlap).
        const TimingStats single = time_gemm({best_steps[0]}, stream, 3, reps);
        // The same step queued eagerly, as a forward queues it (the driver's launch cost included).
        const TimingStats eager = time_on_stream([&] { enqueue_gemm_step(best_steps[0], stream); }, stream, 3, reps);

        // Where the time goes (leave one part out), at steady state like the
        // headline: the best tile with only its loads, with only its math (the
        // K loop on stale stages, its epilogue included), and without its
        // output writes (the epilogue's share); results are garbage.
        json diag = {{"loads_only_ms", 0.0}, {"compute_only_ms", 0.0}, {"no_output_ms", 0.0}};
        if (!skip_peers) {
          using kernels::GemmProbe;
          for (GemmProbe part : {GemmProbe::loads_only, GemmProbe::math_only, GemmProbe::no_output}) {
            kernels::GemmLaunch L = best_launch;
            L.probe = part;
            const SteadyTiming t = time_gemm_steady(prepare_steps(weights, ops, L, limits), stream, 20, warm_seconds, 0, false);
            const std::string key = part == GemmProbe::loads_only ? "loads_only" : part == GemmProbe::math_only ? "compute_only"
                                                                                                                : "no_output";
            diag[key + "_ms"] = t.steady.median_ms;
            diag[key + "_sm_clock_mhz"] = t.sensors.sm_clock_mhz_median;
            diag[key + "_power_w"] = t.sensors.power_w_median;
          }
          diag["full_over_compute_only"] = best.median_ms / diag["compute_only_ms"].get<double>();
        }

        if (skip_peers) {
          fmt::print("{} T={} tile {}: {:.4f} ms over {} routings ({:.4f} ms one launch per graph, eager {:.4f} ms, grid {}; "
                     "after idle {:.4f} ms; SM {:.0f} MHz, {:.0f} W; {:.1f}% of the floor, after idle {:.1f}%)\n",
                     g.name, T, plan::gemm_tile_name(best_tile), best.median_ms, routings, single.median_ms, eager.median_ms,
                     best_grid, steady.burst.median_ms, steady.sensors.sm_clock_mhz_median,
                     steady.sensors.power_w_median, 100 * case_floor_ms / best.median_ms,
                     100 * burst_floor_ms / steady.burst.median_ms);
          cases.push_back({{"gemm", g.name}, {"tokens", T}, {"n", g.n}, {"k", g.k}, {"pairs", rb.pairs},
                           {"bytes", bytes}, {"flops", flops}, {"floor_ms", case_floor_ms},
                           {"energy_floor_ms", case_energy_floor_ms},
                           {"best_tile", plan::gemm_tile_name(best_tile)}, {"grid", best_grid},
                           {"median_ms", best.median_ms}, {"min_ms", best.min_ms}, {"max_ms", best.max_ms}, {"routings", routings},
                           {"single_launch_ms", single.median_ms}, {"eager_ms", eager.median_ms},
                           {"tflop_per_s", flops / (best.median_ms * 1e-3) / 1e12}, {"tiles", tiles},
                           {"steady", steady_json}});
          continue;
        }
        // cuBLAS bf16 per expert on contiguous (pre-gathered) rows, captured in a graph, at steady state as the best tile.
        const TimingStats tb = peer->time(0, counts_rotation, std::max(5, reps / 5), warm_seconds);
        // the dense ceiling again, at this case's clocks (the start-of-run one was taken cool)
        const double dense_adjacent = measure_bf16_tflop_per_s();
        const double tflops = flops / (best.median_ms * 1e-3) / 1e12;

        json c = {{"gemm", g.name}, {"tokens", T}, {"n", g.n}, {"k", g.k}, {"pairs", rb.pairs},
                  {"active_experts", active}, {"max_rows_per_expert", max_rows}, {"bytes", bytes},
                  {"flops", flops}, {"floor_ms", case_floor_ms}, {"grid", best_grid},
                  {"default_tile", plan::gemm_tile_name(def_tile)},
                  {"default_ms", default_ms}, {"best_tile", plan::gemm_tile_name(best_tile)},
                  {"median_ms", best.median_ms}, {"min_ms", best.min_ms}, {"max_ms", best.max_ms},
                  {"routings", routings}, {"single_launch_ms", single.median_ms},
                  {"eager_ms", eager.median_ms}, {"tb_per_s", bytes / (best.median_ms * 1e-3) / 1e12},
                  {"tflop_per_s", flops / (best.median_ms * 1e-3) / 1e12},
                  {"floor_fraction", case_floor_ms / best.median_ms},
                  {"energy_floor_ms", case_energy_floor_ms}, {"energy_floor_fraction", case_energy_floor_ms / best.median_ms},
                  {"cublas_bf16_ms", tb.median_ms},
                  {"speedup_vs_cublas", tb.median_ms / best.median_ms},
                  {"dense_fraction", tflops / ceil.bf16_tflop_per_s},
                  {"bf16_tflop_per_s_adjacent", dense_adjacent}, {"dense_fraction_adjacent", tflops / dense_adjacent},
                  {"best_all_warps_tile", best_all_warps >= 0 ? plan::gemm_tile_name(best_all_warps) : std::string("none")},
                  {"speedup_vs_all_warps", best_all_warps >= 0 ? best_all_warps_ms / best.median_ms : 0.0},
                  {"tiles", tiles}, {"diagnostics", diag}, {"steady", steady_json},
                  {"counts", rb.counts}, {"counts_rotation", counts_rotation}};  // counts: the first routing's
        cases.push_back(c);
        fmt::print("{} T={:5d} active {:5.1f} max/expert {:4d}  {:8.4f} ms at steady state (after idle {:.4f} = {:5.1f}% of its floor; SM {:.0f} MHz, {:.0f} W) ({}, {} routings)  {:5.2f} TB/s {:6.1f} TFLOP/s  floor {:.4f} ms = {:5.1f}%  dense bf16 {:5.1f}% (beside it: {:.0f} TFLOP/s, {:5.1f}%)  cuBLAS {:8.4f} ms ({:4.2f}x)  loads-only {:.4f} compute-only {:.4f} no-output {:.4f} (full / compute-only {:.2f}x)\n",
                   g.name, T, active, max_rows, best.median_ms, steady.burst.median_ms,
                   100 * burst_floor_ms / steady.burst.median_ms, steady.sensors.sm_clock_mhz_median,
                   steady.sensors.power_w_median, plan::gemm_tile_name(best_tile), routings,
                   bytes / (best.median_ms * 1e-3) / 1e12, tflops, case_floor_ms, 100 * case_floor_ms / best.median_ms,
                   100 * tflops / ceil.bf16_tflop_per_s, dense_adjacent, 100 * tflops / dense_adjacent, tb.median_ms, tb.median_ms / best.median_ms,
                   diag["loads_only_ms"].get<double>(), diag["compute_only_ms"].get<double>(), diag["no_output_ms"].get<double>(),
                   diag.value("full_over_compute_only", 0.0));
      }
    }
    report["cases"] = cases;
    io::write_file_atomically(out_path, report.dump(1) + "\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_grouped_gemm: error: {}\n", e.what());
    return 1;
  }
}
