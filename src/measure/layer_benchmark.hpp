// The layer benchmark behind `fp4moe bench` (docs/benchmarks.md): ceilings of
// this run, then per token count the layer and each GEMM (median, min, max),
// bytes, FLOPs and the roofline floor, and the cuBLAS bf16 per-expert peer on
// the same routing. The peer engines (PyTorch, Humming, triton_kernels) are added
// by bench/peers.py on the inputs the run writes (measure/peer_inputs.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp4moe/layer.hpp"
#include "measure/ceilings.hpp"

namespace fp4moe {

struct LayerBenchOptions {
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 1024, 2048};
  int reps = 30;
  // The headline is the steady state a busy server runs at: back-to-back
  // replays for this long before each case's timed ones (the after-idle burst
  // is reported beside it).
  double warm_seconds = 2.0;
  bool skewed = true;  // each case also under Zipf-skewed routing (skewed_cases)
  bool cublas_peer = true;
  // Where to write the run's inputs for the peer engines (measure/peer_inputs.hpp);
  // empty: not written.
  std::string peer_inputs;
  LayerOptions layer;
};

// Runs the benchmark on the current device; returns the report as JSON
// (schema: docs/benchmarks.md). progress(done, total, what) is called per step.
nlohmann::json run_layer_benchmark(const MoeConfig& cfg, const MoeWeights& weights, const LayerBenchOptions& opts,
                                   const std::function<void(int, int, const std::string&)>& progress = {});

// CSV (one row per token count and kernel) and an SVG chart (fraction of the
// roofline floor, and speedup over the peers, against tokens per expert).
std::string layer_bench_csv(const nlohmann::json& report);
std::string layer_bench_svg(const nlohmann::json& report);
std::string layer_bench_table(const nlohmann::json& report);
// fp4moe beside each peer engine variant, per step (layer, GEMM1, GEMM2); empty without peers.
std::string layer_bench_peer_table(const nlohmann::json& report);

}  // namespace fp4moe
