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

#include "common/host_device.hpp"
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

// The balanced split ("stream-K"): a launch's items laid end to end as
// items x K stages units, CTA c of G running units [c U / G, (c + 1) U / G),
// so that every CTA streams the same share of the weights whatever the item
// count (tiles that balance: GemmTile::balances_k). An item cut between CTAs
// is summed by the CTA that ran its first stages, at the end of its range,
// from the parts that the next CTAs ran first in theirs: those hand their
// accumulators over and go on without waiting, and the summing CTA waits only
// for parts that ran at the start of other CTAs' ranges. A CTA holds at most
// one such later part, so the workspace holds one slot per CTA, and the sum
// takes the parts in order (bitwise the same run to run).
// GemmLaunch::k_splits = kBalancedKSplit asks for it; with
// GemmLaunch::balance_k the planner takes it where the items' balance is at
// least kSplitBelowBalance (below, the split into parts stays) and below kBalanceBelow.
inline constexpr int kBalancedKSplit = -1;
inline constexpr double kBalanceBelow = 0.9;

// The balanced split's arithmetic, which the kernel's schedule
// (kernels/ws_schedule.cuh) and the tests share: `items` items of `stages` K
// stages each on `launch_ctas` CTAs. The kernel computes in 32 bits (64-bit
// division made ptxas spill in the producer of the tightest tiles), where
// units() x ctas() fits (fits_32_bits); the host in 64.
template <class Int>
struct BalancedSplitOf {
  Int items, stages, launch_ctas;
  // What a CTA runs of one item: stages [kt0, kt1), part `part` of `parts`
  // (part 0 sums the others; the others are their CTAs' first segments).
  struct Segment {
    Int kt0, kt1, part, parts;
  };
  FP4MOE_HD Int units() const { return items * stages; }
  // The CTAs that share the units: all, or one a unit where there are fewer
  // units, so that every CTA inside an item's span holds a part of it (one
  // without would never hand its part over, and its item's sum never end).
  FP4MOE_HD Int ctas() const { return launch_ctas < units() ? launch_ctas : units(); }
  FP4MOE_HD static bool fits_32_bits(int64_t items, int64_t stages, int64_t ctas) {
    return items * stages * (ctas + 1) < (int64_t(1) << 31);
  }
  // CTA c's units are [unit_begin(c), unit_begin(c + 1)); the CTA of unit u.
  FP4MOE_HD Int unit_begin(Int c) const { return (c < ctas() ? c : ctas()) * units() / ctas(); }
  FP4MOE_HD Int cta_of_unit(Int u) const { return ((u + 1) * ctas() - 1) / units(); }
  // CTA c's segments are items [first_item(c), end_item(c)), in order.
  FP4MOE_HD Int first_item(Int c) const { return unit_begin(c) / stages; }
  FP4MOE_HD Int end_item(Int c) const {
    const Int u0 = unit_begin(c), u1 = unit_begin(c + 1);
    return u1 > u0 ? (u1 - 1) / stages + 1 : u0 / stages;
  }
  // CTA c's stages of `item`: what the loops need, without the parts.
  FP4MOE_HD Segment stages_of(Int c, Int item) const {
    const Int first = item * stages, u0 = unit_begin(c) - first, u1 = unit_begin(c + 1) - first;
    return {u0 > 0 ? u0 : 0, u1 < stages ? u1 : stages, 0, 1};
  }
  // The parts of `item`, from its CTA `owner` (that of its first stages) on.
  FP4MOE_HD Int parts_from(Int owner, Int item) const { return cta_of_unit(item * stages + stages - 1) - owner + 1; }
  FP4MOE_HD Segment segment(Int c, Int item) const {
    Segment g = stages_of(c, item);
    const Int owner = cta_of_unit(item * stages);
    g.part = c - owner, g.parts = parts_from(owner, item);
    return g;
  }
};
using BalancedSplit = BalancedSplitOf<int64_t>;

// The numbers behind the split; explanation() makes the text only when asked
// (the launch path needs none: a forward builds no strings).
struct SplitKPlan {
  enum class Why { tile_does_not_split, no_workspace, no_items, balanced, planned, given };
  Why why = Why::no_items;
  int tile = -1;
  int splits = 1;
  bool balanced_split = false;  // the balanced split (splits is then 1)
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
// extra part weighed at 2% (its slot traffic and the last CTA's sum). With
// `balance_k`, the balanced split where the tile balances, the balance is from
// kSplitBelowBalance to kBalanceBelow and the workspace holds its counters and slots.
SplitKPlan plan_k_splits(int tile_index, int64_t n, int64_t k, int64_t expected_chunks, int resident_ctas,
                         int64_t workspace_bytes, bool balance_k = false);
// Whether the workspace holds the balanced split of `items` items of depth k
// on `ctas` CTAs of the tile (and the kernel's 32-bit arithmetic its units).
bool balanced_split_fits(const GemmTile& t, int64_t items, int64_t k, int64_t ctas, int64_t workspace_bytes);

}  // namespace fp4moe::plan
