// The autotuner's persistent cache: a JSON file of measured best tiles, one
// section per (GPU, driver, runtime, fp4moe version), one entry per (kernel
// family, format, N, K, E, token bucket). Written atomically, merged on save; a
// section for another GPU or version is kept in the file but never used.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace fp4moe::plan {

// Per-expert token buckets: powers of two up to 256, then steps of 256.
int64_t token_bucket(double tokens_per_expert);
std::vector<int64_t> token_buckets_up_to(int64_t max_bucket);

struct TuneContext {  // what a measurement is valid for
  std::string gpu;    // device name
  int cc = 0;
  int driver = 0, runtime = 0;
  std::string fp4moe_version;
  bool operator==(const TuneContext&) const = default;
  std::string describe() const;
};

struct TuneKey {
  std::string family;  // "grouped swiglu", "grouped store split-k", ...
  std::string format;  // "nvfp4", "mxfp4"
  int64_t n = 0, k = 0, experts = 0, bucket = 0;
  std::string str() const;
  auto operator<=>(const TuneKey&) const = default;
};

struct TuneEntry {
  std::string tile;          // the tuned tile's name (plan::gemm_tile_name)
  int stages = 0;
  double ms = 0;             // its median time
  std::string default_tile;  // what the planner's ranking would have chosen
  double default_ms = 0;
};

// find(), put(), size() and save() may run on any threads at once: a layer
// plans a forward (find) on one thread while tune() measures and puts on
// another. The path, context and notice are fixed by load().
class TuneCache {
 public:
  TuneCache() = default;
  // A copy takes the other's entries under its lock, with a mutex of its own.
  TuneCache(const TuneCache& other);
  TuneCache& operator=(const TuneCache& other);

  // The file's path: `explicit_path`, else $FP4MOE_CACHE, else
  // $XDG_CACHE_HOME/fp4moe/tune.json, else $HOME/.cache/fp4moe/tune.json.
  static std::string default_path(const std::string& explicit_path = "");

  // Loads `path` for `ctx`. A missing file is an empty cache; a file without a
  // section for `ctx` is an empty cache with `notice()` saying why; so is a
  // corrupt file (unparseable, cut short, another schema, an entry of any
  // section without a tile or with no stages or time): never trusted, and
  // replaced by save().
  static TuneCache load(const std::string& path, const TuneContext& ctx);

  std::optional<TuneEntry> find(const TuneKey& key) const;
  void put(const TuneKey& key, const TuneEntry& entry);
  size_t size() const;
  const std::string& notice() const { return notice_; }
  const std::string& path() const { return path_; }

  // Re-reads the file, merges this context's entries into it (ours win), keeps
  // every other section, and replaces the file atomically (temp file + rename);
  // a file load() would call corrupt is replaced whole.
  void save() const;

 private:
  std::string path_, notice_;
  TuneContext ctx_;
  mutable std::mutex mutex_;  // guards entries_
  std::map<TuneKey, TuneEntry> entries_;
};

}  // namespace fp4moe::plan
