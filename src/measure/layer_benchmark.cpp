#include "runtime/random_fill.hpp"
#include "fp4moe/reference.hpp"
#include "measure/layer_benchmark.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include <fmt/core.h>

#include "fp4moe/device.hpp"
#include "fp4moe/error.hpp"
#include "runtime/captured_graph.hpp"
#include "measure/cublas_peer.hpp"
#include "common/cuda_check.hpp"
#include "measure/peer_inputs.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/layer_core.hpp"
#include "measure/report_json.hpp"
#include "measure/steady_timing.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {
namespace {

using json = nlohmann::json;

struct GemmShape {
  const char* name;
  int64_t n, k;
  bool routed;  // routed experts (counts per expert) or the shared expert (every token)
};

json timing_json(double median, double mn, double mx) { return {{"median_ms", median}, {"min_ms", mn}, {"max_ms", mx}}; }

// Skewed routing: expert popularity following a Zipf law of exponent 1 (the
// expert of rank r, in a random order of the experts, with weight 1/(r+1)),
// as logits log(p_e) + Gumbel noise, whose top-k draws experts in proportion
// to p without replacement.
std::vector<float> zipf_logits(int64_t tokens, int64_t experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> rank(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) rank[size_t(e)] = e;
  std::shuffle(rank.begin(), rank.end(), rng);
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<float> logits(static_cast<size_t>(tokens * experts));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < experts; ++e)
      logits[size_t(t * experts + e)] = float(-std::log(double(rank[size_t(e)] + 1)) - std::log(-std::log(u(rng))));
  return logits;
}

// One run's layer, inputs, ceilings and peer, and the measurement of one case.
struct LayerCases {
  const MoeConfig& cfg;
  const LayerBenchOptions& o;
  const Ceilings& ceil;
  MoeLayer& layer;
  cudaStream_t s;
  const __nv_bfloat16* x;
  __nv_bfloat16* out;
  CublasGroupedPeer* peer;
  double bytes_per_weight;  // fp4_bytes_per_weight of the layer's format

  // One GEMM of a case: bytes, FLOPs, floor, its stage's time and the cuBLAS peer's.
  json gemm(const GemmShape& sh, int64_t T, int64_t active, const std::vector<int32_t>& counts,
            const std::vector<MoeLayer::StageTime>& stages) const {
    // (the shared expert among the routed experts: one more active expert and a row per token in
    // this GEMM's time, so in its bytes and FLOPs too; the cuBLAS peer has the routed rows only)
    const bool with_shared = layer.core().shared_in_routed();
    const int64_t P = layer.core().permuted_rows(T), I = cfg.intermediate, H = cfg.hidden;
    const double wbytes = double(active + (with_shared ? 1 : 0)) * double(sh.n * sh.k) * bytes_per_weight;
    const double in_rows = sh.n == 2 * I ? double(T) : double(P), out_cols = sh.n == 2 * I ? double(I) : double(H);
    const double bytes = wbytes + in_rows * double(sh.k) * 2 + double(P) * out_cols * 2;
    const double flops = 2.0 * double(P) * double(sh.n * sh.k);
    const auto st = std::find_if(stages.begin(), stages.end(), [&](const auto& x2) { return x2.stage == sh.name; });
    json gj = {{"name", sh.name}, {"n", sh.n}, {"k", sh.k}, {"rows", P}, {"bytes", bytes}, {"flops", flops},
               {"weight_bytes", wbytes}, {"floor_ms", floor_ms(ceil, bytes, flops)}, {"counts", counts},
               {"shared_expert_included", with_shared}};
    if (ceil.energy.measured()) gj["energy_floor_ms"] = energy_floor_ms(ceil, bytes, flops);
    if (st != stages.end()) {
      gj["time"] = timing_json(st->median_ms, st->min_ms, st->max_ms);
      gj["tb_per_s"] = bytes / (st->median_ms * 1e-3) / 1e12;
      gj["tflop_per_s"] = flops / (st->median_ms * 1e-3) / 1e12;
      gj["floor_fraction"] = floor_ms(ceil, bytes, flops) / st->median_ms;
      if (ceil.energy.measured()) gj["energy_floor_fraction"] = energy_floor_ms(ceil, bytes, flops) / st->median_ms;
    }
    if (peer) {
      const TimingStats pt = peer->time(sh.n == 2 * I ? 0 : 1, counts, std::max(5, o.reps / 3), o.warm_seconds);
      gj["cublas_bf16_ms"] = pt.median_ms;
      if (st != stages.end() && !with_shared) gj["speedup_vs_cublas"] = pt.median_ms / st->median_ms;
    }
    return gj;
  }

