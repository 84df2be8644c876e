// Planning fp4moe's decode grouped GEMM tiles (layout: decode_layout.hpp).
#pragma once
#include <cstdint>
#include <string>

#include "plan/arch.hpp"
#include "plan/decode_layout.hpp"
#include "plan/smem_plan.hpp"

namespace fp4moe::plan {

std::string decode_tile_name(int tile_index);

// Plan tile `tile_index` for a [N, K] weight on a target with `capacity` bytes
// of opt-in shared memory. stages_request 0 lets the planner choose
// (DESIGN.md section 4); a positive value is checked as given.
// A shape the tile cannot divide is a verdict (fits = false), not an error;
// a tile index outside the list is an fp4moe::Error.
SmemPlan plan_decode_tile(int tile_index, int64_t n, int64_t k, const SmemBudget& budget, int stages_request = 0);
SmemPlan plan_decode_tile(int tile_index, int64_t n, int64_t k, const Arch& arch, int stages_request = 0);

// The planner's default ranking for a problem: the fitting tile whose token
// tile best covers `tokens_per_expert` with enough work items to fill `sm_count` SMs.
// Returns -1 when no tile fits (every plan's explanation says why).
int rank_decode_tiles(int64_t n, int64_t k, const SmemBudget& budget, double tokens_per_expert, int64_t active_experts,
                      int sm_count);

}  // namespace fp4moe::plan
