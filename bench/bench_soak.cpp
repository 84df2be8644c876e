// A server's load in minutes: as many layers resident as fit in a share of
// device memory, driven from several host threads, each on its own stream and
// owning its own layers (a layer's workspace serves one stream at a time), by
// a seeded random sequence of token counts (log-uniform in 1..max_tokens),
// half as eager forwards and half as CUDA-graph replays of the count's
// power-of-two bucket (as engines pad to their captured sizes). Every
// check_every-th forward of a layer is recomputed eagerly on the same input
// and compared bitwise (the layers run deterministic: split finalize), and
// every reference_every-th check also compares the first token with the CPU
// reference (routing bitwise, its output within 1e-2: one token's error, where
// the tests hold many tokens' to 3e-3; the largest is reported). With
// --faults, bad requests are interleaved (a negative token count, one above
// max_tokens, an expert id out of range, a NaN router logit, a NaN hidden
// state); each must fail by an error that names it, and the next good forward
// on that layer is checked. A mismatch up to 64 tokens names the first step whose result
// differs (the layer's intermediates); --neighbours adds threads streaming
// device memory meanwhile (every tensor copy slower). Every layer's
// plan and graph for every bucket are made before the clock starts (warm-up;
// --plan-every-count: the plans of every token count too); device memory is
// sampled throughout and must not grow past its level after it, nor the host
// memory held (RSS after malloc_trim) past it beside the forward plans held
// more (at most LayerOptions::max_plans a layer); each layer's plan for every
// bucket is compared at the end with the plan at the start.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "common/cuda_check.hpp"
#include "fp4moe/device.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "io/atomic_file.hpp"
#include "plan/tune_cache.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/layer_core.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/random_fill.hpp"
#include "bench_device.hpp"

using namespace fp4moe;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string model = "glm5";
  std::string format = "auto";       // the random experts' FP4 format: the model's checkpoint's, or nvfp4 / mxfp4
  std::string activations = "bf16";  // LayerOptions::activations: bf16 or fp8 (W4A8)
  int layers = 0;  // 0: as many as fit in memory_fraction of the device
  double memory_fraction = 0.8;
  // What device memory may vary by after warm-up without counting as growth: the
  // driver's own bookkeeping (16 MB); a leak of a forward's buffers is far larger.
  // Under compute-sanitizer the tool's own device allocations count too.
  int64_t device_slack_mb = 16;
  // What the host memory the process holds (its RSS once malloc_trim has handed the
  // allocator's free pages back) may vary by after warm-up, beside the forward plans
  // made after it (a bounded cache, counted apart): a leak of a forward's host
  // objects reaches this within seconds. Under compute-sanitizer the tool's own
  // host memory counts too.
  int64_t host_slack_mb = 256;
  int min_layers = 16;
  double seconds = 60;
  int threads = 4;
  int neighbour_threads = 0;  // threads streaming device memory beside the layers (a neighbour's load)
  uint64_t seed = 1;
  int64_t max_tokens = 4096;
  int check_every = 100, reference_every = 20, fault_every = 50;
  bool faults = false;
  bool split_k = true;
  bool plan_every_count = false;  // warm-up plans every token count, so no plan is made after it
  int64_t max_plans = LayerOptions{}.max_plans;  // LayerOptions::max_plans (--plan-every-count: 0, every one kept)
  std::string out = "bench_soak.json";
};

// DeviceBuffer::upload is a cudaMemcpy on the legacy default stream, which a
// non-blocking stream does not wait for (from pageable memory it may return
// before the copy lands): work that reads the upload waits for it first.
void wait_for_uploads() { FP4MOE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy)); }

// The tune cache file's bytes ("" when there is none): the run must leave it as it found it.
std::string tune_cache_bytes() {
  std::ifstream f(plan::TuneCache::default_path(), std::ios::binary);
  return f ? std::string(std::istreambuf_iterator<char>(f), {}) : std::string();
}

int64_t host_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, rss = 0;
  f >> pages >> rss;
  return rss * 4096;
}

// The host memory the process holds: its RSS once the allocator has handed back
// the free pages it keeps in its arenas (those are RSS but no one's).
int64_t host_held_bytes() {
  malloc_trim(0);
  return host_rss_bytes();
}

int64_t device_used_bytes() {
  size_t free_b = 0, total = 0;
  FP4MOE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return int64_t(total - free_b);
}


int64_t bucket_of(int64_t t, int64_t max_tokens) {
  int64_t b = 1;
  while (b < t) b *= 2;
  return std::min(b, max_tokens);
}