  // One case: T tokens routed by the layer's router from `logits` (host fp32 [T, E]).
  json measure(int64_t T, const std::vector<float>& logits, const char* routing) const {
    const int64_t H = cfg.hidden, I = cfg.intermediate, Is = cfg.shared_expert ? cfg.shared_intermediate : 0;
    DeviceBuffer<float> dl(logits);
    auto fwd = [&] { layer.forward(s, x, dl.get(), T, out); };
    const SteadyTiming st_time = time_graph_steady(fwd, s, o.warm_seconds, o.reps);
    const TimingStats& lt = st_time.steady;
    const auto stages = layer.profile(s, x, dl.get(), T, out, o.reps);
    const CapturedGraph::NodeCount launches = CapturedGraph(s, fwd).nodes();  // what one forward runs
    layer.check_status(s);
    std::vector<int32_t> ids(size_t(T * cfg.top_k));
    std::vector<float> wts(ids.size());
    FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), layer.topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
    FP4MOE_CUDA_CHECK(cudaMemcpy(wts.data(), layer.topk_weights(), wts.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<int32_t> counts(size_t(cfg.num_experts), 0);
    for (int32_t e : ids) ++counts[size_t(e)];
    const int64_t active = std::count_if(counts.begin(), counts.end(), [](int32_t c) { return c > 0; });
    const int64_t P = T * cfg.top_k;

    json gemms = json::array();
    double layer_bytes = 2.0 * 2.0 * double(T * H), layer_flops = 0;
    for (const GemmShape& sh : {GemmShape{"gemm1", 2 * I, H, true}, GemmShape{"gemm2", H, I, true}}) {
      json gj = gemm(sh, T, active, counts, stages);
      layer_bytes += gj["weight_bytes"].get<double>();
      layer_flops += gj["flops"].get<double>();
      gemms.push_back(gj);
    }
    if (Is && !layer.core().shared_in_routed()) {  // (else counted in the GEMMs above)
      layer_bytes += 3.0 * double(H * Is) * bytes_per_weight;
      layer_flops += 2.0 * double(T) * 3.0 * double(H * Is);
    }
    json stj = json::object();
    double gemm_ms = 0, total_ms = 0;
    for (const auto& st : stages) {
      stj[st.stage] = timing_json(st.median_ms, st.min_ms, st.max_ms);
      total_ms += st.median_ms;
      if (st.stage == "gemm1" || st.stage == "gemm2" || st.stage == "shared") gemm_ms += st.median_ms;
    }
    const double layer_floor_ms = floor_ms(ceil, layer_bytes, layer_flops);
    const double burst_floor_ms = floor_ms(ceil, layer_bytes, layer_flops, /*burst=*/true);
    const double mean_rows = double(P) / double(cfg.num_experts);
    json layer_json = {{"time", timing_json(lt.median_ms, lt.min_ms, lt.max_ms)},
                       {"burst_time", timing_json(st_time.burst.median_ms, st_time.burst.min_ms, st_time.burst.max_ms)},
                       {"bytes", layer_bytes},
                       {"flops", layer_flops},
                       {"floor_ms", layer_floor_ms},
                       {"floor_fraction", layer_floor_ms / lt.median_ms},
                       {"burst_floor_ms", burst_floor_ms},
                       {"burst_floor_fraction", burst_floor_ms / st_time.burst.median_ms},
                       {"tb_per_s", layer_bytes / (lt.median_ms * 1e-3) / 1e12},
                       {"tflop_per_s", layer_flops / (lt.median_ms * 1e-3) / 1e12},
                       {"non_gemm_fraction", total_ms > 0 ? 1.0 - gemm_ms / total_ms : 0.0},
                       {"kernel_launches", launches.kernels},
                       {"other_graph_nodes", launches.others}};
    if (ceil.energy.measured()) {
      layer_json["energy_floor_ms"] = energy_floor_ms(ceil, layer_bytes, layer_flops);
      layer_json["energy_floor_fraction"] = energy_floor_ms(ceil, layer_bytes, layer_flops) / lt.median_ms;
    }
    return json{{"tokens", T},
                {"routing", routing},
                {"tokens_per_expert", mean_rows},
                {"active_experts", active},
                {"max_rows_over_mean", double(*std::max_element(counts.begin(), counts.end())) / mean_rows},
                {"sensors", sensors_json(st_time.sensors)},
                {"layer", layer_json},
                {"gemms", gemms},
                {"stages", stj},
                {"plan", layer.describe(T)},
                {"topk_ids", ids},
                {"topk_weights", wts}};
  }
};

// The routing rule and activation, for engines that route and activate on their own (bench/peers.py).
json routing_rule_json(const MoeConfig& cfg) {
  return {{"scoring", cfg.scoring == Scoring::sigmoid ? "sigmoid" : "softmax"},
          {"renormalize", cfg.renormalize},
          {"n_group", cfg.n_group},
          {"topk_group", cfg.topk_group},
          {"use_correction_bias", cfg.use_correction_bias},
          {"routed_scaling_factor", cfg.routed_scaling_factor},
          {"activation", cfg.activation == Activation::clamped_swiglu ? "clamped_swiglu" : "swiglu"},
          {"swiglu_limit", cfg.swiglu_limit},
          {"swiglu_alpha", cfg.swiglu_alpha},
          {"expert_bias", cfg.expert_bias}};
}

}  // namespace

