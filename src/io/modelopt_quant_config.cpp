// hf_quant_config.json: ModelOpt's statement of how a checkpoint is quantized.
// fp4moe reads NVFP4 with 16-element blocks (docs/formats.md) and nothing else.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "fp4moe/version.hpp"
#include "io/modelopt.hpp"

namespace fp4moe::io::modelopt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream f(path);
  FP4MOE_CHECK(f.good(), path << ": cannot open");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
}

// The quantization object: hf_quant_config.json's "quantization", else
// config.json's "quantization_config" (newer ModelOpt exports write both).
// Returns null when there is none; `source` names where it came from.
json find_quantization(const std::string& dir, std::string* source) {
  const std::string hf = (fs::path(dir) / kQuantConfigFile).string();
  if (fs::exists(hf)) {
    const json j = read_json(hf);
    FP4MOE_CHECK(j.is_object() && j.contains("quantization") && j["quantization"].is_object(),
                 hf << ": has no \"quantization\" object");
    *source = hf;
    return j["quantization"];
  }
  const std::string cfg = (fs::path(dir) / kModelConfigFile).string();
  if (fs::exists(cfg)) {
    const json j = read_json(cfg);
    if (j.is_object() && j.contains("quantization_config") && j["quantization_config"].is_object()) {
      *source = cfg + " (quantization_config)";
      return j["quantization_config"];
    }
  }
  return nullptr;
}

}  // namespace

bool has_quant_config(const std::string& dir) {
  std::string source;
  return !find_quantization(dir, &source).is_null();
}

std::string require_nvfp4_quant_config(const std::string& dir) {
  std::string source;
  const json q = find_quantization(dir, &source);
  FP4MOE_CHECK(!q.is_null(), dir << ": no " << kQuantConfigFile << " (nor a quantization_config in " << kModelConfigFile
                                 << "): not a ModelOpt checkpoint; `fp4moe quantize` makes one");
  const json algo = q.value("quant_algo", json());
  FP4MOE_CHECK(algo.is_string(), source << ": quant_algo is missing or not a string");
  FP4MOE_CHECK(algo.get<std::string>() == "NVFP4",
               source << ": quant_algo is '" << algo.get<std::string>() << "'; fp4moe reads NVFP4 checkpoints");
  const json group = q.value("group_size", json());
  FP4MOE_CHECK(group.is_null() || (group.is_number_integer() && group.get<int64_t>() == kNvfp4BlockSize),
               source << ": group_size is " << group.dump() << "; NVFP4 blocks are " << kNvfp4BlockSize << " elements");
  FP4MOE_CHECK(!group.is_null() || source.find(kQuantConfigFile) == std::string::npos,
               source << ": group_size is missing (NVFP4 needs 16)");
  return source;
}

std::string quant_config_json(const std::vector<std::string>& exclude_modules) {
  const json j = {
      {"producer", {{"name", "fp4moe"}, {"version", kVersion}}},
      {"quantization",
       {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", kNvfp4BlockSize},
        {"exclude_modules", exclude_modules}}},
  };
  return j.dump(4) + "\n";
}

}  // namespace fp4moe::io::modelopt
