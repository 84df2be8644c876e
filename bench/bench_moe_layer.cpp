// Whole-layer benchmark (issue 5): GLM-5 (or another preset) at several token
// counts; eager and CUDA-graph time, the time of each stage, the share of
// routing + permutation + finalize, against the ceilings of this run. Writes
// JSON with the routing for bench/peers_layer.py (PyTorch bf16 layer, same routing).
#include <CLI/CLI.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include <fmt/core.h>

#include "fp4moe/device.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/reference.hpp"
#include "runtime/ceilings.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/timing.hpp"

using namespace fp4moe;
using json = nlohmann::json;

int main(int argc, char** argv) {
  CLI::App app{"MoE layer benchmark"};
  std::string model = "glm5", out_path = "bench_layer.json";
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 1024, 2048};
  int reps = 30;
  bool deterministic = false;
  app.add_option("--model", model, "Preset");
  app.add_option("--tokens", tokens, "Token counts")->delimiter(',');
  app.add_option("--out", out_path, "JSON output");
  app.add_option("--reps", reps, "Timed repetitions")->check(CLI::Range(3, 10000));
  app.add_flag("--deterministic", deterministic, "Split finalize");
  CLI11_PARSE(app, argc, argv);
  try {
    std::string why;
    const auto devs = list_devices(&why);
    if (devs.empty()) {
      fmt::print("bench_moe_layer: no CUDA device ({}): nothing to measure\n", why);
      return 0;
    }
    const MoeConfig cfg = preset(model);
    const Ceilings ceil = measure_ceilings();
    fmt::print("device {}; ceilings: copy {:.3f} TB/s, cuBLAS bf16 {:.1f} TFLOP/s\n", devs[0].name, ceil.copy_tb_per_s,
               ceil.bf16_tflop_per_s);
    const MoeWeights w = random_moe_weights(cfg, Fp4Format::nvfp4, 2);
    LayerOptions lo;
    lo.max_tokens = *std::max_element(tokens.begin(), tokens.end());
    lo.deterministic = deterministic;
    MoeLayer layer(cfg, w, lo);
    cudaStream_t s;
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
    DeviceBuffer<__nv_bfloat16> x(size_t(lo.max_tokens * cfg.hidden)), out(size_t(lo.max_tokens * cfg.hidden));
    fill_random_bf16(x.get(), int64_t(x.size()), 5, 1.f, s);
    json report = {{"device", devs[0].name},
                   {"model", cfg.name},
                   {"finalize", deterministic ? "split" : "fused"},
                   {"ceilings", {{"copy_tb_per_s", ceil.copy_tb_per_s}, {"bf16_tflop_per_s", ceil.bf16_tflop_per_s}}},
                   {"hidden", cfg.hidden},
                   {"intermediate", cfg.intermediate},
                   {"experts", cfg.num_experts},
                   {"top_k", cfg.top_k},
                   {"shared_intermediate", cfg.shared_expert ? cfg.shared_intermediate : 0}};
    json cases = json::array();
    for (int64_t T : tokens) {
      std::mt19937_64 rng(100 + uint64_t(T));
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> logits(size_t(T * cfg.num_experts));
      for (float& v : logits) v = nd(rng);
      DeviceBuffer<float> dl(logits);
      auto fwd = [&] { layer.forward(s, x.get(), dl.get(), T, out.get()); };
      const TimingStats eager = time_on_stream(fwd, s, 5, reps);
      cudaGraph_t g;
      cudaGraphExec_t ge;
      FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      fwd();
      FP4MOE_CUDA_CHECK(cudaStreamEndCapture(s, &g));
      FP4MOE_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
      const TimingStats graph = time_on_stream([&] { FP4MOE_CUDA_CHECK(cudaGraphLaunch(ge, s)); }, s, 5, reps);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      const auto stages = layer.profile(s, x.get(), dl.get(), T, out.get(), reps);
      layer.check_status(s);

      std::vector<int32_t> ids(size_t(T * cfg.top_k));
      std::vector<float> wts(ids.size());
      FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), layer.topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
      FP4MOE_CUDA_CHECK(cudaMemcpy(wts.data(), layer.topk_weights(), wts.size() * 4, cudaMemcpyDeviceToHost));
      const std::set<int32_t> active(ids.begin(), ids.end());
      const double HI = double(cfg.hidden) * double(cfg.intermediate);
      const double shared_elems = cfg.shared_expert ? 3.0 * double(cfg.hidden) * double(cfg.shared_intermediate) : 0;
      const double bytes = (double(active.size()) * 3.0 * HI + shared_elems) * (0.5 + 1.0 / 16) +
                           2.0 * 2.0 * double(T * cfg.hidden);
      const double flops = 2.0 * (double(T * cfg.top_k) * 3.0 * HI + double(T) * shared_elems);
      const double floor_ms =
          std::max(bytes / (ceil.copy_tb_per_s * 1e12), flops / (ceil.bf16_tflop_per_s * 1e12)) * 1e3;
      double gemms = 0, total = 0;
      json st = json::object();
      for (const auto& [name, ms] : stages) {
        st[name] = ms;
        total += ms;
        if (name == "gemm1" || name == "gemm2" || name == "shared") gemms += ms;
      }
      json c = {{"tokens", T},
                {"active_experts", active.size()},
                {"eager_ms", eager.median_ms},
                {"eager_min_ms", eager.min_ms},
                {"eager_max_ms", eager.max_ms},
                {"graph_ms", graph.median_ms},
                {"stages_ms", st},
                {"gemms_ms", gemms},
                {"overhead_fraction", total > 0 ? 1.0 - gemms / total : 0.0},
                {"bytes", bytes},
                {"flops", flops},
                {"floor_ms", floor_ms},
                {"floor_fraction", floor_ms / graph.median_ms},
                {"tb_per_s", bytes / (graph.median_ms * 1e-3) / 1e12},
                {"topk_ids", ids},
                {"topk_weights", wts}};
      cases.push_back(c);
      fmt::print("T={:5d} active {:3d}  eager {:.4f} ms  graph {:.4f} ms  gemms {:.4f} ms  other {:4.1f}%  {:.2f} TB/s  floor {:.4f} ms = {:4.1f}%\n",
                 T, active.size(), eager.median_ms, graph.median_ms, gemms, 100.0 * (1.0 - gemms / total),
                 bytes / (graph.median_ms * 1e-3) / 1e12, floor_ms, 100.0 * floor_ms / graph.median_ms);
      for (const auto& [name, ms] : stages) fmt::print("    {:<9} {:.4f} ms\n", name, ms);
    }
    report["cases"] = cases;
    std::ofstream(out_path) << report.dump() << "\n";
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_moe_layer: error: {}\n", e.what());
    return 1;
  }
}