json run_layer_benchmark(const MoeConfig& cfg, const MoeWeights& weights, const LayerBenchOptions& o,
                         const std::function<void(int, int, const std::string&)>& progress) {
  FP4MOE_CHECK(!o.tokens.empty(), "bench: no token counts");
  for (int64_t t : o.tokens) FP4MOE_CHECK(t >= 1, "bench: --tokens " << t << " must be at least 1");
  std::string why;
  const auto devs = list_devices(&why);
  FP4MOE_CHECK(!devs.empty(), "bench: no CUDA device (" << why << ")");
  const int total = int(o.tokens.size()) * (o.skewed ? 2 : 1) + 1;
  int done = 0;
  if (progress) progress(done, total, "ceilings");
  const Ceilings ceil = measure_ceilings(o.warm_seconds);
  if (progress) progress(++done, total, "ceilings");

  LayerOptions lo = o.layer;
  lo.max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  MoeLayer layer(cfg, weights, lo);
  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  DeviceBuffer<__nv_bfloat16> x(size_t(lo.max_tokens * cfg.hidden)), out(size_t(lo.max_tokens * cfg.hidden));
  fill_random_bf16(x.get(), int64_t(x.size()), 5, 1.f, s);
  std::unique_ptr<CublasGroupedPeer> peer;
  std::string peer_note;
  if (o.cublas_peer) {
    try {
      peer = std::make_unique<CublasGroupedPeer>(
          cfg.num_experts,
          std::vector<CublasGroupedPeer::Shape>{{2 * cfg.intermediate, cfg.hidden}, {cfg.hidden, cfg.intermediate}},
          lo.max_tokens * cfg.top_k, s);
    } catch (const Error& e) {
      peer_note = std::string("cuBLAS peer skipped: ") + e.what();
    }
  }

  const int64_t H = cfg.hidden, I = cfg.intermediate, Is = cfg.shared_expert ? cfg.shared_intermediate : 0;
  const LayerCases bench{cfg, o, ceil, layer, s, x.get(), out.get(), peer.get(),
                         fp4_bytes_per_weight(weights.experts.at(0).gate.format)};
  json cases = json::array();
  json skewed = json::array();
  PeerInputs peer_inputs;
  for (int64_t T : o.tokens) {
    // The layer's router on Gaussian logits (what a random router gives on random hidden states).
    std::vector<float> logits = gaussian_logits(T, cfg.num_experts, 100 + uint64_t(T));
    cases.push_back(bench.measure(T, logits, "random"));
    if (!o.peer_inputs.empty()) peer_inputs.logits[T] = std::move(logits);
    if (progress) progress(++done, total, "T=" + std::to_string(T));
    if (!o.skewed) continue;
    skewed.push_back(bench.measure(T, zipf_logits(T, cfg.num_experts, 200 + uint64_t(T)), "zipf"));
    if (progress) progress(++done, total, "T=" + std::to_string(T) + " skewed");
  }
  if (!o.peer_inputs.empty()) {
    peer_inputs.x_rows = lo.max_tokens;
    peer_inputs.x.resize(x.size());
    FP4MOE_CUDA_CHECK(cudaMemcpy(peer_inputs.x.data(), x.get(), x.size() * 2, cudaMemcpyDeviceToHost));
    write_peer_inputs(o.peer_inputs, cfg, weights, peer_inputs);
  }
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  return {{"device", devs[0].name},
          {"cc", devs[0].cc},
          {"driver", devs[0].driver_version},
          {"runtime", devs[0].runtime_version},
          {"fp4moe", kVersion},
          {"model", cfg.name},
          {"hidden", H},
          {"intermediate", I},
          {"experts", cfg.num_experts},
          {"top_k", cfg.top_k},
          {"shared_intermediate", Is},
          {"format", weights.experts.at(0).gate.format == Fp4Format::mxfp4 ? "mxfp4" : "nvfp4"},
          {"routing_rule", routing_rule_json(cfg)},
          {"finalize", layer.finalize_mode() == FinalizeMode::split ? "split" : "fused"},
          {"activations", to_string(lo.activations)},
          {"split_k", lo.split_k},
          {"balanced_split", lo.balanced_split},
          {"ceilings", ceilings_json(ceil)},
          {"notes", peer_note},
          {"timing", {{"headline", "steady state: back-to-back CUDA-graph replays for warm_seconds, then timed"},
                      {"warm_seconds", o.warm_seconds},
                      {"burst", "after 1 s idle, 10 replays"}}},
          {"cases", cases},
          {"skewed_cases", skewed}};
}

