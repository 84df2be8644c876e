#include "plan/tune_cache.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "io/atomic_file.hpp"

namespace fp4moe::plan {
namespace {

using json = nlohmann::json;
constexpr int kFileVersion = 1;

json context_json(const TuneContext& c) {
  return {{"gpu", c.gpu}, {"cc", c.cc}, {"driver", c.driver}, {"runtime", c.runtime}, {"fp4moe", c.fp4moe_version}};
}
TuneContext context_of(const json& j) {
  TuneContext c;
  c.gpu = j.at("gpu").get<std::string>();
  c.cc = j.at("cc").get<int>();
  c.driver = j.at("driver").get<int>();
  c.runtime = j.at("runtime").get<int>();
  c.fp4moe_version = j.at("fp4moe").get<std::string>();
  return c;
}

// The file's JSON, or an empty object where there is none; `why` says what
// is wrong with a file that is there but is no tune cache of this format
// (unparseable, cut short, another schema): such a file is never trusted.
json read_file(const std::string& path, std::string& why) {
  std::ifstream f(path);
  if (!f.good()) return json::object();
  try {
    json j = json::parse(f);
    if (j.is_object() && j.value("format", 0) == kFileVersion && j.contains("sections") && j["sections"].is_array())
      return j;
    why = "not an fp4moe tune cache of format " + std::to_string(kFileVersion);
  } catch (const json::exception& e) {
    why = e.what();
  }
  return json::object();
}

TuneKey key_of(const json& e) {
  return {e.at("family").get<std::string>(), e.at("format").get<std::string>(), e.at("n").get<int64_t>(),
          e.at("k").get<int64_t>(), e.at("experts").get<int64_t>(), e.at("bucket").get<int64_t>()};
}

}  // namespace

int64_t token_bucket(double tokens_per_expert) {
  int64_t b = 1;
  while (b < 256 && double(b) < tokens_per_expert) b *= 2;
  if (double(b) >= tokens_per_expert) return b;
  while (double(b) < tokens_per_expert) b += 256;
  return b;
}

std::vector<int64_t> token_buckets_up_to(int64_t max_bucket) {
  std::vector<int64_t> v;
  for (int64_t b = 1; b <= max_bucket; b = b < 256 ? b * 2 : b + 256) v.push_back(b);
  return v;
}

std::string TuneContext::describe() const {
  std::ostringstream os;
  os << gpu << " (sm_" << cc << ", driver " << driver << ", runtime " << runtime << ", fp4moe " << fp4moe_version << ")";
  return os.str();
}

std::string TuneKey::str() const {
  std::ostringstream os;
  os << family << " " << format << " N " << n << " K " << k << " E " << experts << " bucket " << bucket;
  return os.str();
}

std::string TuneCache::default_path(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* p = std::getenv("FP4MOE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/fp4moe/tune.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/fp4moe/tune.json";
  return "fp4moe-tune.json";
}

TuneCache TuneCache::load(const std::string& path, const TuneContext& ctx) {
  TuneCache c;
  c.path_ = path;
  c.ctx_ = ctx;
  std::string why;
  const json file = read_file(path, why);
  if (!why.empty()) {
    c.notice_ = "tune cache " + path + " is corrupt (" + why + "): not used; tuning writes a new one";
    return c;
  }
  if (!file.contains("sections")) return c;
  std::vector<std::string> others;
  std::map<TuneKey, TuneEntry> entries;
  try {
    for (const json& s : file["sections"]) {
      const TuneContext sc = context_of(s.at("context"));
      if (!(sc == ctx)) {
        others.push_back(sc.describe());
        continue;
      }
      for (const json& e : s.at("entries")) {
        const TuneEntry t{e.at("tile").get<std::string>(), e.at("stages").get<int>(), e.at("ms").get<double>(),
                          e.value("default_tile", ""), e.value("default_ms", 0.0)};
        if (t.tile.empty() || t.stages < 1 || !(t.ms > 0) || !std::isfinite(t.ms))
          throw Error("entry " + key_of(e).str() + " has tile '" + t.tile + "', " + std::to_string(t.stages) +
                      " stages, " + std::to_string(t.ms) + " ms");
        entries[key_of(e)] = t;
      }
    }
  } catch (const std::exception& e) {  // a section or entry of another shape: the whole file is suspect
    c.notice_ = "tune cache " + path + " is corrupt (" + e.what() + "): not used; tuning writes a new one";
    return c;
  }
  c.entries_ = std::move(entries);
  if (c.entries_.empty() && !others.empty()) {
    std::string list;
    for (const auto& o : others) list += (list.empty() ? "" : "; ") + o;
    c.notice_ = "tune cache " + path + " ignored: it was made for " + list + ", this is " + ctx.describe();
  }
  return c;
}

std::optional<TuneEntry> TuneCache::find(const TuneKey& key) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuneCache::put(const TuneKey& key, const TuneEntry& entry) { entries_[key] = entry; }

void TuneCache::save() const {
  std::string why;
  json file = read_file(path_, why);  // a corrupt file is replaced, not merged
  if (!file.contains("sections")) file = {{"format", kFileVersion}, {"sections", json::array()}};
  json* mine = nullptr;
  try {
    for (json& s : file["sections"])
      if (context_of(s.at("context")) == ctx_) mine = &s;
    if (mine)
      for (const json& e : (*mine).at("entries")) (void)key_of(e);
  } catch (const json::exception&) {  // a section of another shape: start the file afresh
    file = {{"format", kFileVersion}, {"sections", json::array()}};
    mine = nullptr;
  }
  if (!mine) {
    file["sections"].push_back({{"context", context_json(ctx_)}, {"entries", json::array()}});
    mine = &file["sections"].back();
  }
  std::map<TuneKey, json> merged;
  for (const json& e : (*mine)["entries"]) merged[key_of(e)] = e;
  for (const auto& [k, v] : entries_)
    merged[k] = {{"family", k.family}, {"format", k.format},      {"n", k.n},
                 {"k", k.k},           {"experts", k.experts},    {"bucket", k.bucket},
                 {"tile", v.tile},     {"stages", v.stages},      {"ms", v.ms},
                 {"default_tile", v.default_tile}, {"default_ms", v.default_ms}};
  json entries = json::array();
  for (auto& [k, v] : merged) entries.push_back(v);
  (*mine)["entries"] = entries;

  const std::filesystem::path target(path_);
  if (target.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    FP4MOE_CHECK(!ec, "tune cache: cannot create the directory " << target.parent_path().string() << ": " << ec.message());
  }
  io::write_file_atomically(path_, file.dump(1) + "\n");
}

}  // namespace fp4moe::plan
