// Planning fp4moe's decode grouped GEMM tiles (layout: gemm_layout.hpp).
#pragma once
#include <cstdint>
#include <string>

#include "plan/arch.hpp"
#include "plan/gemm_layout.hpp"
#include "plan/smem_plan.hpp"

namespace fp4moe::plan {

std::string gemm_tile_name(int tile_index);

// The planner's verdict alone, without the text: whether tile `tile_index`
// fits a [N, K] weight on `budget`, with how many stages (stages_request 0:
// the planner's stage rule, docs/planner.md; a positive value is checked as
// given). Every launch checks this; plan_gemm_tile explains it.
struct GemmTileFit {
  enum class Why { fits, needs_sm90, wgmma_switched_off, does_not_divide, odd_cluster_tiles, tensor_map, too_few_stages,
                   too_many_stages, over_capacity, other_activations };
  Why why = Why::fits;
  bool fits = false;
  int stages = 0, auto_stages = 0;
  int64_t smem_bytes = 0, capacity = 0;
};
// `activations`: the GEMM's activation type; a tile runs only its own.
GemmTileFit fit_gemm_tile(int tile_index, int64_t n, int64_t k, const SmemBudget& budget, int stages_request = 0,
                          ActivationType activations = ActivationType::bf16);

// The verdict with every shared-memory term and the explanation, for the CLI,
// describe() and errors.
// A shape the tile cannot divide is a verdict (fits = false), not an error;
// a tile index outside the list is an fp4moe::Error.
SmemPlan plan_gemm_tile(int tile_index, int64_t n, int64_t k, const SmemBudget& budget, int stages_request = 0,
                        ActivationType activations = ActivationType::bf16);
SmemPlan plan_gemm_tile(int tile_index, int64_t n, int64_t k, const Arch& arch, int stages_request = 0,
                        ActivationType activations = ActivationType::bf16);

// The planner's default ranking for a problem: the fitting tile whose token
// tile best covers `tokens_per_expert` with enough work items to fill `sm_count` SMs.
// Returns -1 when no tile fits (every plan's explanation says why).
int rank_gemm_tiles(int64_t n, int64_t k, const SmemBudget& budget, double tokens_per_expert, int64_t active_experts,
                      int sm_count, ActivationType activations = ActivationType::bf16);

}  // namespace fp4moe::plan