// Every bucket: the powers of two below max_tokens, and max_tokens.
std::vector<int64_t> buckets(int64_t max_tokens) {
  std::vector<int64_t> v;
  for (int64_t b = 1; b < max_tokens; b *= 2) v.push_back(b);
  v.push_back(max_tokens);
  return v;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::min<double>(double(v.size() - 1), std::floor(q * double(v.size()))))];
}

// A neighbour streaming device memory on its own stream (--neighbours): it
// stretches every tensor copy's latency, as other tenants of a busy GPU do.
struct Neighbour {
  DeviceBuffer<uint8_t> from{size_t(256) << 20}, to{size_t(256) << 20};
  cudaStream_t stream = nullptr;
  Neighbour() { FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~Neighbour() { cudaStreamDestroy(stream); }
  Neighbour(const Neighbour&) = delete;
  Neighbour& operator=(const Neighbour&) = delete;
};

// One layer and what its owning thread keeps for it.
struct Slot {
  int index = 0;
  std::unique_ptr<MoeLayer> layer;
  std::map<int64_t, std::unique_ptr<CapturedGraph>> graphs;  // by bucket, on the owner's stream and buffers
  std::map<int64_t, std::string> plans_at_start;
  int64_t forwards = 0;
};

// What the threads count, merged at the end.
struct Tally {
  int64_t forwards = 0, graph_forwards = 0, tokens = 0, checks = 0, mismatches = 0, references = 0,
          reference_failures = 0, faults = 0, faults_mishandled = 0;
  double worst_reference_error = 0;
  std::map<int64_t, std::vector<double>> latency_ms;  // by bucket
  // the first few of each kind, named
  std::vector<std::string> mismatch_cases, reference_cases, fault_cases;
  static void note(std::vector<std::string>& list, const std::string& s) {
    if (list.size() < 20) list.push_back(s);
  }
};

class SoakThread {
 public:
  SoakThread(const Options& o, const MoeConfig& cfg, const MoeWeights& w, std::vector<Slot*> slots, int index)
      : o_(o), cfg_(cfg), w_(w), slots_(std::move(slots)), rng_(o.seed * 7919 + uint64_t(index)),
        x_(size_t(o.max_tokens * cfg.hidden)), logits_(size_t(o.max_tokens * cfg.num_experts)),
        out_(size_t(o.max_tokens * cfg.hidden)), check_(size_t(o.max_tokens * cfg.hidden)),
        ids_(size_t(kFaultTokens * cfg.top_k)), weights_(size_t(kFaultTokens * cfg.top_k)),
        bad_logits_(size_t(kFaultTokens * cfg.num_experts)), bad_x_(size_t(kFaultTokens * cfg.hidden)) {
    FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    fill_random_bf16(x_.get(), int64_t(x_.size()), o.seed + 100 + uint64_t(index), 1.f, stream_);
    std::normal_distribution<float> n(0.f, 1.f);
    host_logits_.resize(logits_.size());
    for (float& v : host_logits_) v = n(rng_);
    logits_.upload(host_logits_);
    wait_for_uploads();
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  ~SoakThread() { cudaStreamDestroy(stream_); }

  // Every bucket of every own layer once eagerly (its plan) and captured (its graph).
  void warm_up() {
    for (Slot* s : slots_)
      for (const int64_t b : buckets(o_.max_tokens)) {
        s->layer->forward(stream_, x_.get(), logits_.get(), b, out_.get());
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
        s->graphs[b] = std::make_unique<CapturedGraph>(
            stream_, [&] { s->layer->forward(stream_, x_.get(), logits_.get(), b, out_.get()); });
        s->plans_at_start[b] = s->layer->describe(b);
      }
    if (o_.plan_every_count)
      for (Slot* s : slots_)
        for (int64_t t = 1; t <= o_.max_tokens; ++t) (void)s->layer->core().plan(t);
  }

  void run(Clock::time_point end) {
    int64_t since_fault = 0;
    Slot* faulted = nullptr;
    while (Clock::now() < end) {
      // after a bad request, the next request is a good one on the same layer and stream, checked
      Slot& s = faulted ? *faulted : *slots_[std::uniform_int_distribution<size_t>(0, slots_.size() - 1)(rng_)];
      const bool check_now = faulted != nullptr;
      faulted = nullptr;
      if (o_.faults && ++since_fault >= o_.fault_every) {
        since_fault = 0;
        fault(s);
        faulted = &s;
        continue;
      }
      const double lg = std::uniform_real_distribution<double>(0, std::log2(double(o_.max_tokens)))(rng_);
      const int64_t T = std::clamp<int64_t>(std::llround(std::exp2(lg)), 1, o_.max_tokens);
      const bool graph = std::bernoulli_distribution(0.5)(rng_);
      const int64_t tokens = graph ? bucket_of(T, o_.max_tokens) : T;
      const auto t0 = Clock::now();
      if (graph) {
        s.graphs.at(tokens)->launch();
      } else {
        s.layer->forward(stream_, x_.get(), logits_.get(), tokens, out_.get());
      }
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      tally.latency_ms[bucket_of(tokens, o_.max_tokens)].push_back(ms);
      ++tally.forwards, tally.graph_forwards += graph, tally.tokens += tokens;
      if (++s.forwards % o_.check_every == 0 || check_now) {
        if (tokens <= kTraceTokens) steps_ = snapshot(s, tokens);
        check(s, tokens, graph, check_now);
        steps_.clear();
      }
    }
  }

  Tally tally;

 private:
  // The forward just run, recomputed eagerly into check_: bitwise the same.
  void check(Slot& s, int64_t tokens, bool graph, bool after_fault) {
    ++tally.checks;
    s.layer->forward(stream_, x_.get(), logits_.get(), tokens, check_.get());
    s.layer->check_status(stream_);
    const std::vector<__nv_bfloat16> a = out_.download(), b = check_.download();
    if (std::memcmp(a.data(), b.data(), size_t(tokens * cfg_.hidden) * 2) != 0) {
      ++tally.mismatches;
      int64_t differ = 0, first = -1;
      double worst = 0;
      for (int64_t i = 0; i < tokens * cfg_.hidden; ++i) {
        uint16_t x, y;
        std::memcpy(&x, &a[size_t(i)], 2), std::memcpy(&y, &b[size_t(i)], 2);
        if (x == y) continue;
        ++differ, first = first < 0 ? i : first;
        worst = std::max(worst, std::fabs(double(bf16_to_float(x)) - bf16_to_float(y)));
      }
      // the first step whose result differs (snapshots are kept at small token counts)
      std::string step = "not traced";  // (bf16 steps: where)
      if (!steps_.empty()) {
        const auto again = snapshot(s, tokens);  // (the recompute's)
        const auto names = s.layer->core().intermediates(tokens);
        step = "none";
        for (size_t i = 0; i < again.size(); ++i)
          if (again[i] != steps_[i]) {
            step = names[i].step +
                   where_bf16_differ(again[i], steps_[i],
                                     s.layer->core().permuted_rows(tokens));
            break;
          }
      }
      // a third run tells which of the two was the odd one
      s.layer->forward(stream_, x_.get(), logits_.get(), tokens, check_.get());
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const std::vector<__nv_bfloat16> c = check_.download();
      const size_t n = size_t(tokens * cfg_.hidden) * 2;
      const char* third = std::memcmp(c.data(), a.data(), n) == 0   ? "the first"
                          : std::memcmp(c.data(), b.data(), n) == 0 ? "the recompute"
                                                                     : "neither";
      Tally::note(tally.mismatch_cases,
                  fmt::format("layer {} T={} ({}{}, its forward {}): {} of {} values differ from the eager recompute, the "
                              "first at token {}, by up to {:.3e}; a third run equals {}; first step that differs: {}",
                              s.index, tokens, graph ? "graph" : "eager", after_fault ? ", after a fault" : "", s.forwards,
                              differ, tokens * cfg_.hidden, first / cfg_.hidden, worst, third, step));
    }
    if (tally.checks % o_.reference_every == 0) reference(s, b);
  }

  // Where two bf16 [rows, cols] results differ (rows: the forward's permuted rows):
  // elements, row and column ranges, 16-byte pieces.
  std::string where_bf16_differ(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t rows) const {
    const int64_t n = int64_t(a.size()) / 2, cols = rows ? n / rows : 0;
    if (!cols) return "";
    int64_t differ = 0, r0 = rows, r1 = -1, c0 = cols, c1 = -1;
    std::map<int64_t, int> by_row;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(&a[size_t(2 * i)], &b[size_t(2 * i)], 2) == 0) continue;
      ++differ;
      const int64_t r = i / cols, c = i % cols;
      r0 = std::min(r0, r), r1 = std::max(r1, r), c0 = std::min(c0, c), c1 = std::max(c1, c);
      ++by_row[r];
    }
    std::string rowlist;
    for (const auto& [r, k] : by_row) rowlist += fmt::format("{}:{} ", r, k);
    return fmt::format(" ({} of {} elements as {} rows x {}: rows {}..{}, columns {}..{}; by row {})", differ, n, rows, cols, r0,
                       r1, c0, c1, rowlist.substr(0, 200));
  }

