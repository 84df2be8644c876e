#include "plan/split_k.hpp"

#include <algorithm>
#include <sstream>

#include "fp4moe/error.hpp"
#include "plan/decode_plan.hpp"

namespace fp4moe::plan {

int64_t expected_token_chunks(int64_t permuted_rows, int64_t num_experts, int chunk, int max_rows) {
  if (permuted_rows <= 0 || num_experts <= 0 || chunk <= 0 || max_rows < chunk) return 0;
  const int64_t active = std::min(num_experts, permuted_rows);
  const int64_t rows_per_expert = (permuted_rows + active - 1) / active;
  return active * token_chunks(rows_per_expert, chunk, max_rows);
}

SplitKPlan plan_k_splits(int tile_index, int64_t n, int64_t k, int64_t expected_chunks, int resident_ctas,
                         int64_t workspace_bytes) {
  FP4MOE_CHECK(tile_index >= 0 && tile_index < kNumDecodeTiles,
               "split-K plan: tile index " << tile_index << " is outside 0.." << kNumDecodeTiles - 1);
  const DecodeTile& t = kDecodeTiles[tile_index];
  SplitKPlan p;
  const int64_t items = expected_chunks * (n / t.bm), R = resident_ctas;
  auto balance = [&](int s) {
    const int64_t units = items * s, rounds = (units + R - 1) / R;
    return double(units) / double(rounds * R);
  };
  std::ostringstream why;
  if (!t.splits_k() || items <= 0 || R <= 0 || t.bk <= 0) {
    p.explanation = !t.splits_k() ? "tile " + decode_tile_name(tile_index) + " does not split K" : "no work items";
    return p;
  }
  p.balance = balance(1);
  why << items << " items on " << R << " resident CTAs: balance " << p.balance;
  if (p.balance >= kSplitBelowBalance) {
    p.explanation = why.str() + ", not split";
    return p;
  }
  const int64_t slots = SplitKWorkspace::slots(t, workspace_bytes);
  const int max_splits = static_cast<int>(std::min<int64_t>(kMaxKSplits, k / t.bk));
  double best = p.balance;
  for (int s = 2; s <= max_splits; ++s) {
    if (items > SplitKWorkspace::kCounters || items * s > slots) {
      why << "; " << s << " splits need " << items * s << " slots, the workspace has " << slots;
      break;
    }
    const double score = balance(s) - 0.02 * (s - 1);
    if (score > best + 1e-9) best = score, p.splits = s, p.balance = balance(s);
  }
  if (p.splits > 1) why << "; " << p.splits << " splits: balance " << p.balance;
  p.explanation = why.str();
  return p;
}

}  // namespace fp4moe::plan