namespace {

// The peer engines' results that bench/peers.py adds (docs/benchmarks.md "Peers"):
// report["peer_engines"] lists every variant with its status; case["peers"][variant][step]
// holds {ms, rel_error, status, reason}. JSON has no NaN or infinity: peers.py
// writes them as null, which these renderers show as not finite.
std::vector<std::string> peer_variants(const json& r) {
  std::vector<std::string> v;
  if (r.contains("peer_engines"))
    for (const json& e : r["peer_engines"]) v.push_back(e.at("variant").get<std::string>());
  return v;
}

// A finite number of the report, or nothing (null, absent, not a number).
std::optional<double> finite_number(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  const double v = j[key].get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

const json* peer_step(const json& c, const std::string& variant, const char* step) {
  if (!c.contains("peers") || !c["peers"].contains(variant) || !c["peers"][variant].contains(step)) return nullptr;
  return &c["peers"][variant][step];
}

double step_ms(const json& c, const char* step) {
  return std::string(step) == "layer" ? c.at("layer").at("time").at("median_ms").get<double>()
                                      : c.at("gemms").at(std::string(step) == "gemm1" ? 0 : 1).value(
                                            "time", json{{"median_ms", 0.0}})["median_ms"].get<double>();
}

// "0.0412 (1.31x)": the peer's time and fp4moe's speedup over it, "(1.31x, eager)"
// where it was timed without a CUDA graph (it could not be captured); or why there is none.
std::string peer_cell(const json& r, const json& c, const std::string& variant, const char* step) {
  const json* p = peer_step(c, variant, step);
  if (!p) {  // a variant that never ran says why in its column: unsupported, unavailable, failed
    for (const json& e : r["peer_engines"])
      if (e.at("variant") == variant && e.value("status", "") != "ok") return e.value("status", std::string("n/a"));
    return "n/a";
  }
  if (p->value("status", "") != "ok") {
    std::string why = p->value("status", std::string("failed")) + ": " + p->value("reason", "");
    for (char& ch : why)
      if (ch == '|' || ch == '\n') ch = '/';
    return why.size() > 60 ? why.substr(0, 57) + "..." : why;
  }
  const std::optional<double> ms = finite_number(*p, "ms");
  if (!ms) return "not finite";
  const double ours = step_ms(c, step);
  const bool eager = p->contains("graph") && (*p)["graph"] == false;
  if (ours > 0) return fmt::format("{:.4f} ({:.2f}x{})", *ms, *ms / ours, eager ? ", eager" : "");
  return fmt::format("{:.4f}{}", *ms, eager ? " (eager)" : "");
}

}  // namespace

std::string layer_bench_csv(const json& r) {
  std::ostringstream os;
  os << "tokens,tokens_per_expert,kernel,median_ms,min_ms,max_ms,bytes,flops,tb_per_s,tflop_per_s,floor_fraction,"
        "cublas_bf16_ms\n";
  const std::vector<std::string> variants = peer_variants(r);
  for (const json& c : r.at("cases")) {
    const json& l = c.at("layer");
    os << c["tokens"] << "," << c["tokens_per_expert"] << ",layer," << l["time"]["median_ms"] << ","
       << l["time"]["min_ms"] << "," << l["time"]["max_ms"] << "," << l["bytes"] << "," << l["flops"] << ","
       << l["tb_per_s"] << "," << l["tflop_per_s"] << "," << l["floor_fraction"] << ",\n";
    for (const json& g : c.at("gemms")) {
      if (!g.contains("time")) continue;
      os << c["tokens"] << "," << c["tokens_per_expert"] << "," << g["name"].get<std::string>() << ","
         << g["time"]["median_ms"] << "," << g["time"]["min_ms"] << "," << g["time"]["max_ms"] << "," << g["bytes"]
         << "," << g["flops"] << "," << g["tb_per_s"] << "," << g["tflop_per_s"] << "," << g["floor_fraction"] << ","
         << (g.contains("cublas_bf16_ms") ? g["cublas_bf16_ms"].dump() : "") << "\n";
    }
    // the peers' rows: kernel "<variant>/<step>", their median only
    for (const std::string& v : variants)
      for (const char* step : {"layer", "gemm1", "gemm2"})
        if (const json* p = peer_step(c, v, step); p && p->value("status", "") == "ok")
          if (const std::optional<double> ms = finite_number(*p, "ms"))
            os << c["tokens"] << "," << c["tokens_per_expert"] << "," << v << "/" << step << "," << json(*ms)
               << ",,,,,,,,\n";
  }
  return os.str();
}

std::string layer_bench_peer_table(const json& r) {
  const std::vector<std::string> variants = peer_variants(r);
  if (variants.empty()) return "";
  std::ostringstream os;
  os << "\nPeer engines on the same weights, hidden states and routing (bench/peers.py; each output checked "
        "against the exact reference before it is timed, replayed from a CUDA graph unless marked eager; ms, and "
        "fp4moe's speedup over the peer):\n";
  for (const json& e : r["peer_engines"]) {
    os << fmt::format("- {}: {}", e["variant"].get<std::string>(), e.value("version", std::string("?")));
    if (e.value("status", "") != "ok") os << fmt::format(", {}: {}", e.value("status", std::string()), e.value("reason", std::string()));
    if (const auto t = finite_number(e, "tolerance")) os << fmt::format(", tolerance {:.0e}", *t);
    if (e.contains("jit_seconds")) {
      const auto jit = finite_number(e, "jit_seconds");
      os << (jit ? fmt::format(", first calls (JIT) {:.1f} s, not timed", *jit) : ", first calls (JIT) not finite, not timed");
    }
    os << "\n";
  }
  for (const char* step : {"layer", "gemm1", "gemm2"}) {
    os << "\n| " << step << ": T | fp4moe ms |";
    for (const std::string& v : variants) os << " " << v << " |";
    os << "\n|---|---|" << [&] {
      std::string d;
      for (size_t i = 0; i < variants.size(); ++i) d += "---|";
      return d;
    }() << "\n";
    for (const json& c : r.at("cases")) {
      os << fmt::format("| {} | {:.4f} |", c["tokens"].get<int64_t>(), step_ms(c, step));
      for (const std::string& v : variants) os << " " << peer_cell(r, c, v, step) << " |";
      os << "\n";
    }
  }
  return os.str();
}

std::string layer_bench_table(const json& r) {
  std::ostringstream os;
  const json& ce = r.at("ceilings");
  os << fmt::format("GPU: {}; model {} ({} finalize, {} activations); ceilings this run at steady state: copy {:.2f} "
                    "TB/s, cuBLAS bf16 {:.0f} TFLOP/s",
                    r["device"].get<std::string>(), r["model"].get<std::string>(), r["finalize"].get<std::string>(),
                    r.value("activations", std::string("bf16")), ce["copy_tb_per_s"].get<double>(),
                    ce["bf16_tflop_per_s"].get<double>());
  if (ce.contains("copy_tb_per_s_burst"))
    os << fmt::format(" (at the start: {:.2f} TB/s, {:.0f} TFLOP/s)", ce["copy_tb_per_s_burst"].get<double>(),
                      ce["bf16_tflop_per_s_burst"].get<double>());
  os << "\n";
  if (ce.contains("energy") && ce["energy"].value("measured", false)) {
    const json& en = ce["energy"];
    os << fmt::format("Energy model this run: {:.0f} pJ/byte, {:.2f} pJ/bf16 FLOP, {} pJ/FP8 FLOP, static {:.0f} W, cap {:.0f} W\n",
                      en["pj_per_byte"].get<double>(), en["pj_per_bf16_flop"].get<double>(),
                      en.value("pj_per_fp8_flop", 0.0) > 0 ? fmt::format("{:.2f}", en["pj_per_fp8_flop"].get<double>())
                                                           : "n/a (" + en.value("fp8_why_not", std::string()) + ")",
                      en["static_w"].get<double>(), en["power_cap_w"].get<double>());
  }
  if (r.contains("timing"))
    os << fmt::format("Times at steady state ({:g} s of back-to-back replays before each case); the after-idle burst beside.\n",
                      r["timing"]["warm_seconds"].get<double>());
  auto vs = [](const json& g, const char* key) {
    return g.contains(key) ? fmt::format("{:.2f}x", g[key].get<double>()) : std::string("n/a");
  };
  auto table = [&](const json& cases) {
  os << "\n| T | tokens/expert | max/mean rows | layer ms | % of floor (of energy floor) | after idle ms (% of floor) | SM MHz, W | GEMM1 ms (% floor, vs cuBLAS bf16) | GEMM2 ms (% floor, vs cuBLAS bf16) | non-GEMM share |\n";
  os << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const json& c : cases) {
    const json& l = c.at("layer");
    std::string burst = l.contains("burst_time") ? fmt::format("{:.4f}", l["burst_time"]["median_ms"].get<double>()) : "";
    if (l.contains("burst_floor_fraction")) burst += fmt::format(" ({:.0f}%)", 100 * l["burst_floor_fraction"].get<double>());
    const std::string sensors = c.contains("sensors") && c["sensors"]["samples"].get<int>() > 0
                                    ? fmt::format("{:.0f}, {:.0f}", c["sensors"]["sm_clock_mhz_median"].get<double>(),
                                                  c["sensors"]["power_w_median"].get<double>())
                                    : "n/a";
    const std::string skew = c.contains("max_rows_over_mean") ? fmt::format("{:.1f}", c["max_rows_over_mean"].get<double>()) : "";
    std::string floor = fmt::format("{:.0f}%", 100 * l["floor_fraction"].get<double>());
    if (l.contains("energy_floor_fraction")) floor += fmt::format(" ({:.0f}%)", 100 * l["energy_floor_fraction"].get<double>());
    os << fmt::format("| {} | {:.2f} | {} | {:.4f} | {} | {} | {} |", c["tokens"].get<int64_t>(),
                      c["tokens_per_expert"].get<double>(), skew, l["time"]["median_ms"].get<double>(), floor, burst,
                      sensors);
    for (const json& g : c.at("gemms")) {
      if (!g.contains("time")) {
        os << " n/a |";
        continue;
      }
      os << fmt::format(" {:.4f} ({:.0f}%, {}) |", g["time"]["median_ms"].get<double>(),
                        100 * g["floor_fraction"].get<double>(), vs(g, "speedup_vs_cublas"));
    }
    os << fmt::format(" {:.1f}% |\n", 100 * l["non_gemm_fraction"].get<double>());
  }
  };
  os << "\nRouting: the layer's router on Gaussian logits\n";
  table(r.at("cases"));
  if (r.contains("skewed_cases") && !r["skewed_cases"].empty()) {
    os << "\nRouting skewed: expert popularity Zipf (exponent 1)\n";
    table(r["skewed_cases"]);
  }
  os << layer_bench_peer_table(r);
  return os.str();
}

