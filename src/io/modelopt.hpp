// The ModelOpt NVFP4 checkpoint layout, as fp4moe reads and writes it
// (docs/checkpoints.md): tensor names, hf_quant_config.json, and one NVFP4
// matrix as its four tensors.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp4moe/format.hpp"
#include "fp4moe/checkpoint.hpp"
#include "io/problem_list.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io::modelopt {

inline constexpr const char* kQuantConfigFile = "hf_quant_config.json";
inline constexpr const char* kModelConfigFile = "config.json";
inline constexpr const char* kProjections[3] = {"gate_proj", "up_proj", "down_proj"};
// No calibration data: activations are not measured, so input_scale is 1
// (docs/checkpoints.md says what that means for engines that use it).
inline constexpr float kUncalibratedInputScale = 1.0f;

// "model.layers.{L}.mlp." and what hangs below it.
std::string mlp_prefix(int64_t layer);
std::string expert_prefix(int64_t layer, int64_t expert);  // "...mlp.experts.{e}."
std::string shared_prefix(int64_t layer);                   // "...mlp.shared_experts."
std::string router_weight_name(int64_t layer);              // "...mlp.gate.weight"
std::string correction_bias_name(int64_t layer);            // "...mlp.gate.e_score_correction_bias"

// "model.layers.{L}.mlp.experts.{e}.{proj}.{field}" or "...shared_experts.{proj}.{field}".
struct ExpertTensorName {
  int64_t layer = 0;
  int64_t expert = -1;  // -1: the shared expert
  std::string projection, field;  // "gate_proj", "weight_scale"
};
std::optional<ExpertTensorName> parse_expert_tensor_name(const std::string& name);

// The layers that hold routed-expert tensors, ascending.
std::vector<int64_t> moe_layers(const std::vector<std::string>& names);

// hf_quant_config.json (or config.json's quantization_config): throws unless
// quant_algo is NVFP4 with group_size 16. Returns the file it read.
std::string require_nvfp4_quant_config(const std::string& dir);
bool has_quant_config(const std::string& dir);
// The hf_quant_config.json fp4moe writes.
std::string quant_config_json(const std::vector<std::string>& exclude_modules);

// The NVFP4 matrix stored under `prefix` ("...gate_proj."): weight U8 [rows, cols/2],
// weight_scale F8_E4M3 [rows, cols/16] (no NaN, no negative), weight_scale_2
// F32 scalar (finite, > 0); input_scale, when present, F32 scalar finite > 0.
// Every problem goes to `problems` (under `order`); nullopt when there was one.
// read_codes false checks the weights' dtype and shape without copying them
// (and leaves packed and scales empty): what inspect needs.
struct LoadedNvfp4 {
  Fp4Matrix matrix;
  bool has_input_scale = false;
};
std::optional<LoadedNvfp4> load_nvfp4_matrix(const TensorStore& store, const std::string& prefix, int64_t rows,
                                             int64_t cols, const std::string& shape_source, ProblemList& problems,
                                             int64_t order, bool read_codes = true);

// One MoE layer of the ModelOpt checkpoint in `dir` whose tensors `store`
// holds, checked against `cfg` (config.json), every problem recorded rather
// than thrown: load_moe_layer throws them, inspect lists them.
MoeCheckpointLayer read_moe_layer(const std::string& dir, const TensorStore& store, const MoeConfig& cfg, int64_t layer,
                                  ProblemList& problems, bool read_codes);

// Appends the four tensors of `m` under `prefix`; they point into `m` (and a
// static input_scale), which must outlive the write.
void append_nvfp4_tensors(std::vector<TensorToWrite>& out, const std::string& prefix, const Fp4Matrix& m);

}  // namespace fp4moe::io::modelopt
