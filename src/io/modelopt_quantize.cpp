// quantize_checkpoint: a bf16/fp32 MoE checkpoint to ModelOpt NVFP4, as
// ModelOpt's own export writes it (docs/formats.md). Each input shard becomes
// an output shard of the same name; the expert weights are quantized (in
// parallel, per tensor), every other tensor is copied byte for byte.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/parallel.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/error.hpp"
#include "io/atomic_file.hpp"
#include "io/modelopt.hpp"

namespace fp4moe {
namespace {

namespace fs = std::filesystem;
using io::TensorRef;

// Routed and shared experts' projection weights are quantized; nothing else.
bool is_quantized_weight(const std::string& name) {
  const auto n = io::modelopt::parse_expert_tensor_name(name);
  return n && n->field == "weight";
}

void check_quantizable(const TensorRef& t) {
  io::expect_dtype(t, {io::Dtype::BF16, io::Dtype::F32});
  FP4MOE_CHECK(t.info->shape.size() == 2, t.where() << " has shape " << io::shape_string(t.info->shape)
                                                    << "; an expert projection is a matrix [N, K]");
  FP4MOE_CHECK(t.info->shape[1] % kNvfp4BlockSize == 0, t.where() << " has K = " << t.info->shape[1]
                                                                  << " columns, not a multiple of the NVFP4 block "
                                                                  << kNvfp4BlockSize);
}

// BF16 widens to fp32 exactly, so every step below sees the same values ModelOpt does.
Fp4Matrix quantize_tensor(const TensorRef& t, float amax) {
  check_quantizable(t);
  try {
    const std::vector<float> x = io::read_floats(t);
    return quantize_nvfp4(x.data(), t.info->shape[0], t.info->shape[1], amax);
  } catch (const Error& e) {
    throw Error(t.where() + ": " + e.what());
  }
}

// The amax each weight is quantized with. ModelOpt's export gives an expert's
// gate_proj and up_proj (routed and shared alike) one amax, the larger of the
// two, since engines fuse them into one GEMM with one weight_scale_2;
// down_proj keeps its own. Keyed by tensor name.
std::map<std::string, float> export_amax(const io::TensorStore& store, const std::vector<std::string>& weights) {
  std::vector<float> own(weights.size());
  detail::parallel_for(int64_t(weights.size()), [&](int64_t i) {
    const TensorRef t = store.get(weights[size_t(i)]);
    check_quantizable(t);
    const std::vector<float> x = io::read_floats(t);
    try {
      own[size_t(i)] = nvfp4_amax(x.data(), t.info->shape[0], t.info->shape[1]);
    } catch (const Error& e) {
      throw Error(t.where() + ": " + e.what());
    }
  });
  std::map<std::string, float> fused;  // expert prefix -> max(amax_gate, amax_up)
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto n = io::modelopt::parse_expert_tensor_name(weights[i]);
    if (n->projection == "down_proj") continue;
    const std::string prefix = weights[i].substr(0, weights[i].size() - (n->projection + ".weight").size());
    fused[prefix] = std::max(fused[prefix], own[i]);
  }
  std::map<std::string, float> amax;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto n = io::modelopt::parse_expert_tensor_name(weights[i]);
    const std::string prefix = weights[i].substr(0, weights[i].size() - (n->projection + ".weight").size());
    amax[weights[i]] = n->projection == "down_proj" ? own[i] : fused[prefix];
  }
  return amax;
}

// Files beside the tensors (config.json, tokenizer, ...) are copied; weight
// files and what quantize rewrites are not.
bool is_copied_file(const fs::path& p) {
  static const std::set<std::string> weights{".safetensors", ".bin", ".pt", ".pth", ".gguf"};
  const std::string name = p.filename().string();
  return !weights.count(p.extension().string()) && name != io::kIndexFileName && name != io::modelopt::kQuantConfigFile;
}

struct Shard {
  std::string name;  // relative to the checkpoint directory
  std::vector<std::string> tensors;
};

std::vector<Shard> shards_of(const io::TensorStore& store, const std::string& in_dir) {
  std::map<const io::SafetensorsFile*, Shard> by_file;
  for (const std::string& name : store.names()) {
    const TensorRef t = store.get(name);
    Shard& s = by_file[t.file];
    s.name = fs::relative(t.file->path(), in_dir).string();
    s.tensors.push_back(name);
  }
  std::vector<Shard> shards;
  for (auto& [file, s] : by_file) shards.push_back(std::move(s));
  std::sort(shards.begin(), shards.end(), [](const Shard& a, const Shard& b) { return a.name < b.name; });
  return shards;
}

}  // namespace

