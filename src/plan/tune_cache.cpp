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

json entry_json(const TuneKey& k, const TuneEntry& v) {
  return {{"family", k.family}, {"format", k.format},      {"n", k.n},
          {"k", k.k},           {"experts", k.experts},    {"bucket", k.bucket},
          {"tile", v.tile},     {"stages", v.stages},      {"ms", v.ms},
          {"default_tile", v.default_tile}, {"default_ms", v.default_ms}};
}

struct Section {
  TuneContext context;
  std::map<TuneKey, TuneEntry> entries;
};

// Every section of the file, each entry as the tuner writes it (a tile, at
// least one stage, a positive finite time); throws on a section or entry of
// any other shape. One definition of a corrupt file: load() trusts none of
// it, save() replaces it whole rather than carry a bad entry on.
std::vector<Section> checked_sections(const json& file) {
  std::vector<Section> out;
  if (!file.contains("sections")) return out;
  for (const json& s : file.at("sections")) {
    Section section{context_of(s.at("context")), {}};
    for (const json& e : s.at("entries")) {
      const TuneEntry t{e.at("tile").get<std::string>(), e.at("stages").get<int>(), e.at("ms").get<double>(),
                        e.value("default_tile", ""), e.value("default_ms", 0.0)};
      if (t.tile.empty() || t.stages < 1 || !(t.ms > 0) || !std::isfinite(t.ms))
        throw Error("entry " + key_of(e).str() + " has tile '" + t.tile + "', " + std::to_string(t.stages) +
                    " stages, " + std::to_string(t.ms) + " ms");
      section.entries[key_of(e)] = t;
    }
    out.push_back(std::move(section));
  }
  return out;
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
  std::vector<Section> sections;
  try {
    sections = checked_sections(file);
  } catch (const std::exception& e) {  // a section or entry of another shape: the whole file is suspect
    c.notice_ = "tune cache " + path + " is corrupt (" + e.what() + "): not used; tuning writes a new one";
    return c;
  }
  std::vector<std::string> others;
  std::map<TuneKey, TuneEntry> entries;
  for (const Section& s : sections) {
    if (!(s.context == ctx)) {
      others.push_back(s.context.describe());
      continue;
    }
    for (const auto& [k, v] : s.entries) entries[k] = v;
  }
  c.entries_ = std::move(entries);
  if (c.entries_.empty() && !others.empty()) {
    std::string list;
    for (const auto& o : others) list += (list.empty() ? "" : "; ") + o;
    c.notice_ = "tune cache " + path + " ignored: it was made for " + list + ", this is " + ctx.describe();
  }
  return c;
}

TuneCache::TuneCache(const TuneCache& other) {
  const std::lock_guard<std::mutex> lock(other.mutex_);
  path_ = other.path_, notice_ = other.notice_, ctx_ = other.ctx_, entries_ = other.entries_;
}

TuneCache& TuneCache::operator=(const TuneCache& other) {
  if (this == &other) return *this;
  const std::scoped_lock lock(mutex_, other.mutex_);
  path_ = other.path_, notice_ = other.notice_, ctx_ = other.ctx_, entries_ = other.entries_;
  return *this;
}

std::optional<TuneEntry> TuneCache::find(const TuneKey& key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuneCache::put(const TuneKey& key, const TuneEntry& entry) {
  const std::lock_guard<std::mutex> lock(mutex_);
  entries_[key] = entry;
}

size_t TuneCache::size() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void TuneCache::save() const {
  std::string why;
  std::vector<Section> sections;
  try {
    sections = checked_sections(read_file(path_, why));
  } catch (const std::exception&) {  // corrupt, as load() says: replaced whole, not merged
    sections.clear();
  }
  // This context's entries from the file, ours over them, in one section.
  std::map<TuneKey, TuneEntry> mine;
  std::vector<Section> kept;
  for (Section& s : sections) {
    if (s.context == ctx_)
      mine.merge(s.entries);
    else
      kept.push_back(std::move(s));
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);  // the file's I/O stays outside it
    for (const auto& [k, v] : entries_) mine[k] = v;
  }
  kept.push_back({ctx_, std::move(mine)});
  json file = {{"format", kFileVersion}, {"sections", json::array()}};
  for (const Section& s : kept) {
    json entries = json::array();
    for (const auto& [k, v] : s.entries) entries.push_back(entry_json(k, v));
    file["sections"].push_back({{"context", context_json(s.context)}, {"entries", entries}});
  }

  const std::filesystem::path target(path_);
  if (target.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    FP4MOE_CHECK(!ec, "tune cache: cannot create the directory " << target.parent_path().string() << ": " << ec.message());
  }
  io::write_file_atomically(path_, file.dump(1) + "\n");
}

}  // namespace fp4moe::plan
