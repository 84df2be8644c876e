// Checkpoints on disk in the layout NVIDIA's Model Optimizer (ModelOpt) writes
// for NVFP4: safetensors files (one, or shards with
// model.safetensors.index.json), config.json and hf_quant_config.json.
// docs/checkpoints.md lists the tensor names, the checks and the conventions.
// Every problem is an fp4moe::Error naming the file, the tensor and the value.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp4moe/model.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe {

// One MoE layer of a ModelOpt NVFP4 checkpoint: its config (from config.json)
// and its weights, as MoeLayer and the CPU reference take them. Each matrix
// keeps its own weight_scale_2, so gate and up with different scales are
// computed exactly. The router weight is
// kept as bf16 bits (an fp32 router is rounded to nearest even).
struct MoeCheckpointLayer {
  MoeConfig config;
  MoeWeights weights;
  int64_t layer = 0;
  std::vector<std::string> notes;  // how the tensors were read, e.g. "input_scale present, unused (W4A16)"
};
// Also reads gpt-oss's own MXFP4 checkpoints (config.json's quantization_config
// quant_method "mxfp4"): experts with biases, the router's weight and bias.
MoeCheckpointLayer load_moe_layer(const std::string& dir, int64_t layer);

// Writes `layer` as a ModelOpt NVFP4 checkpoint directory holding that one
// MoE layer: config.json (from the config; shared_intermediate must be a
// multiple of intermediate), hf_quant_config.json and model.safetensors. NVFP4
// weights only. dir must not exist or be empty; it appears whole or not at all.
void save_moe_layer(const std::string& dir, const MoeCheckpointLayer& layer);

// Turns a bf16 or fp32 MoE checkpoint (directory) into ModelOpt NVFP4 in
// out_dir: routed and shared experts' gate/up/down_proj.weight become weight
// (U8), weight_scale (F8_E4M3), weight_scale_2 and input_scale (F32 scalars);
// every other tensor and file is copied. out_dir must not exist or be empty;
// it appears complete or not at all.
struct QuantizeProgress {
  int64_t tensors_done = 0, tensors_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;  // input bytes
  std::string file;                         // the shard being written
};
struct QuantizeSummary {
  int64_t quantized_tensors = 0, copied_tensors = 0;
  int64_t bytes_in = 0, bytes_out = 0;  // tensor bytes
  std::vector<std::string> files;       // written, relative to out_dir
};
QuantizeSummary quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                    const std::function<void(const QuantizeProgress&)>& progress = {});

// What a checkpoint directory or a single .safetensors file holds and what
// fp4moe would do with it, as report lines. A ModelOpt NVFP4 checkpoint's MoE
// layers (every one, or `layer` when >= 0) are checked by the loader's own
// validation; every problem it finds (file, tensor, value) is in `problems`,
// and a checkpoint with any cannot be used.
struct CheckpointSummary {
  bool nvfp4 = false;               // ModelOpt NVFP4 (hf_quant_config.json)
  std::vector<int64_t> moe_layers;  // layers holding routed experts
  int64_t tensors = 0, bytes = 0;
  std::vector<std::string> lines;
  std::vector<std::string> problems;
  bool usable() const { return problems.empty(); }
};
CheckpointSummary inspect_checkpoint(const std::string& path, bool every_tensor = false, int64_t layer = -1);

}  // namespace fp4moe
