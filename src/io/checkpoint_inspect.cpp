// inspect_checkpoint: what a checkpoint (or one .safetensors file) holds,
// tensors grouped by name pattern, and what fp4moe would do with it. A
// ModelOpt checkpoint's MoE layers go through the loader's own validation
// (read_moe_layer), which reads the scales but not the FP4 codes.
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "fp4moe/checkpoint.hpp"
#include "fp4moe/error.hpp"
#include "io/gpt_oss.hpp"
#include "io/modelopt.hpp"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;

std::string human_bytes(int64_t b) {
  std::ostringstream os;
  os.precision(3);
  if (b >= (int64_t(1) << 30)) os << double(b) / double(int64_t(1) << 30) << " GiB";
  else if (b >= (int64_t(1) << 20)) os << double(b) / double(1 << 20) << " MiB";
  else os << b << " bytes";
  return os.str();
}

// "{3..60}" for a contiguous set, "{0, 2, 5}" otherwise (long lists cut).
std::string number_set(const std::set<int64_t>& s) {
  std::ostringstream os;
  if (s.size() == 1) {
    os << *s.begin();
  } else if (*s.rbegin() - *s.begin() + 1 == int64_t(s.size())) {
    os << '{' << *s.begin() << ".." << *s.rbegin() << '}';
  } else {
    int shown = 0;
    os << '{';
    for (int64_t v : s) {
      if (shown == 6) {
        os << ", ...";
        break;
      }
      os << (shown++ ? ", " : "") << v;
    }
    os << '}';
  }
  return os.str();
}

// Tensors grouped by name with the numeric components taken out, plus dtype and shape.
struct Group {
  std::vector<std::set<int64_t>> numbers;
  int64_t count = 0, bytes = 0;
};
std::vector<std::string> grouped_lines(const io::TensorStore& store) {
  std::map<std::string, Group> groups;  // key: pattern with '#' per number, dtype, shape
  std::map<std::string, std::string> shown;
  for (const std::string& name : store.names()) {
    const io::TensorInfo& t = *store.get(name).info;
    std::string pattern;
    std::vector<int64_t> numbers;
    std::istringstream parts(name);
    for (std::string part; std::getline(parts, part, '.');) {
      const bool numeric = !part.empty() && part.size() < 10 && part.find_first_not_of("0123456789") == std::string::npos;
      if (!pattern.empty()) pattern += '.';
      pattern += numeric ? std::string("#") : part;
      if (numeric) numbers.push_back(std::stoll(part));
    }
    const std::string key = pattern + "  " + io::dtype_name(t.dtype) + " " + io::shape_string(t.shape);
    Group& g = groups[key];
    g.numbers.resize(numbers.size());
    for (size_t i = 0; i < numbers.size(); ++i) g.numbers[i].insert(numbers[i]);
    g.count += 1;
    g.bytes += int64_t(t.bytes());
    shown[key] = pattern;
  }
  std::vector<std::string> lines;
  for (const auto& [key, g] : groups) {
    std::string text = key;
    for (const std::set<int64_t>& s : g.numbers) text.replace(text.find('#'), 1, number_set(s));
    std::ostringstream line;
    line << "  " << text;
    if (g.count > 1) line << "  x" << g.count;
    line << "  (" << human_bytes(g.bytes) << ")";
    lines.push_back(line.str());
  }
  return lines;
}

std::string describe_config(const MoeConfig& c) {
  std::ostringstream os;
  os << c.name << ": H " << c.hidden << ", I " << c.intermediate << ", E " << c.num_experts << ", top-" << c.top_k << ", "
     << (c.scoring == Scoring::sigmoid ? "sigmoid" : "softmax") << (c.use_correction_bias ? " + correction bias" : "")
     << (c.n_group > 1 ? ", " + std::to_string(c.n_group) + " groups (top " + std::to_string(c.topk_group) + ")" : "")
     << (c.renormalize ? ", renormalized" : "") << ", scale " << c.routed_scaling_factor
     << (c.shared_expert ? ", shared expert I " + std::to_string(c.shared_intermediate) : "");
  return os.str();
}

// The loader's validation (read_moe_layer) on every MoE layer asked for, without
// copying the FP4 codes; each problem it finds becomes a line.
void list_problems(const std::string& what, CheckpointSummary& s) {
  s.lines.push_back("problems (" + std::to_string(s.problems.size()) + "):");
  for (const std::string& p : s.problems) s.lines.push_back("  " + p);
  s.lines.push_back("fp4moe: this " + what + " cannot be used until the problems above are fixed");
}

// gpt-oss's own MXFP4 layout (config.json: quantization_config.quant_method "mxfp4").
void describe_gpt_oss(const std::string& path, const io::TensorStore& store, const std::optional<MoeConfig>& cfg,
                      int64_t only_layer, io::ProblemList& problems, CheckpointSummary& s) {
  s.lines.push_back("quantization: MXFP4, group 32 (gpt-oss layout: config.json quant_method mxfp4)");
  s.moe_layers = io::gpt_oss::moe_layers(store);
  std::vector<int64_t> checked = s.moe_layers;
  if (only_layer >= 0) checked = {only_layer};
  if (s.moe_layers.empty()) problems.add(-1, path + ": no MoE layers (model.layers.{L}.mlp.experts.gate_up_proj_blocks)");
  if (cfg)
    for (const int64_t layer : checked)
      problems.check(layer, [&] { io::gpt_oss::check_layer_tensors(store, *cfg, layer); });
  s.problems = problems.sorted();
  if (!s.problems.empty()) return list_problems("checkpoint", s);
  const std::string first = std::to_string(checked.front());
  s.lines.push_back("fp4moe: MoE layers " + number_set({checked.begin(), checked.end()}) +
                    " checked (dtypes and shapes; values as a layer loads): gate/up rows interleaved, expert and router "
                    "biases, clamped SwiGLU. `fp4moe run --checkpoint " + path + " --layer " + first + "` runs layer " +
                    first + " (GPU, or the CPU reference with --cpu)");
}

