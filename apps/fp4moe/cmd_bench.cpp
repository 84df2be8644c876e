// fp4moe bench: the ceilings of this run, then the layer and each GEMM per token
// count against the roofline floor and the peers (cuBLAS bf16 inside the binary;
// the engines of bench/peers.py, on this run's weights, hidden states and logits,
// when their Python packages are present); JSON, CSV, a Markdown table and an
// SVG chart. Without a GPU: the planner and the CPU reference.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "format/prepare_gemm.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "io/atomic_file.hpp"
#include "plan/arch.hpp"
#include "plan/gemm_plan.hpp"
#include "progress.hpp"
#include "run_layer.hpp"
#include "measure/layer_benchmark.hpp"

#ifndef FP4MOE_SOURCE_DIR
#define FP4MOE_SOURCE_DIR ""
#endif

namespace fp4moe::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The engines of bench/peers.py (its ENGINES), as --peers names them.
constexpr std::array<const char*, 3> kPeerEngines = {"torch", "humming", "triton_kernels"};

std::string peer_engines_joined(const char* sep) {
  std::string s;
  for (const char* e : kPeerEngines) s += (s.empty() ? "" : sep) + std::string(e);
  return s;
}

struct BenchOptions {
  std::string model = "glm5";
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 1024, 2048};
  std::string out = "bench-out";
  std::string peers_script;
  std::string cache;
  int reps = 30;
  bool deterministic = false;
  std::string finalize = "auto";
  int64_t feature_granule = 0;
  std::string activations = "bf16";
  bool fp8_rounds_nvfp4 = false;
  std::string format = "auto";  // the model's checkpoint format, or nvfp4 / mxfp4
  bool no_split_k = false;
  bool shared_expert_in_routed = false;
  bool balanced_split = false;
  bool no_peers = false;
  std::string peers = peer_engines_joined(",");
  std::string peers_dir;  // where scripts/fetch-peers.sh left the peer engines (bench/peers.py's default)
  std::string render;  // re-render the outputs of an earlier run's bench.json
  int64_t experts = 0;       // the model with this many experts (0: its own)
  int64_t intermediate = 0;  // ... and this expert width (0: its own), the shared expert's in proportion
  // the layer across local GPUs (run_parallel.cpp)
  int ep = 0, tp = 0;
  std::string dispatch = "allgather";
  int64_t capacity = -1;
  int warmup_forwards = 200;
  double warm_seconds = 2.0;
  bool no_skewed = false;
};

void write_file(const fs::path& p, const std::string& text) { io::write_file_atomically(p.string(), text); }

// Removes a file when it goes out of scope, on a throw too (the peers' inputs
// are gigabytes in the temporary directory).
struct RemovedOnExit {
  fs::path path;
  explicit RemovedOnExit(fs::path p) : path(std::move(p)) {}
  RemovedOnExit(const RemovedOnExit&) = delete;
  RemovedOnExit& operator=(const RemovedOnExit&) = delete;
  ~RemovedOnExit() {
    std::error_code ec;
    if (!path.empty()) fs::remove(path, ec);
  }
};

// A word as a POSIX shell reads it back: quoted unless plainly safe (for the log).
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs argv[0], found on PATH, with argv as its arguments and no shell between
// (a path with spaces or quotes reaches it as it is): its exit status, or -1
// where it could not start or did not exit.
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);  // our lines before the child's
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string find_peers_script(const std::string& given) {
  std::vector<std::string> candidates;
  if (!given.empty()) candidates.push_back(given);
  if (const char* e = std::getenv("FP4MOE_PEERS"); e && *e) candidates.push_back(e);
  candidates.push_back(std::string(FP4MOE_SOURCE_DIR) + "/bench/peers.py");
  candidates.push_back("bench/peers.py");
  for (const auto& c : candidates)
    if (!c.empty() && fs::exists(c)) return c;
  FP4MOE_CHECK(given.empty(), "--peers-script " << given << " does not exist");
  return "";
}

