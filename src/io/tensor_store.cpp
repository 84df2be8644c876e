// TensorStore: opening single-file and sharded checkpoints, with the index
// checked against the shards it names.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_index(const std::string& path) {
  std::ifstream f(path);
  FP4MOE_CHECK(f.good(), path << ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  FP4MOE_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
               path << ": has no \"weight_map\" object");
  return j;
}

// Shard names come from a file: keep them inside the checkpoint directory.
void check_shard_name(const std::string& shard, const std::string& index_path) {
  const fs::path p(shard);
  bool escapes = p.is_absolute() || shard.empty();
  for (const fs::path& part : p) escapes = escapes || part == "..";
  FP4MOE_CHECK(!escapes, index_path << ": shard name '" << shard << "' is not a file inside the checkpoint directory");
}

}  // namespace

std::string TensorRef::where() const { return "tensor '" + info->name + "' in " + file->path(); }

TensorStore TensorStore::open(const std::string& path) {
  TensorStore s;
  s.path_ = path;
  std::map<std::string, TensorRef> refs;
  if (!fs::is_directory(path)) {
    s.files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const TensorInfo& t : s.files_[0]->layout().tensors) refs[t.name] = TensorRef{s.files_[0].get(), &t};
  } else if (fs::exists(fs::path(path) / kIndexFileName)) {
    const std::string index_path = (fs::path(path) / kIndexFileName).string();
    const nlohmann::json index = read_index(index_path);
    std::map<std::string, SafetensorsFile*> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      FP4MOE_CHECK(it.value().is_string(), index_path << ": weight_map entry '" << it.key() << "' is not a file name");
      const std::string shard = it.value().get<std::string>();
      check_shard_name(shard, index_path);
      if (!shards.count(shard)) {
        s.files_.push_back(std::make_unique<SafetensorsFile>((fs::path(path) / shard).string()));
        shards[shard] = s.files_.back().get();
      }
      const TensorInfo* info = shards[shard]->find(it.key());
      FP4MOE_CHECK(info != nullptr, index_path << " puts tensor '" << it.key() << "' in " << shard
                                               << ", which does not hold it");
      refs[it.key()] = TensorRef{shards[shard], info};
    }
  } else {
    const fs::path single = fs::path(path) / kSingleFileName;
    FP4MOE_CHECK(fs::exists(single), path << ": holds neither " << kIndexFileName << " nor " << kSingleFileName);
    s.files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const TensorInfo& t : s.files_[0]->layout().tensors) refs[t.name] = TensorRef{s.files_[0].get(), &t};
  }
  s.index_.assign(refs.begin(), refs.end());
  return s;
}

bool TensorStore::contains(const std::string& name) const {
  return std::binary_search(index_.begin(), index_.end(), std::make_pair(name, TensorRef{}),
                            [](const auto& a, const auto& b) { return a.first < b.first; });
}

TensorRef TensorStore::get(const std::string& name) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), name,
                                   [](const auto& a, const std::string& n) { return a.first < n; });
  FP4MOE_CHECK(it != index_.end() && it->first == name, path_ << ": no tensor '" << name << "'");
  return it->second;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> n;
  n.reserve(index_.size());
  for (const auto& [name, ref] : index_) n.push_back(name);
  return n;
}

}  // namespace fp4moe::io