void describe_directory(const std::string& path, const io::TensorStore& store, int64_t only_layer, CheckpointSummary& s) {
  io::ProblemList problems;
  const std::string config = (fs::path(path) / io::modelopt::kModelConfigFile).string();
  std::optional<MoeConfig> cfg;
  if (problems.check(-2, [&] { cfg = config_from_hf_json(config); })) s.lines.push_back("config.json: " + describe_config(*cfg));
  if (io::gpt_oss::is_gpt_oss_checkpoint(path)) return describe_gpt_oss(path, store, cfg, only_layer, problems, s);
  bool quant_config = false;
  problems.check(-2, [&] { quant_config = io::modelopt::has_quant_config(path); });
  if (quant_config && problems.check(-2, [&] {
        s.lines.push_back("quantization: NVFP4, group 16 (" + io::modelopt::require_nvfp4_quant_config(path) + ")");
      }))
    s.nvfp4 = true;
  else if (!quant_config)
    s.lines.push_back("quantization: none (no hf_quant_config.json)");
  s.moe_layers = io::modelopt::moe_layers(store.names());
  std::vector<int64_t> checked = s.moe_layers;
  if (only_layer >= 0) checked = {only_layer};
  if (s.moe_layers.empty()) problems.add(-1, path + ": no MoE layers (model.layers.{L}.mlp.experts.{e}.*): nothing to run or quantize");

  std::vector<std::string> notes;
  if (s.nvfp4 && cfg && !s.moe_layers.empty())
    for (const int64_t layer : checked) {
      io::ProblemList found;
      const MoeCheckpointLayer l = io::modelopt::read_moe_layer(path, store, *cfg, layer, found, /*read_codes=*/false);
      for (std::string& p : found.sorted()) problems.add(layer, "layer " + std::to_string(layer) + ": " + p);
      if (notes.empty()) notes = l.notes;
    }
  s.problems = problems.sorted();
  const std::string layers = number_set({checked.begin(), checked.end()});
  if (!s.problems.empty()) return list_problems("checkpoint", s);
  const std::string first = std::to_string(checked.front());
  if (s.nvfp4) {
    for (const std::string& n : notes) s.lines.push_back("layer " + first + ": " + n);
    s.lines.push_back("fp4moe: MoE layers " + layers + " checked, they load as NVFP4 (W4A16: input_scale unused); e.g. " +
                      "`fp4moe run --checkpoint " + path + " --layer " + first + "` runs layer " + first +
                      " (GPU, or the CPU reference without one)");
  } else {
    int64_t n = 0;
    for (const std::string& name : store.names()) {
      const auto e = io::modelopt::parse_expert_tensor_name(name);
      n += e && e->field == "weight";
    }
    s.lines.push_back("fp4moe: MoE layers " + layers + ", not quantized: `fp4moe quantize --in " + path +
                      " --out DIR` makes NVFP4 of their " + std::to_string(n) + " expert weight tensors");
  }
}

void describe_file(const std::string& path, const io::TensorStore& store, CheckpointSummary& s) {
  if (store.contains("hidden_states")) {
    const io::TensorInfo& h = *store.get("hidden_states").info;
    s.lines.push_back("fp4moe: a replay input (hidden_states " + std::string(io::dtype_name(h.dtype)) + " " +
                      io::shape_string(h.shape) + (store.contains("router_logits") ? ", router_logits" : "") +
                      "): `fp4moe run --checkpoint DIR --layer L --input " + path + " --output OUT.safetensors`");
  } else if (store.contains("output") && store.contains("topk_ids")) {
    s.lines.push_back("fp4moe: a replay output (output, topk_ids, topk_weights" +
                      std::string(store.contains("reference_output") ? ", reference_output, error" : "") + ")");
  }
}

}  // namespace

CheckpointSummary inspect_checkpoint(const std::string& path, bool every_tensor, int64_t layer) {
  FP4MOE_CHECK(fs::exists(path), path << ": no such file or directory");
  const io::TensorStore store = io::TensorStore::open(path);
  CheckpointSummary s;
  for (const std::string& name : store.names()) s.bytes += int64_t(store.get(name).info->bytes());
  s.tensors = int64_t(store.names().size());
  const bool dir = fs::is_directory(path);
  s.lines.push_back(path + ": " + (dir ? "checkpoint directory, " : "safetensors file, ") + std::to_string(store.files().size()) +
                    " file(s), " + std::to_string(s.tensors) + " tensors, " + human_bytes(s.bytes));
  for (const auto& f : store.files()) {
    std::string meta;
    for (const auto& [k, v] : f->layout().metadata) meta += (meta.empty() ? " metadata {" : ", ") + k + ": " + v;
    s.lines.push_back("  " + f->path() + "  " + human_bytes(int64_t(f->size())) + (meta.empty() ? "" : meta + "}"));
  }
  s.lines.push_back("tensors" + std::string(every_tensor ? ":" : " (numbers in names grouped):"));
  if (every_tensor) {
    for (const std::string& name : store.names()) {
      const io::TensorRef t = store.get(name);
      s.lines.push_back("  " + name + "  " + io::dtype_name(t.info->dtype) + " " + io::shape_string(t.info->shape));
    }
  } else {
    for (std::string& l : grouped_lines(store)) s.lines.push_back(std::move(l));
  }
  if (dir) describe_directory(path, store, layer, s);
  else describe_file(path, store, s);
  return s;
}

}  // namespace fp4moe