// The random experts' format: --format, else the model's checkpoint's.
Fp4Format bench_format(const BenchOptions& o, const MoeConfig& cfg) {
  return o.format == "auto" ? checkpoint_format(cfg) : parse_fp4_format(o.format);
}

void bench_without_gpu(const BenchOptions& o, const std::string& why) {
  const MoeConfig cfg = model_config(o.model);
  const ActivationFormat activations = parse_activation_format(o.activations);
  const plan::ActivationType act = activations == ActivationFormat::fp8 ? plan::ActivationType::e4m3 : plan::ActivationType::bf16;
  fmt::print("fp4moe bench: no GPU ({}): nothing to time. The planner's choices for {} ({} activations) instead:\n", why,
             cfg.name, to_string(activations));
  for (const char* arch : {"sm_90", "sm_120"}) {
    const plan::Arch& a = plan::find_arch(arch);
    // H and I as the layer's GEMMs see them there (LayerOptions::feature_granule: as the model has them where
    // the tiles take tails, else padded where not multiples of 256)
    const bool tails = a.has_wgmma;
    const int64_t granule = o.feature_granule ? o.feature_granule : tails ? kPreparedKGranule : kFeatureGranule;
    const int64_t H = padded_features(cfg.hidden, granule), I = padded_features(cfg.intermediate, granule);
    for (auto [what, n, k] : {std::tuple{"GEMM1", 2 * I, H}, std::tuple{"GEMM2", H, I}}) {
      for (int64_t T : {int64_t(1), int64_t(128), int64_t(2048)}) {
        const double tpe = double(T * cfg.top_k) / double(cfg.num_experts);
        const int t = plan::rank_gemm_tiles(n, k, plan::budget_of(a), tpe, std::min<int64_t>(cfg.num_experts, T * cfg.top_k),
                                            132, act);
        if (t < 0) {
          fmt::print("  {:<7} {} N {} K {} T {:>5}: no GEMM tile fits{}\n", arch, what, n, k, T,
                     act == plan::ActivationType::e4m3 ? " (the e4m3 tiles are sm_90's)" : "");
          continue;
        }
        const plan::SmemPlan p = plan::plan_gemm_tile(t, n, k, a, 0, act);
        fmt::print("  {:<7} {} N {:>5} K {:>5} T {:>5}: {} ({} stages, {} of {} bytes)\n", arch, what, n, k, T, p.config,
                   p.stages, p.smem_bytes, p.capacity);
      }
    }
  }
  MoeConfig small = cfg;
  if (cfg.name.find("-small") == std::string::npos) {
    try {
      small = preset(cfg.name + "-small");
    } catch (const Error&) {
      fmt::print("(no scaled-down form of {}: the CPU reference is skipped)\n", cfg.name);
      return;
    }
  }
  fmt::print("and the CPU reference on {} (16 tokens):\n", small.name);
  const MoeWeights w = random_moe_weights(small, bench_format(o, small), 2);
  std::vector<float> x(size_t(16 * small.hidden)), logits(size_t(16 * small.num_experts));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 23) - 11) / 11.f;
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(int(i * 104729 % 17) - 8) / 4.f;
  const auto t0 = std::chrono::steady_clock::now();
  const Routing r = route_reference(small, logits.data(), 16, w.correction_bias);
  const std::vector<float> out = moe_forward_reference(small, w, x.data(), 16, r, activations);
  fmt::print("  forward of 16 tokens: {:.1f} ms, output [{}, {}]\n",
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), 16, small.hidden);
}

void write_outputs(json report, const std::string& out_dir) {
  for (json& c : report["cases"]) c.erase("topk_ids"), c.erase("topk_weights");
  if (report.contains("skewed_cases"))
    for (json& c : report["skewed_cases"]) c.erase("topk_ids"), c.erase("topk_weights");
  fs::create_directories(out_dir);
  write_file(fs::path(out_dir) / "bench.json", report.dump(1) + "\n");
  write_file(fs::path(out_dir) / "bench.csv", layer_bench_csv(report));
  write_file(fs::path(out_dir) / "bench.svg", layer_bench_svg(report));
  const std::string table = layer_bench_table(report);
  write_file(fs::path(out_dir) / "bench.md", table);
  fmt::print("\n{}\nwritten: {}/bench.json, bench.csv, bench.md, bench.svg\n", table, out_dir);
}