std::string layer_bench_svg(const json& r) {
  // Two panels against tokens per expert (log2 axis): fraction of the floor
  // (layer, GEMM1, GEMM2) and speedup over the peers (cuBLAS, torch).
  struct Series {
    std::string label, color;
    std::vector<std::pair<double, double>> pts;
  };
  std::vector<Series> left = {{"layer", "#1f77b4", {}}, {"GEMM1", "#ff7f0e", {}}, {"GEMM2", "#2ca02c", {}}};
  std::vector<Series> right = {{"GEMM1 vs cuBLAS bf16", "#ff7f0e", {}}, {"GEMM2 vs cuBLAS bf16", "#2ca02c", {}}};
  const std::vector<std::string> variants = peer_variants(r);
  static const char* kPeerColors[] = {"#1f77b4", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
  for (size_t i = 0; i < variants.size(); ++i)
    right.push_back({"layer vs " + variants[i], kPeerColors[i % 7], {}});
  double xmin = 1e30, xmax = -1e30, ymax_r = 1.0;
  for (const json& c : r.at("cases")) {
    const double x = std::log2(std::max(1e-3, c["tokens_per_expert"].get<double>()));
    xmin = std::min(xmin, x), xmax = std::max(xmax, x);
    const json& l = c["layer"];
    left[0].pts.emplace_back(x, l["floor_fraction"].get<double>());
    for (size_t gi = 0; gi < c["gemms"].size() && gi < 2; ++gi) {
      const json& g = c["gemms"][gi];
      if (g.contains("floor_fraction")) left[1 + gi].pts.emplace_back(x, g["floor_fraction"].get<double>());
      if (g.contains("speedup_vs_cublas")) right[gi].pts.emplace_back(x, g["speedup_vs_cublas"].get<double>());
    }
    for (size_t i = 0; i < variants.size(); ++i)
      if (const json* p = peer_step(c, variants[i], "layer"); p && p->value("status", "") == "ok")
        if (const std::optional<double> ms = finite_number(*p, "ms"))
          right[2 + i].pts.emplace_back(x, *ms / l["time"]["median_ms"].get<double>());
  }
  for (const auto& s : right)
    for (const auto& p : s.pts) ymax_r = std::max(ymax_r, p.second);
  ymax_r = std::ceil(ymax_r);
  if (xmax <= xmin) xmax = xmin + 1;
  const int W = 460, Hh = 300, ml = 50, mt = 40, pw = 380, ph = 200;
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 2 * W << "' height='" << Hh + 40
     << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
  os << "<text x='10' y='18' font-size='13'>fp4moe " << r["model"].get<std::string>() << " on "
     << r["device"].get<std::string>() << " (copy " << fmt::format("{:.2f}", r["ceilings"]["copy_tb_per_s"].get<double>())
     << " TB/s, cuBLAS bf16 " << fmt::format("{:.0f}", r["ceilings"]["bf16_tflop_per_s"].get<double>())
     << " TFLOP/s this run)</text>\n";
  auto panel = [&](int x0, const char* title, const std::vector<Series>& series, double ymax, bool ref_line_at_one) {
    auto px = [&](double x) { return x0 + ml + (x - xmin) / (xmax - xmin) * pw; };
    auto py = [&](double y) { return mt + ph - y / ymax * ph; };
    os << "<text x='" << x0 + ml << "' y='" << mt - 8 << "'>" << title << "</text>\n";
    os << "<rect x='" << x0 + ml << "' y='" << mt << "' width='" << pw << "' height='" << ph
       << "' fill='none' stroke='#888'/>\n";
    for (int i = 0; i <= 4; ++i) {
      const double y = ymax * i / 4;
      os << "<text x='" << x0 + ml - 6 << "' y='" << py(y) + 4 << "' text-anchor='end'>" << fmt::format("{:.2g}", y)
         << "</text><line x1='" << x0 + ml << "' x2='" << x0 + ml + pw << "' y1='" << py(y) << "' y2='" << py(y)
         << "' stroke='#eee'/>\n";
    }
    if (ref_line_at_one)
      os << "<line x1='" << x0 + ml << "' x2='" << x0 + ml + pw << "' y1='" << py(1) << "' y2='" << py(1)
         << "' stroke='#444' stroke-dasharray='4 3'/>\n";
    const int e0 = int(std::floor(xmin)), e1 = int(std::ceil(xmax)), step = (e1 - e0) > 8 ? 2 : 1;
    for (int e = e1; e >= e0; e -= step)  // every (other) power of two, 1/32 style below 1
      os << "<text x='" << px(e) << "' y='" << mt + ph + 14 << "' text-anchor='middle'>"
         << (e >= 0 ? fmt::format("{:g}", std::exp2(double(e))) : fmt::format("1/{:g}", std::exp2(double(-e))))
         << "</text>\n";
    os << "<text x='" << x0 + ml + pw / 2 << "' y='" << mt + ph + 30 << "' text-anchor='middle'>tokens per expert</text>\n";
    int li = 0;
    for (const Series& s : series) {
      if (s.pts.empty()) continue;
      os << "<polyline fill='none' stroke='" << s.color << "' stroke-width='2' points='";
      for (const auto& p : s.pts) os << px(p.first) << "," << py(std::min(p.second, ymax)) << " ";
      os << "'/>\n";
      for (const auto& p : s.pts)
        os << "<circle cx='" << px(p.first) << "' cy='" << py(std::min(p.second, ymax)) << "' r='3' fill='" << s.color << "'/>\n";
      os << "<rect x='" << x0 + ml + 8 + (li % 2) * 190 << "' y='" << mt + ph + 40 + (li / 2) * 14
         << "' width='10' height='3' fill='" << s.color << "'/><text x='" << x0 + ml + 22 + (li % 2) * 190 << "' y='"
         << mt + ph + 45 + (li / 2) * 14 << "'>" << s.label << "</text>\n";
      ++li;
    }
  };
  panel(0, "fraction of the roofline floor (1 = at the floor)", left, 1.0, false);
  panel(W, "speedup over the peers (x, dashed = 1)", right, ymax_r, true);
  os << "</svg>\n";
  return os.str();
}

}  // namespace fp4moe
