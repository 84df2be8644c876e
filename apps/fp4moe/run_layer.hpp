// Shared by `fp4moe run` (cmd_run.cpp) and its replay mode (run_replay.cpp):
// the layer to run, from a checkpoint or a preset with random weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/device.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/model.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe::cli {

struct RunLayer {
  MoeConfig cfg;
  MoeWeights weights;
  std::string source;              // "checkpoint DIR, layer L" or "random nvfp4, seed S"
  std::vector<std::string> notes;  // how the checkpoint was read
};

std::string describe_model(const MoeConfig& cfg);
// --model: a preset's name, or a Hugging Face config.json.
MoeConfig model_config(const std::string& preset_or_json);

// --input IN --output OUT [--check]: run `layer` on IN's hidden_states (and
// router_logits) and write what it computed to OUT.
struct ReplayRequest {
  std::string input, output;
  bool check = false;
  bool deterministic = false;
};
void replay_on_gpu(const RunLayer& layer, const ReplayRequest& r, const DeviceInfo& dev);
void replay_on_cpu(const RunLayer& layer, const ReplayRequest& r, const std::string& why_no_gpu);

// --ep G / --tp G: the layer across G local GPUs, one thread per GPU
// (run_parallel.cpp); each rank's output against the single-GPU layer.
struct ParallelRequest {
  std::string mode;                     // "ep" (expert parallelism) or "tp"
  std::string dispatch = "allgather";   // ep: "allgather" or "alltoall"
  int64_t capacity = -1;                // alltoall rows per peer (-1: the largest token count)
  int ranks = 1;
  std::vector<int64_t> tokens = {1};    // per rank
  uint64_t seed = 1;
  int reps = 20;
  int warmup_forwards = 0;              // back-to-back forwards before each token count's timings
  bool check = false;
  std::string json_out;                 // the results as JSON, or empty
  // Each rank's layer options (activations, granule, split-K, tune cache):
  // max_tokens, device and finalize are the run's own.
  LayerOptions layer;
};
void run_parallel(const RunLayer& layer, const ParallelRequest& r, const std::vector<DeviceInfo>& devs);

}  // namespace fp4moe::cli
