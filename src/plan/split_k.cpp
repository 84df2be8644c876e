#include "plan/split_k.hpp"

#include <algorithm>
#include <sstream>

#include "fp4moe/error.hpp"
#include "plan/gemm_plan.hpp"

namespace fp4moe::plan {

int64_t expected_token_chunks(int64_t permuted_rows, int64_t num_experts, int chunk, int max_rows) {
  if (permuted_rows <= 0 || num_experts <= 0 || chunk <= 0 || max_rows < chunk) return 0;
  const int64_t active = std::min(num_experts, permuted_rows);
  const int64_t rows_per_expert = (permuted_rows + active - 1) / active;
  return active * token_chunks(rows_per_expert, chunk, max_rows);
}

bool balanced_split_fits(const GemmTile& t, int64_t items, int64_t k, int64_t ctas, int64_t workspace_bytes) {
  return t.balances_k() && items <= SplitKWorkspace::kCounters && ctas <= SplitKWorkspace::slots(t, workspace_bytes) &&
         BalancedSplit::fits_32_bits(items, t.k_steps(k), ctas);
}

SplitKPlan plan_k_splits(int tile_index, int64_t n, int64_t k, int64_t expected_chunks, int resident_ctas,
                         int64_t workspace_bytes, bool balance_k) {
  FP4MOE_CHECK(tile_index >= 0 && tile_index < kNumGemmTiles,
               "split-K plan: tile index " << tile_index << " is outside 0.." << kNumGemmTiles - 1);
  const GemmTile& t = kGemmTiles[tile_index];
  SplitKPlan p;
  p.tile = tile_index;
  p.items = expected_chunks * t.n_tiles(n);
  p.resident = resident_ctas;
  const int64_t R = resident_ctas;
  auto balance = [&](int s) {
    const int64_t units = p.items * s, rounds = (units + R - 1) / R;
    return double(units) / double(rounds * R);
  };
  if (!t.splits_k()) {
    p.why = SplitKPlan::Why::tile_does_not_split;
    return p;
  }
  if (p.items <= 0 || R <= 0 || t.bk <= 0) return p;
  p.balance = p.unsplit_balance = balance(1);
  p.why = SplitKPlan::Why::balanced;
  p.slots = SplitKWorkspace::slots(t, workspace_bytes);
  if (balance_k && p.balance >= kSplitBelowBalance && p.balance < kBalanceBelow &&
      balanced_split_fits(t, p.items, k, R, workspace_bytes)) {
    const int64_t units = p.items * t.k_steps(k), rounds = (units + R - 1) / R;  // stages a CTA runs, at most
    p.balanced_split = true;
    p.balance = double(units) / double(rounds * R);
    p.why = SplitKPlan::Why::planned;
    return p;
  }
  if (p.balance >= kSplitBelowBalance) return p;
  const int max_splits = static_cast<int>(std::min<int64_t>(kMaxKSplits, t.k_steps(k)));
  double best = p.balance;
  for (int s = 2; s <= max_splits; ++s) {
    if (p.items > SplitKWorkspace::kCounters || p.items * s > p.slots) {
      p.workspace_stops_at = s;
      break;
    }
    const double score = balance(s) - 0.02 * (s - 1);
    if (score > best + 1e-9) best = score, p.splits = s, p.balance = balance(s);
  }
  if (p.splits > 1) p.why = SplitKPlan::Why::planned;
  return p;
}

std::string SplitKPlan::explanation() const {
  std::ostringstream os;
  switch (why) {
    case Why::tile_does_not_split: return "tile " + gemm_tile_name(tile) + " does not split K";
    case Why::no_workspace: return "no split-K workspace";
    case Why::no_items: return "no work items";
    case Why::given:
      return balanced_split ? std::string("the balanced split, as given") : "k_splits = " + std::to_string(splits) + " as given";
    case Why::balanced:
    case Why::planned: break;
  }
  os << items << " items on " << resident << " resident CTAs: balance " << unsplit_balance;
  if (balanced_split) {
    os << "; balanced split, every CTA the same share of the items' K stages: balance " << balance;
    return os.str();
  }
  if (unsplit_balance >= kSplitBelowBalance) return os.str() + ", not split";
  if (workspace_stops_at > 0)
    os << "; " << workspace_stops_at << " splits need " << items * workspace_stops_at << " slots, the workspace has " << slots;
  if (splits > 1) os << "; " << splits << " splits: balance " << balance;
  return os.str();
}

}  // namespace fp4moe::plan
