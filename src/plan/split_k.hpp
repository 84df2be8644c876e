// Split-K for the warp-specialized decode tiles.
//
// A launch with far fewer work items than resident CTAs (the shared expert at
// one token: 32 items of bm128 for 264 CTAs) leaves most SMs idle. Splitting
// every item's K loop `splits` ways spreads the weights over more SMs.
// Each split writes its fp32 accumulators to its own slot of a workspace; the
// split that arrives last (one atomic counter per item) adds the slots in split
// order, so the sum is bitwise the same whatever the arrival order, runs the
// epilogue and sets the counter back to zero for the next launch.
#pragma once
#include <cstdint>
#include <string>

#include "plan/gemm_layout.hpp"

namespace fp4moe::plan {

// The workspace: kCounters int32 arrival counters, zero between launches (the
// owner zeroes them once), then fp32 slots of bm x nt accumulators, one per
// (work item, split). Host and device compile this.
struct SplitKWorkspace {
  static constexpr int64_t kCounters = 4096;  // work items a split launch may have
  static constexpr int64_t kCounterBytes = kCounters * 4;
  static constexpr int64_t slot_bytes(const GemmTile& t) { return int64_t(t.bm) * t.nt * 4; }
  static constexpr int64_t slots(const GemmTile& t, int64_t bytes) {
    return bytes <= kCounterBytes ? 0 : (bytes - kCounterBytes) / slot_bytes(t);
  }
};
inline constexpr int kMaxKSplits = 8;
// What the layer and the benchmark allocate: 1023 slots of a bm256 x nt16 tile, 4092 of bm128 x nt8.
inline constexpr int64_t kSplitKWorkspaceBytes = int64_t(16) << 20;

// Token chunks a launch is expected to have (host estimate; the kernel counts
// the real ones): min(E, P) active experts sharing the P rows, each cut as
// token_chunks(rows, chunk, max_rows) cuts it (a tile's chunk() and nt).
int64_t expected_token_chunks(int64_t permuted_rows, int64_t num_experts, int chunk, int max_rows);

// The numbers behind the split; explanation() makes the text only when asked
// (the launch path needs none: a forward builds no strings).
struct SplitKPlan {
  enum class Why { tile_does_not_split, no_workspace, no_items, balanced, planned, given };
  Why why = Why::no_items;
  int tile = -1;
  int splits = 1;
  double balance = 1;  // work units over (rounds x resident CTAs): 1 = every CTA equally busy
  double unsplit_balance = 1;
  int64_t items = 0, resident = 0, slots = 0;
  int workspace_stops_at = 0;  // the first split count the workspace could not hold (0: none)
  std::string explanation() const;
};

// Items are split only where more than half of the resident CTAs would idle:
// above that the parts' hand-over costs more than the second round it saves
// (docs/kernels.md).
inline constexpr double kSplitBelowBalance = 0.5;

// The planner's split for tile `tile_index` on an [N, K] weight with
// `expected_chunks` token chunks and `resident_ctas` CTAs resident at once:
// 1 where the balance is kSplitBelowBalance or more, else the split (at most
// kMaxKSplits and K/bk, within the workspace) with the best balance, each
// extra part weighed at 2% (its slot traffic and the last CTA's sum).
SplitKPlan plan_k_splits(int tile_index, int64_t n, int64_t k, int64_t expected_chunks, int resident_ctas,
                         int64_t workspace_bytes);

}  // namespace fp4moe::plan