QuantizeSummary quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                    const std::function<void(const QuantizeProgress&)>& progress) {
  FP4MOE_CHECK(fs::is_directory(in_dir), in_dir << ": not a checkpoint directory");
  FP4MOE_CHECK(!io::modelopt::has_quant_config(in_dir),
               in_dir << ": already quantized (it has a quantization config); quantize takes a bf16 or fp32 checkpoint");
  config_from_hf_json((fs::path(in_dir) / io::modelopt::kModelConfigFile).string());  // a readable MoE config, or an error
  const io::TensorStore store = io::TensorStore::open(in_dir);
  const std::vector<Shard> shards = shards_of(store, in_dir);

  std::vector<std::string> weights;
  for (const std::string& name : store.names())
    if (is_quantized_weight(name)) weights.push_back(name);
  const std::map<std::string, float> amax = export_amax(store, weights);

  QuantizeProgress p;
  for (const std::string& name : store.names()) {
    p.tensors_total += 1;
    p.bytes_total += int64_t(store.get(name).info->bytes());
  }
  QuantizeSummary summary;
  nlohmann::json weight_map = nlohmann::json::object();
  std::set<std::string> excluded;

  io::AtomicDirectory out(out_dir);
  for (const Shard& shard : shards) {
    p.file = shard.name;
    std::vector<std::string> to_quantize;
    for (const std::string& name : shard.tensors)
      if (is_quantized_weight(name)) to_quantize.push_back(name);
    std::vector<Fp4Matrix> quantized(to_quantize.size());
    // Chunks of work between progress reports, each spread over the threads.
    const int64_t chunk = 64;
    for (int64_t first = 0; first < int64_t(to_quantize.size()); first += chunk) {
      const int64_t n = std::min<int64_t>(chunk, int64_t(to_quantize.size()) - first);
      detail::parallel_for(n, [&](int64_t i) {
        const std::string& name = to_quantize[size_t(first + i)];
        quantized[size_t(first + i)] = quantize_tensor(store.get(name), amax.at(name));
      });
      for (int64_t i = 0; i < n; ++i) p.bytes_done += int64_t(store.get(to_quantize[size_t(first + i)]).info->bytes());
      p.tensors_done += n;
      if (progress) progress(p);
    }

    std::vector<io::TensorToWrite> tensors;
    size_t q = 0;
    for (const std::string& name : shard.tensors) {
      if (q < to_quantize.size() && to_quantize[q] == name) {
        const std::string prefix = name.substr(0, name.size() - std::string("weight").size());
        io::modelopt::append_nvfp4_tensors(tensors, prefix, quantized[q++]);
        summary.quantized_tensors += 1;
        continue;
      }
      const TensorRef t = store.get(name);
      tensors.push_back({name, t.info->dtype, t.info->shape, t.data(), t.info->bytes()});
      summary.copied_tensors += 1;
      p.tensors_done += 1;
      p.bytes_done += int64_t(t.info->bytes());
      const std::string suffix = ".weight";
      if (t.info->shape.size() == 2 && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        excluded.insert(name.substr(0, name.size() - suffix.size()));
    }
    for (const io::TensorToWrite& t : tensors) {
      weight_map[t.name] = shard.name;
      summary.bytes_out += int64_t(t.bytes);
    }
    const fs::path shard_path = fs::path(out.temp_path()) / shard.name;
    fs::create_directories(shard_path.parent_path());
    io::write_safetensors(shard_path.string(), tensors, {{"format", "pt"}});
    summary.files.push_back(shard.name);
    if (progress) progress(p);
  }
  summary.bytes_in = p.bytes_total;
  FP4MOE_CHECK(summary.quantized_tensors > 0,
               in_dir << ": no expert weights to quantize (model.layers.{L}.mlp.experts.{e}.{gate,up,down}_proj.weight)");

  if (fs::exists(fs::path(in_dir) / io::kIndexFileName)) {
    const nlohmann::json index = {{"metadata", {{"total_size", summary.bytes_out}}}, {"weight_map", weight_map}};
    io::write_file_atomically((fs::path(out.temp_path()) / io::kIndexFileName).string(), index.dump(2) + "\n");
    summary.files.push_back(io::kIndexFileName);
  }
  try {
    for (const fs::directory_entry& e : fs::directory_iterator(in_dir)) {
      if (!e.is_regular_file() || !is_copied_file(e.path())) continue;
      fs::copy_file(e.path(), fs::path(out.temp_path()) / e.path().filename());
      summary.files.push_back(e.path().filename().string());
    }
  } catch (const fs::filesystem_error& e) {
    throw Error(std::string("copying the checkpoint's other files: ") + e.what());
  }
  io::write_file_atomically((fs::path(out.temp_path()) / io::modelopt::kQuantConfigFile).string(),
                            io::modelopt::quant_config_json({excluded.begin(), excluded.end()}));
  summary.files.push_back(io::modelopt::kQuantConfigFile);
  out.commit();
  return summary;
}

}  // namespace fp4moe
