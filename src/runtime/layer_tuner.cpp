// MoeLayer::tune: measured tile choice per GEMM and token bucket, kept in the
// tune cache (src/plan/tune_cache.hpp).
#include <algorithm>
#include <random>
#include <set>

#include "fp4moe/error.hpp"
#include "plan/tune_rounds.hpp"
#include "runtime/captured_graph.hpp"
#include "runtime/ceilings.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/moe_layer_impl.hpp"
#include "runtime/timing.hpp"

namespace fp4moe {

std::vector<MoeLayer::TuneRow> MoeLayer::tune(const std::vector<int64_t>& tokens,
                                              const std::function<void(int, int, const std::string&)>& progress) {
  Impl& m = *impl_;
  const MoeConfig& c = m.cfg;
  FP4MOE_CHECK(m.cache, "tune: the layer was built with use_tune_cache = false");
  FP4MOE_CHECK(!tokens.empty(), "tune: no token counts given");
  // One representative token count per bucket of the routed experts.
  std::vector<std::pair<int64_t, int64_t>> jobs;  // (tokens, routed bucket)
  std::set<int64_t> seen;
  for (int64_t T : tokens) {
    FP4MOE_CHECK(T >= 1 && T <= m.opts.max_tokens, "tune: tokens = " << T << " is outside 1..max_tokens = " << m.opts.max_tokens);
    const int64_t b = plan::token_bucket(double(T * c.top_k) / double(c.num_experts));
    if (seen.insert(b).second) jobs.emplace_back(T, b);
  }

  int total = 0, done = 0;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (const GemmStep& g : m.gemm_steps(1, nullptr))
      for (int t = 0; t < plan::kNumGemmTiles; ++t) total += plan::plan_gemm_tile(t, g.w->n, g.w->k, m.budget, 0, g.w->biased()).fits;

  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  DeviceBuffer<__nv_bfloat16> x(size_t(m.opts.max_tokens * c.hidden));
  fill_random_bf16(x.get(), int64_t(x.size()), 17, 1.f, s);
  std::vector<TuneRow> rows;
  for (const auto& [T, bucket] : jobs) {
    // Realistic routing: the model's own router on random logits.
    std::mt19937_64 rng(1000 + uint64_t(T));
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> host_logits(size_t(T * c.num_experts));
    for (float& v : host_logits) v = nd(rng);
    DeviceBuffer<float> logits(host_logits);
    m.route(s, logits.get(), T);
    m.permute(s, m.topk_ids.get(), T);
    for (const GemmStep& g : m.gemm_steps(T, x.get())) {
      const double tpe = g.tokens_per_expert;
      const int64_t act = g.active_experts;

      const int def = plan::rank_gemm_tiles(g.w->n, g.w->k, m.budget, tpe, act, m.sm_count, g.w->biased());
      TuneRow row;
      row.gemm = g.name;
      row.tokens = T;
      row.bucket = plan::token_bucket(tpe);
      row.default_tile = plan::gemm_tile_name(def);
      // what the layer would run, the permuted copy of a warp-specialized GEMM1 included,
      // replayed from a CUDA graph as the layer runs in serving (and in `fp4moe bench`)
      const auto time_tile = [&](int t, int stages, int warmup, int reps) {
        try {
          return time_graph_replay(
                     [&] { m.launch_gemm({t, stages}, *g.w, g.x, g.gather, g.rows, g.offsets, g.epilogue, g.y, s); }, s,
                     warmup, reps).median_ms;
        } catch (const Error& e) {
          throw Error("tune: " + std::string(g.name) + " tile " + plan::gemm_tile_name(t) +
                      " failed although the planner accepted it (" +
                      plan::plan_gemm_tile(t, g.w->n, g.w->k, m.budget, 0, g.w->biased()).explanation + "): " + e.what() +
                      ". This is a bug; please report it.");
        }
      };
      // Sweep every tile the planner accepts, then time the close ones again in
      // alternating rounds (plan/tune_rounds.hpp: the sweep's order favours the early tiles).
      std::vector<plan::TileTiming> sweep;
      for (int t = 0; t < plan::kNumGemmTiles; ++t) {
        const plan::SmemPlan p = plan::plan_gemm_tile(t, g.w->n, g.w->k, m.budget, 0, g.w->biased());
        if (!p.fits) continue;
        sweep.push_back({t, p.stages, time_tile(t, p.stages, 3, 15)});
        if (progress) progress(++done, total, std::string(g.name) + " T=" + std::to_string(T) + " " + p.config);
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
      m.cache->put(m.tune_key(*g.w, tpe, g.epilogue), {row.tuned_tile, best_stages, row.tuned_ms, row.default_tile, row.default_ms});
      rows.push_back(row);
    }
  }
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
  m.cache->save();
  m.forget_forward_plans();
  return rows;
}

}  // namespace fp4moe