  // The intermediate results of the forward just run, step by step.
  std::vector<std::vector<uint8_t>> snapshot(Slot& s, int64_t tokens) {
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<std::vector<uint8_t>> v;
    for (const auto& m : s.layer->core().intermediates(tokens)) {
      v.emplace_back(m.bytes);
      FP4MOE_CUDA_CHECK(cudaMemcpy(v.back().data(), m.data, m.bytes, cudaMemcpyDeviceToHost));
    }
    return v;
  }

  // Token 0 against the CPU reference: its routing bitwise, its output within 1e-2.
  void reference(Slot& s, const std::vector<__nv_bfloat16>& out) {
    ++tally.references;
    std::vector<uint16_t> xb(size_t(cfg_.hidden));
    FP4MOE_CUDA_CHECK(cudaMemcpy(xb.data(), x_.get(), xb.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> x(xb.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_float(xb[i]);
    const Routing r = route_reference(cfg_, host_logits_.data(), 1, w_.correction_bias);
    std::vector<int32_t> ids(size_t(cfg_.top_k));
    FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), s.layer->topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
    const std::vector<float> want = moe_forward_reference(cfg_, w_, x.data(), 1, r, s.layer->core().options().activations);
    double num = 0, den = 0;
    for (int64_t i = 0; i < cfg_.hidden; ++i) {
      uint16_t bits;
      std::memcpy(&bits, &out[size_t(i)], 2);
      const double d = double(bf16_to_float(bits)) - want[size_t(i)];
      num += d * d, den += double(want[size_t(i)]) * want[size_t(i)];
    }
    const double err = std::sqrt(num / den);
    tally.worst_reference_error = std::max(tally.worst_reference_error, err);
    if (ids != r.topk_ids || !(err < 1e-2)) {
      ++tally.reference_failures;
      Tally::note(tally.reference_cases, fmt::format("layer {}: routing {}, rel err {:.2e}", s.index,
                                                     ids == r.topk_ids ? "equal" : "differs", err));
    }
  }

  // One bad request, in turn: each must fail by name or give its defined output.
  void fault(Slot& s) {
    ++tally.faults;
    const int kind = int(tally.faults % 5);
    const auto expect_error = [&](const char* what, const std::string& needle, auto&& call) {
      try {
        call();
        Tally::note(tally.fault_cases, fmt::format("fault '{}' was accepted", what));
        ++tally.faults_mishandled;
      } catch (const Error& e) {
        if (std::string(e.what()).find(needle) == std::string::npos) {
          Tally::note(tally.fault_cases, fmt::format("fault '{}': the error does not say '{}': {}", what, needle, e.what()));
          ++tally.faults_mishandled;
        }
      }
    };
    const int64_t k = cfg_.top_k, T = kFaultTokens;
    if (kind == 0) {  // (0 tokens is a valid empty batch: nothing runs)
      expect_error("negative tokens", "tokens = -1", [&] { s.layer->forward(stream_, x_.get(), logits_.get(), -1, out_.get()); });
    } else if (kind == 1) {
      expect_error("tokens above max_tokens", std::to_string(o_.max_tokens + 1),
                   [&] { s.layer->forward(stream_, x_.get(), logits_.get(), o_.max_tokens + 1, out_.get()); });
    } else if (kind == 2) {  // an expert id out of range: reported by check_status, the other rows computed
      std::vector<int32_t> ids(size_t(T * k));
      std::vector<float> w(size_t(T * k), 1.f / float(k));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % size_t(cfg_.num_experts));
      ids[1] = int32_t(cfg_.num_experts + 5);
      copy_on_stream(ids_, ids), copy_on_stream(weights_, w);
      s.layer->forward_routed(stream_, x_.get(), ids_.get(), weights_.get(), T, out_.get());
      expect_error("expert id out of range", fmt::format("outside [0, {})", cfg_.num_experts),
                   [&] { s.layer->check_status(stream_); });
    } else if (kind == 3) {  // a NaN router logit: reported by name
      std::vector<float> bad(host_logits_.begin(), host_logits_.begin() + T * cfg_.num_experts);
      bad[3] = NAN;
      copy_on_stream(bad_logits_, bad);
      s.layer->forward(stream_, x_.get(), bad_logits_.get(), T, out_.get());
      expect_error("NaN router logit", "NaN or Inf", [&] { s.layer->check_status(stream_); });
    } else {  // a NaN in token 2's hidden state: its output row only, named by check_status
      const uint16_t nan_bits = 0x7FC0;
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(bad_x_.get(), x_.get(), bad_x_.bytes(), cudaMemcpyDeviceToDevice, stream_));
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<uint16_t*>(bad_x_.get()) + 2 * cfg_.hidden + 7, &nan_bits, 2,
                                        cudaMemcpyHostToDevice, stream_));
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // (nan_bits is on this stack)
      s.layer->forward(stream_, bad_x_.get(), logits_.get(), T, out_.get());
      expect_error("NaN hidden state", "the output of token 2 holds NaN or Inf", [&] { s.layer->check_status(stream_); });
    }
  }

  // Into a buffer sized up front (the run allocates nothing), ordered on the stream.
  template <class T>
  void copy_on_stream(DeviceBuffer<T>& dst, const std::vector<T>& src) {
    FP4MOE_CHECK(src.size() <= dst.size(), "bench_soak: " << src.size() << " values for a buffer of " << dst.size());
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // (src is the caller's, pageable)
  }

  static constexpr int64_t kFaultTokens = 4;
  static constexpr int64_t kTraceTokens = 64;  // checks up to this many tokens keep every step's result
  std::vector<std::vector<uint8_t>> steps_;    // the checked forward's, while its check runs
  const Options& o_;
  const MoeConfig& cfg_;
  const MoeWeights& w_;
  std::vector<Slot*> slots_;
  std::mt19937_64 rng_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<__nv_bfloat16> x_;
  DeviceBuffer<float> logits_;
  DeviceBuffer<__nv_bfloat16> out_, check_;
  DeviceBuffer<int32_t> ids_;
  DeviceBuffer<float> weights_;
  DeviceBuffer<float> bad_logits_;  // (allocated up front: the run allocates nothing)
  DeviceBuffer<__nv_bfloat16> bad_x_;
  std::vector<float> host_logits_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Soak: many resident layers, several threads and streams, random token counts, eager and graphs"};
  Options o;
  app.add_option("--model", o.model, "Model preset");
  app.add_option("--format", o.format, "The random experts' FP4 format: auto (the model's checkpoint's), nvfp4 or mxfp4")
      ->check(CLI::IsMember({"auto", "nvfp4", "mxfp4"}));
  app.add_option("--activations", o.activations, "The routed experts' activations: bf16 or fp8 (W4A8, MXFP4 weights)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--layers", o.layers, "Resident layers (0: as many as fit in --memory-fraction)")->check(CLI::Range(0, 4096));
  app.add_option("--device-slack-mb", o.device_slack_mb, "Device memory growth after warm-up that is not a leak")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  app.add_option("--host-slack-mb", o.host_slack_mb,
                 "Growth of the host memory held (RSS after malloc_trim) after warm-up, beside the plans held more, "
                 "that is not a leak")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  app.add_option("--memory-fraction", o.memory_fraction, "Share of device memory the layers may take")
      ->check(CLI::Range(0.05, 0.95));
  app.add_option("--min-layers", o.min_layers, "Fewest layers --layers 0 may settle for")->check(CLI::Range(1, 4096));
  app.add_option("--seconds", o.seconds, "How long to drive them")->check(CLI::Range(1.0, 86400.0));
  app.add_option("--threads", o.threads, "Host threads, each on its own stream")->check(CLI::Range(1, 64));
  app.add_option("--neighbours", o.neighbour_threads, "Threads copying device memory on their own streams meanwhile")
      ->check(CLI::Range(0, 16));
  app.add_option("--seed", o.seed, "Seed of the token counts, modes and inputs");
  app.add_option("--max-tokens", o.max_tokens, "Largest token count")->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  app.add_option("--check-every", o.check_every, "Recompute every Nth forward of a layer")->check(CLI::Range(1, 1000000));
  app.add_option("--reference-every", o.reference_every, "Compare every Nth check with the CPU reference")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--faults", o.faults, "Interleave bad requests");
  app.add_flag("--plan-every-count", o.plan_every_count,
               "Warm-up makes every layer's plan of every token count 1..max-tokens (none is made after it; "
               "every one kept, as --max-plans 0)");
  app.add_option("--max-plans", o.max_plans, "Forward plans a layer keeps (LayerOptions::max_plans; 0: every one)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  app.add_flag("!--no-split-k", o.split_k, "Never split a GEMM's K loop (LayerOptions::split_k)");
  app.add_option("--fault-every", o.fault_every, "A bad request every N requests of a thread")->check(CLI::Range(2, 1000000));
  app.add_option("--out", o.out, "JSON report");
  CLI11_PARSE(app, argc, argv);
  try {
    const MoeConfig cfg = preset(o.model);  // a bad name is refused before the device is asked
    const auto dev = bench::bench_device("bench_soak");
    if (!dev) return 0;
    FP4MOE_CUDA_CHECK(cudaSetDevice(dev->index));
    const Fp4Format format = o.format == "auto" ? checkpoint_format(cfg) : parse_fp4_format(o.format);
    const MoeWeights w = random_moe_weights(cfg, format, o.seed);
    LayerOptions lo;
    lo.activations = parse_activation_format(o.activations);
    lo.max_tokens = o.max_tokens;
    lo.deterministic = true;
    lo.split_k = o.split_k;
    lo.max_plans = o.plan_every_count ? 0 : o.max_plans;
    std::vector<std::unique_ptr<Slot>> slots;
    const int64_t used_before = device_used_bytes();
    size_t free_b = 0, total = 0;
    FP4MOE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    const std::string tune_cache_before = tune_cache_bytes();
    const auto t_build = Clock::now();
    while (o.layers == 0 || int(slots.size()) < o.layers) {
      if (o.layers == 0 && !slots.empty()) {  // room for one more, at the first one's size, within the share?
        const int64_t per = (device_used_bytes() - used_before) / int64_t(slots.size());
        if (device_used_bytes() + per > int64_t(o.memory_fraction * double(total))) break;
      }
      auto s = std::make_unique<Slot>();
      s->index = int(slots.size());
      s->layer = std::make_unique<MoeLayer>(cfg, w, lo);
      slots.push_back(std::move(s));
    }
    const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
    FP4MOE_CHECK(int(slots.size()) >= (o.layers ? o.layers : o.min_layers),
                 "bench_soak: " << slots.size() << " layers of " << o.model << " fit in " << o.memory_fraction
                                << " of device memory; --min-layers is " << o.min_layers);
    fmt::print("bench_soak: {} layers of {} ({}, {} activations; {:.2f} GB of weights each, {:.2f} GB workspace) built in {:.0f} s; {} threads for {} s\n",
               slots.size(), o.model, to_string(format), o.activations, double(slots[0]->layer->weight_bytes()) / 1e9,
               double(slots[0]->layer->workspace_bytes()) / 1e9, build_s, o.threads, o.seconds);
    fmt::print("bench_soak: a layer's forward at 1 token and at max_tokens:\n{}{}", slots[0]->layer->describe(1),
               slots[0]->layer->describe(o.max_tokens));
    std::fflush(stdout);

    std::vector<std::unique_ptr<SoakThread>> workers;
    for (int t = 0; t < o.threads; ++t) {
      std::vector<Slot*> own;
      for (size_t i = size_t(t); i < slots.size(); i += size_t(o.threads)) own.push_back(slots[i].get());
      FP4MOE_CHECK(!own.empty(), "bench_soak: " << o.threads << " threads for " << slots.size() << " layers leave thread "
                                                << t << " none");
      workers.push_back(std::make_unique<SoakThread>(o, cfg, w, own, t));
    }
    // the memory-streaming neighbours' buffers and streams, made before the memory baseline
    std::vector<std::unique_ptr<Neighbour>> neighbours;
    for (int t = 0; t < o.neighbour_threads; ++t) neighbours.push_back(std::make_unique<Neighbour>());
    std::vector<std::string> neighbour_errors(size_t(o.neighbour_threads));
    const auto t_warm = Clock::now();
    for (auto& wk : workers) wk->warm_up();
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    const int64_t dev_warm = device_used_bytes(), host_warm = host_rss_bytes(), held_warm = host_held_bytes();
    // (a layer's plans all hold as many GEMM steps, so one plan's bytes stand for each)
    const int64_t plan_bytes = int64_t(slots.front()->layer->core().plan(1)->bytes());
    const auto over_layers = [&](auto count) {  // a count summed over the layers
      int64_t n = 0;
      for (const auto& s : slots) n += int64_t(count(s->layer->core()));
      return n;
    };
    const auto plans_held = [&] { return over_layers([](const LayerCore& c) { return c.plans_held(); }); };
    const auto plans_made = [&] { return over_layers([](const LayerCore& c) { return c.plans_made(); }); };
    const int64_t plans_warm = plans_held(), plans_made_warm = plans_made();
    fmt::print("bench_soak: every layer's plans and graphs for {} buckets made in {:.1f} s\n", buckets(o.max_tokens).size(),
               std::chrono::duration<double>(Clock::now() - t_warm).count());
    std::fflush(stdout);
    // memory, sampled every 250 ms while the threads run
    std::atomic<bool> running{true};
    std::vector<std::pair<double, int64_t>> device_samples;
    std::vector<int64_t> host_samples;
    // the host memory held, at a tenth of the run apart: a leak climbs through them, a
    // cache that warm-up did not fill levels off
    std::vector<std::pair<double, int64_t>> held_samples;
    const double held_every_s = std::max(5.0, o.seconds / 10);
    const auto t0 = Clock::now();
    std::string sampler_error;
    std::thread sampler([&] {
      try {
        FP4MOE_CUDA_CHECK(cudaSetDevice(dev->index));
        while (running) {
          device_samples.push_back({std::chrono::duration<double>(Clock::now() - t0).count(), device_used_bytes()});
          host_samples.push_back(host_rss_bytes());
          const double now = std::chrono::duration<double>(Clock::now() - t0).count();
          if (now >= double(held_samples.size() + 1) * held_every_s) held_samples.push_back({now, host_held_bytes()});
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
      } catch (const std::exception& e) {
        sampler_error = e.what();
      }
    });
    std::vector<std::string> thread_errors(size_t(o.threads));
    {
      std::vector<std::thread> ts;
      const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
      for (int t = 0; t < o.threads; ++t)
        ts.emplace_back([&, t] {
          try {
            FP4MOE_CUDA_CHECK(cudaSetDevice(dev->index));
            workers[size_t(t)]->run(end);
          } catch (const std::exception& e) {
            thread_errors[size_t(t)] = e.what();
          }
        });
      for (int t = 0; t < o.neighbour_threads; ++t)
        ts.emplace_back([&, t] {
          try {
            FP4MOE_CUDA_CHECK(cudaSetDevice(dev->index));
            Neighbour& n = *neighbours[size_t(t)];
            while (Clock::now() < end) {
              FP4MOE_CUDA_CHECK(cudaMemcpyAsync(n.to.get(), n.from.get(), n.from.bytes(), cudaMemcpyDeviceToDevice, n.stream));
              FP4MOE_CUDA_CHECK(cudaStreamSynchronize(n.stream));
            }
          } catch (const std::exception& e) {
            neighbour_errors[size_t(t)] = e.what();
          }
        });
      for (auto& t : ts) t.join();
    }
    running = false;
    sampler.join();
    FP4MOE_CHECK(sampler_error.empty() && !device_samples.empty(), "bench_soak: the memory sampler stopped: " << sampler_error);
    const double ran_s = std::chrono::duration<double>(Clock::now() - t0).count();

    Tally all;
    for (auto& wk : workers) {
      const Tally& t = wk->tally;
      all.forwards += t.forwards, all.graph_forwards += t.graph_forwards, all.tokens += t.tokens, all.checks += t.checks;
      all.mismatches += t.mismatches, all.references += t.references, all.reference_failures += t.reference_failures;
      all.faults += t.faults, all.faults_mishandled += t.faults_mishandled;
      all.worst_reference_error = std::max(all.worst_reference_error, t.worst_reference_error);
      for (const auto& [b, v] : t.latency_ms) all.latency_ms[b].insert(all.latency_ms[b].end(), v.begin(), v.end());
      for (const auto& p : t.mismatch_cases) Tally::note(all.mismatch_cases, p);
      for (const auto& p : t.reference_cases) Tally::note(all.reference_cases, p);
      for (const auto& p : t.fault_cases) Tally::note(all.fault_cases, p);
    }
    const bool tune_cache_changed = tune_cache_bytes() != tune_cache_before;
    int64_t plans_changed = 0;
    for (auto& s : slots)
      for (const auto& [b, d] : s->plans_at_start) plans_changed += s->layer->describe(b) != d;
    // memory during the run against its level after warm-up
    const int64_t dev_end = device_samples.back().second, host_end = host_samples.back();
    const int64_t held_end = host_held_bytes();
    int64_t dev_max_after_warm = 0, host_max = 0;
    for (const auto& [t, b] : device_samples) dev_max_after_warm = std::max(dev_max_after_warm, b);
    for (int64_t b : host_samples) host_max = std::max(host_max, b);

    json report;
    report["device"] = dev->name;
    report["model"] = o.model;
    report["format"] = to_string(format);
    report["activations"] = o.activations;
    report["layers"] = slots.size();
    report["threads"] = o.threads;
    report["neighbour_threads"] = o.neighbour_threads;
    report["seconds"] = ran_s;
    report["seed"] = o.seed;
    report["max_tokens"] = o.max_tokens;
    report["forwards"] = all.forwards;
    report["graph_forwards"] = all.graph_forwards;
    report["tokens_per_second"] = double(all.tokens) / ran_s;
    report["checks"] = all.checks;
    report["mismatches"] = all.mismatches;
    report["cpu_references"] = all.references;
    report["cpu_reference_failures"] = all.reference_failures;
    report["cpu_reference_worst_error"] = all.worst_reference_error;
    report["faults"] = all.faults;
    report["faults_mishandled"] = all.faults_mishandled;
    report["plans_changed"] = plans_changed;
    report["tune_cache"] = {{"path", plan::TuneCache::default_path()}, {"existed", !tune_cache_before.empty()},
                            {"changed", tune_cache_changed}};
    report["device_bytes"] = {{"before_layers", used_before}, {"after_warm_up", dev_warm}, {"max_after_warm_up", dev_max_after_warm},
                              {"end", dev_end}};
    report["host_rss_bytes"] = {{"after_warm_up", host_warm}, {"max", host_max}, {"end", host_end}};
    json held = json::array();
    for (const auto& [t, b] : held_samples) held.push_back({{"seconds", t}, {"bytes", b}});
    report["host_held_bytes"] = {{"after_warm_up", held_warm}, {"during", held}, {"end", held_end}};
    // the forward plans of token counts first seen after warm-up, part of the host memory's rise
    const int64_t plans_end = plans_held(), plans_made_run = plans_made() - plans_made_warm;
    // the plans held beyond warm-up's (at most LayerOptions::max_plans a layer)
    const int64_t plans_made_bytes = (plans_end - plans_warm) * plan_bytes;
    const int64_t held_growth = held_end - held_warm - plans_made_bytes;
    report["forward_plans"] = {{"after_warm_up", plans_warm}, {"end", plans_end}, {"bytes_each", plan_bytes},
                               {"made_during_run", plans_made_run}, {"max_plans_per_layer", o.plan_every_count ? 0 : o.max_plans}};
    report["thread_errors"] = thread_errors;
    report["mismatch_cases"] = all.mismatch_cases;
    report["reference_cases"] = all.reference_cases;
    report["fault_cases"] = all.fault_cases;
    json lat = json::array();
    fmt::print("{:>6} {:>9} {:>9} {:>9}\n", "bucket", "forwards", "p50 ms", "p99 ms");
    for (const auto& [b, v] : all.latency_ms) {
      lat.push_back({{"bucket", b}, {"forwards", v.size()}, {"p50_ms", percentile(v, 0.5)}, {"p99_ms", percentile(v, 0.99)}});
      fmt::print("{:>6} {:>9} {:>9.3f} {:>9.3f}\n", b, v.size(), percentile(v, 0.5), percentile(v, 0.99));
    }
    report["latency"] = lat;
    io::write_file_atomically(o.out, report.dump(1) + "\n");
    bool thread_failed = false;
    for (const auto& e : thread_errors) thread_failed |= !e.empty();
    for (size_t t = 0; t < neighbour_errors.size(); ++t)
      if (!neighbour_errors[t].empty()) thread_failed = true, fmt::print("  memory-streaming thread {} stopped: {}\n", t, neighbour_errors[t]);
    fmt::print("bench_soak: {} forwards ({} from graphs) in {:.0f} s, {:.0f} tokens/s; {} checks, {} mismatches; {} CPU "
               "references, {} failed (worst {:.2e}); {} faults, {} mishandled; {} plans changed; tune cache {}; device memory {:.2f} GB after warm-up, "
               "{:.2f} GB at most, {:.2f} GB at the end; host RSS {:.2f} -> {:.2f} GB; host memory held {:.2f} -> {:.2f} GB; forward plans held {} -> {} ({:.2f} GB more), {} made during the run\n",
               all.forwards, all.graph_forwards, ran_s, double(all.tokens) / ran_s, all.checks, all.mismatches,
               all.references, all.reference_failures, all.worst_reference_error, all.faults, all.faults_mishandled, plans_changed,
               tune_cache_changed ? "CHANGED" : tune_cache_before.empty() ? "absent, not written" : "unchanged", double(dev_warm) / 1e9,
               double(dev_max_after_warm) / 1e9, double(dev_end) / 1e9, double(host_warm) / 1e9, double(host_end) / 1e9,
               double(held_warm) / 1e9, double(held_end) / 1e9, plans_warm, plans_end, double(plans_made_bytes) / 1e9,
               plans_made_run);
    if (!held_samples.empty()) {
      std::string line;
      for (const auto& [t, b] : held_samples) line += fmt::format(" {:.0f}s {:.3f}", t, double(b) / 1e9);
      fmt::print("bench_soak: host memory held during the run (GB):{}\n", line);
    }
    const bool host_grew = held_growth > (o.host_slack_mb << 20);
    if (host_grew)
      fmt::print("bench_soak: the host memory held grew by {:.3f} GB after warm-up beside the plans held more "
                 "(--host-slack-mb {})\n", double(held_growth) / 1e9, o.host_slack_mb);
    for (const auto* list : {&all.mismatch_cases, &all.reference_cases, &all.fault_cases})
      for (const auto& p : *list) fmt::print("  {}\n", p);
    for (size_t t = 0; t < thread_errors.size(); ++t)
      if (!thread_errors[t].empty()) fmt::print("  thread {} stopped: {}\n", t, thread_errors[t]);
    const bool ok = !thread_failed && all.mismatches == 0 && all.reference_failures == 0 && all.faults_mishandled == 0 &&
                    plans_changed == 0 && !tune_cache_changed && dev_max_after_warm <= dev_warm + (o.device_slack_mb << 20) &&
                    !host_grew;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_soak: {}\n", e.what());
    return 1;
  }
}