void run_bench(const BenchOptions& o) {
  if (!o.render.empty()) {
    std::ifstream f(o.render);
    FP4MOE_CHECK(f.good(), "--render: cannot open " << o.render);
    json report;
    try {
      report = json::parse(f);
      (void)report.at("cases").at(0).at("layer");
    } catch (const json::exception& e) {
      throw Error("--render: " + o.render + " is not an fp4moe bench report (" + e.what() + ")");
    }
    return write_outputs(report, o.out);
  }
  for (int64_t t : o.tokens) FP4MOE_CHECK(t >= 1, "--tokens " << t << " must be at least 1");
  FP4MOE_CHECK(!o.tokens.empty(), "--tokens: no token counts given");
  std::string why;
  const auto devs = list_devices(&why);
  FP4MOE_CHECK(o.dispatch == "allgather" || o.ep, "--dispatch " << o.dispatch << " needs --ep");
  FP4MOE_CHECK(o.capacity < 0 || o.dispatch == "alltoall", "--capacity needs --dispatch alltoall");
  FP4MOE_CHECK(o.finalize == "auto" || (!o.ep && !o.tp),
               "--finalize " << o.finalize << " with --" << (o.ep ? "ep" : "tp")
                             << ": each rank's finalize is split (its fp32 sums are what the ranks reduce)");
  if (devs.empty()) {
    FP4MOE_CHECK(!o.ep && !o.tp, "--" << (o.ep ? "ep" : "tp") << " needs GPUs; " << why);
    return bench_without_gpu(o, why);
  }
  MoeConfig cfg = model_config(o.model);
  if (o.experts) {
    cfg.num_experts = o.experts;
    cfg.name += fmt::format(" with {} experts", o.experts);
  }
  if (o.intermediate) {
    if (cfg.shared_expert) cfg.shared_intermediate = cfg.shared_intermediate * o.intermediate / cfg.intermediate;
    cfg.intermediate = o.intermediate;
    cfg.name += fmt::format(" with I = {}", o.intermediate);
  }
  cfg.validate();
  fs::create_directories(o.out);
  if (o.ep || o.tp) {
    FP4MOE_CHECK(!(o.ep && o.tp), "--ep and --tp are one or the other");
    ParallelRequest r;
    r.mode = o.ep ? "ep" : "tp";
    r.dispatch = o.dispatch;
    r.capacity = o.capacity;
    r.ranks = o.ep ? o.ep : o.tp;
    r.tokens = o.tokens;
    r.seed = 2;
    r.reps = o.reps;
    r.warmup_forwards = o.warmup_forwards;
    r.check = true;
    r.json_out = (fs::path(o.out) / "parallel.json").string();
    r.layer.feature_granule = o.feature_granule;
    r.layer.activations = parse_activation_format(o.activations);
    r.layer.fp8_rounds_nvfp4 = o.fp8_rounds_nvfp4;
    r.layer.split_k = !o.no_split_k;
    r.layer.balanced_split = o.balanced_split;
    r.layer.deterministic = o.deterministic;
    r.layer.tune_cache = o.cache;
    const Fp4Format format = bench_format(o, cfg);
    return run_parallel({cfg, random_moe_weights(cfg, format, 2), fmt::format("random {}, seed 2", to_string(format)), {}},
                        r, devs);
  }
  fmt::print("fp4moe bench on {} (sm_{}): {}\n", devs[0].name, devs[0].cc, cfg.name);
  const Fp4Format format = bench_format(o, cfg);
  const MoeWeights w = random_moe_weights(cfg, format, 2);
  LayerBenchOptions bo;
  bo.tokens = o.tokens;
  bo.reps = o.reps;
  bo.warm_seconds = o.warm_seconds;
  bo.skewed = !o.no_skewed;
  bo.layer.deterministic = o.deterministic;
  bo.layer.feature_granule = o.feature_granule;
  bo.layer.activations = parse_activation_format(o.activations);
  bo.layer.fp8_rounds_nvfp4 = o.fp8_rounds_nvfp4;
  bo.layer.finalize = o.finalize == "fused" ? FinalizeMode::fused : o.finalize == "split" ? FinalizeMode::split
                                                                                          : FinalizeMode::automatic;
  bo.layer.split_k = !o.no_split_k;
  bo.layer.shared_expert_in_routed_gemms = o.shared_expert_in_routed;
  bo.layer.balanced_split = o.balanced_split;
  bo.layer.tune_cache = o.cache;
  const std::string script = o.no_peers ? "" : find_peers_script(o.peers_script);
  // The run's inputs for the peers: weights of a full-size model are gigabytes,
  // so beside the temporary files, not in --out, and removed after.
  const fs::path inputs = fs::temp_directory_path() / fmt::format("fp4moe-peer-inputs-{}.safetensors", ::getpid());
  const RemovedOnExit remove_inputs{script.empty() ? fs::path() : inputs};
  if (!script.empty()) bo.peer_inputs = inputs.string();
  Progress bar("bench");
  json report = run_layer_benchmark(cfg, w, bo, [&](int d, int n, const std::string& what) { bar.update(d, n, what); });
  const fs::path json_path = fs::path(o.out) / "bench.json";
  write_file(json_path, report.dump() + "\n");
  if (!script.empty()) {
    std::vector<std::string> argv = {"python3",  script,  "--layer-in", json_path.string(),
                                     "--inputs", inputs.string(), "--engines", o.peers,
                                     "--out",    json_path.string()};
    if (!o.peers_dir.empty()) argv.insert(argv.end(), {"--peers-dir", o.peers_dir});
    std::string shown;
    for (const std::string& a : argv) shown += (shown.empty() ? "" : " ") + shell_word(a);
    fmt::print("peers: {}\n", shown);
    const int rc = run_program(argv);
    if (rc == 0) {
      std::ifstream f(json_path);
      try {
        report = json::parse(f);
      } catch (const json::exception& e) {  // keep this run's own measurements
        fmt::print("peers: bench/peers.py wrote no valid JSON ({}); the tables have no peer engines\n", e.what());
      }
    } else {
      fmt::print("peers: bench/peers.py exited with {}; the tables have no peer engines\n", rc);
    }
  } else if (!o.no_peers) {
    fmt::print("peers: bench/peers.py not found (--peers-script or FP4MOE_PEERS): no peer engines\n");
  }
  write_outputs(report, o.out);
}

}  // namespace

