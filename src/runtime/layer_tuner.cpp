// MoeLayer::tune: measured tile choice per GEMM and token bucket, kept in the
// tune cache (src/plan/tune_cache.hpp).
#include <algorithm>
#include <random>
#include <set>

#include "fp4moe/error.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/tune_rounds.hpp"
#include "common/cuda_check.hpp"
#include "fp4moe/reference.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/layer_core.hpp"
#include "runtime/random_fill.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {

std::vector<MoeLayer::TuneRow> LayerCore::tune(const std::vector<int64_t>& tokens,
                                               const std::function<void(int, int, const std::string&)>& progress) {
  const MoeConfig& c = cfg_;
  FP4MOE_CHECK(cache_, "tune: the layer was built with use_tune_cache = false");
  FP4MOE_CHECK(!tokens.empty(), "tune: no token counts given");
  // One representative token count per bucket of the routed experts.
  std::vector<std::pair<int64_t, int64_t>> jobs;  // (tokens, routed bucket)
  std::set<int64_t> seen;
  for (int64_t T : tokens) {
    FP4MOE_CHECK(T >= 1 && T <= opts_.max_tokens, "tune: tokens = " << T << " is outside 1..max_tokens = " << opts_.max_tokens);
    const int64_t b = plan::token_bucket(rows_per_expert(T));
    if (seen.insert(b).second) jobs.emplace_back(T, b);
  }

  int total = 0, done = 0;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (const GemmSpec& g : gemm_specs(PlanShape::of_tokens(1)))
      for (int t = 0; t < plan::kNumGemmTiles; ++t)
        total += plan::fit_gemm_tile(t, g.w->n, g.w->k, device_.budget, 0, g.w->activations).fits;

  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  DeviceBuffer<__nv_bfloat16> x(size_t(opts_.max_tokens * c.hidden));
  fill_random_bf16(x.get(), int64_t(x.size()), 17, 1.f, s);
  std::vector<MoeLayer::TuneRow> rows;
  for (const auto& [T, bucket] : jobs) {
    // Realistic routing: the model's own router on random logits.
    const DeviceBuffer<float> logits(gaussian_logits(T, c.num_experts, 1000 + uint64_t(T)));
    const std::shared_ptr<const ForwardPlan> held = plan(T);
    const ForwardPlan& fp = *held;
    route(fp, logits.get(), nullptr, nullptr, s);
    permute(fp, topk_ids_.get(), s);
    for (GemmSpec g : gemm_specs(fp.shape)) {
      if (g.reads_hidden) g.io.x = x.get();
      const double tpe = g.tokens_per_expert;
      const int64_t act = g.active_experts;

      const int def = plan::rank_gemm_tiles(g.w->n, g.w->k, device_.budget, tpe, act, device_.sm_count,
                                            g.w->activations);
      MoeLayer::TuneRow row;
      row.gemm = g.name;
      row.tokens = T;
      row.bucket = plan::token_bucket(tpe);
      row.default_tile = plan::gemm_tile_name(def);
      // what the layer would run, the permuted copy of a warp-specialized GEMM1 included,
      // replayed from a CUDA graph as the layer runs in serving (and in `fp4moe bench`)
      const auto time_tile = [&](int t, int stages, int warmup, int reps) {
        try {
          const GemmStepLaunch step = prepare(g, {t, stages});
          return time_graph_replay([&] { enqueue_gemm_step(step, s); }, s, warmup, reps).median_ms;
        } catch (const Error& e) {
          throw Error("tune: " + std::string(g.name) + " tile " + plan::gemm_tile_name(t) +
                      " failed although the planner accepted it (" +
                      plan::plan_gemm_tile(t, g.w->n, g.w->k, device_.budget, 0, g.w->activations).explanation + "): " + e.what() +
                      ". This is a bug; please report it.");
        }
      };
      // Sweep every tile the planner accepts, then time the close ones again in
      // alternating rounds (plan/tune_rounds.hpp: the sweep's order favours the early tiles).
      std::vector<plan::TileTiming> sweep;
      for (int t = 0; t < plan::kNumGemmTiles; ++t) {
        const plan::GemmTileFit p = plan::fit_gemm_tile(t, g.w->n, g.w->k, device_.budget, 0, g.w->activations);
        if (!p.fits) continue;
        sweep.push_back({t, p.stages, time_tile(t, p.stages, 3, 15)});
        if (progress) progress(++done, total, std::string(g.name) + " T=" + std::to_string(T) + " " + plan::gemm_tile_name(t));
      }
      FP4MOE_CHECK(!sweep.empty(), "tune: no tile fits " << g.name << " (N = " << g.w->n << ", K = " << g.w->k << ")");
      const std::vector<plan::TileTiming> close = plan::close_candidates(sweep, def, 0.15, 4);
      const auto time_once = [&](const plan::TileTiming& cand) { return time_tile(cand.tile, cand.stages, 1, 5); };
      const std::vector<double> medians =
          close.size() > 1 ? plan::interleaved_medians(close, 6, time_once) : std::vector<double>{close.front().ms};
      int best = -1, best_stages = 0;
      for (size_t i = 0; i < close.size(); ++i) {
        if (close[i].tile == def) row.default_ms = medians[i];
        if (best < 0 || medians[i] < row.tuned_ms) best = close[i].tile, best_stages = close[i].stages, row.tuned_ms = medians[i];
      }
      row.tuned_tile = plan::gemm_tile_name(best);
      cache_->put(tune_key(g), {row.tuned_tile, best_stages, row.tuned_ms, row.default_tile, row.default_ms});
      rows.push_back(row);
    }
  }
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  cache_->save();
  plans_.clear();
  return rows;
}

}  // namespace fp4moe