void register_bench(CLI::App& app) {
  static BenchOptions o;
  auto* cmd = app.add_subcommand("bench", "Benchmark the layer and its GEMMs against the ceilings and the peers");
  cmd->add_option("--model", o.model, "Preset or config.json")->capture_default_str();
  cmd->add_option("--tokens", o.tokens, "Token counts (comma separated)")->delimiter(',')->capture_default_str();
  cmd->add_option("--out", o.out, "Output directory (JSON, CSV, Markdown, SVG)")->capture_default_str();
  cmd->add_option("--reps", o.reps, "Timed repetitions")->check(CLI::Range(3, 100000))->capture_default_str();
  cmd->add_option("--peers-script", o.peers_script, "bench/peers.py (default: found next to the sources)");
  cmd->add_option("--cache", o.cache, "Tune cache file");
  cmd->add_flag("--deterministic", o.deterministic, "Split finalize");
  cmd->add_option("--activations", o.activations, "bf16, or fp8 (W4A8: e4m3 activations, sm_90; NVFP4 weights with --fp8-rounds-nvfp4)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_flag("--fp8-rounds-nvfp4", o.fp8_rounds_nvfp4, "fp8 activations with NVFP4 weights: accept each weight rounded to e4m3 (docs/fp8.md, NVFP4)");
  cmd->add_option("--format", o.format,
                  "The random experts' FP4 format: auto (the model's checkpoint: MXFP4 for gpt-oss, else NVFP4), "
                  "nvfp4 or mxfp4 (fp8 activations with nvfp4 need --fp8-rounds-nvfp4)")
      ->check(CLI::IsMember({"auto", "nvfp4", "mxfp4"}))
      ->capture_default_str();
  cmd->add_option("--feature-granule", o.feature_granule,
                  "Pad H and I that are not multiples of it (gpt-oss's 2880): 0, the default, runs them as the "
                  "model has them on sm_90 (a multiple of 64) and pads to 256 elsewhere; or 64 (sm_90), 128, 256")
      ->check(CLI::IsMember(std::vector<int64_t>{0, 64, 128, 256}));
  cmd->add_option("--finalize", o.finalize, "auto, fused (GEMM2 adds into fp32 by atomics) or split")
      ->check(CLI::IsMember({"auto", "fused", "split"}))
      ->capture_default_str();
  cmd->add_flag("--no-split-k", o.no_split_k, "Never split a GEMM's K loop across CTAs");
  cmd->add_flag("--balanced-split", o.balanced_split,
                "Let the planner balance the K stages of GEMMs whose items leave CTAs idle over every CTA "
                "(LayerOptions::balanced_split)");
  cmd->add_flag("--shared-expert-in-routed", o.shared_expert_in_routed,
                "Run the shared expert as one more routed expert where it can (LayerOptions::shared_expert_in_routed_gemms)");
  cmd->add_flag("--no-peers", o.no_peers, "Skip the peer engines of bench/peers.py");
  cmd->add_option("--peers", o.peers, "Peer engines, comma separated: " + peer_engines_joined(", "))
      ->check([](const std::string& v) {
        std::string bad;
        size_t start = 0;
        while (start <= v.size()) {
          const size_t end = std::min(v.find(',', start), v.size());
          const std::string e = v.substr(start, end - start);
          if (std::find(kPeerEngines.begin(), kPeerEngines.end(), e) == kPeerEngines.end())
            bad += (bad.empty() ? "" : ", ") + ("'" + e + "'");
          start = end + 1;
        }
        return bad.empty() ? std::string() : bad + " is not one of " + peer_engines_joined(", ");
      })
      ->capture_default_str();
  cmd->add_option("--peers-dir", o.peers_dir, "Where scripts/fetch-peers.sh put the peer engines (default .whl/peers)");
  cmd->add_option("--render", o.render, "Only re-render CSV, Markdown and SVG from an earlier bench.json");
  cmd->add_option("--warm-seconds", o.warm_seconds, "Back-to-back replays before each case's timed ones (steady state)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  cmd->add_flag("--no-skewed", o.no_skewed, "Skip the Zipf-skewed routing cases");
  cmd->add_option("--experts", o.experts, "The model with this many experts (as one expert-parallel rank holds E/G)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--intermediate", o.intermediate, "The model with this expert width I (as one tensor-parallel rank "
                                                    "holds I/G), the shared expert's width in proportion")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ep", o.ep, "The layer across this many local GPUs by expert parallelism (one thread each): "
                                "each rank's forward, its collectives alone and the single-GPU layer, per --tokens "
                                "per rank; writes OUT/parallel.json")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--tp", o.tp, "As --ep, by tensor parallelism")->check(CLI::Range(1, 64));
  cmd->add_option("--dispatch", o.dispatch, "With --ep: allgather or alltoall")
      ->check(CLI::IsMember({"allgather", "alltoall"}))
      ->capture_default_str();
  cmd->add_option("--capacity", o.capacity, "With --dispatch alltoall: rows per peer (default: the largest --tokens)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup-forwards", o.warmup_forwards, "With --ep/--tp: back-to-back forwards before each token count")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->callback([] { run_bench(o); });
}

}  // namespace fp4moe::cli
