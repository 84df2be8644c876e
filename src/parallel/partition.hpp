// How one MoE layer is split across G ranks, on the host: which experts a rank
// holds under expert parallelism (EP), which slice of every expert's
// intermediate dimension under tensor parallelism (TP), and where each routed
// pair travels under EP all-to-all. Shared by the parallel layer, its CPU
// tests and the CLI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/model.hpp"
#include "fp4moe/parallel_mode.hpp"
#include "fp4moe/reference.hpp"

namespace fp4moe::parallel {

// EP: rank r holds experts [r E/G, (r+1) E/G); E % G != 0 is an error naming both.
struct ExpertRange {
  int64_t begin = 0, count = 0;
};
ExpertRange expert_range(const MoeConfig& cfg, int rank, int ranks);

// The experts of `w` in [begin, begin + count), and the shared expert (which
// every EP rank holds whole: it computes its own tokens' shared output).
MoeWeights slice_experts(const MoeWeights& w, ExpertRange r);

// TP: rank r holds rows [r I/G, (r+1) I/G) of every expert's gate and up, the
// same columns of its down, and the same of the shared expert (Is/G); block
// scales follow their elements. I/G must be a positive multiple of 128 (the
// kernels' K step, and so of every FP4 block); errors name I, G and the rule.
MoeConfig tp_config(const MoeConfig& cfg, int ranks);
MoeWeights slice_intermediate(const MoeConfig& cfg, const MoeWeights& w, int rank, int ranks);

// EP all-to-all: the slot each (token, destination rank) takes in the send
// buffer to that rank, with a fixed capacity of T_max rows per peer (a token
// goes at most once to each rank, carrying the ids and weights of its pairs
// there; the others set to -1 and 0). The GPU dispatch (kernels/ep_dispatch.cu)
// computes the same; the CPU tests check it against this.
struct AllToAllPlan {
  int ranks = 0;
  int64_t capacity = 0;                  // rows per peer
  std::vector<int64_t> count;            // [G] rows sent to each rank
  std::vector<int32_t> token;            // [G][capacity] the token in each slot (-1 empty)
  std::vector<int32_t> ids;              // [G][capacity][k] global expert ids, -1 where the pair goes elsewhere
  std::vector<float> weights;            // [G][capacity][k]
};
AllToAllPlan plan_alltoall(const MoeConfig& cfg, const Routing& r, int ranks, int64_t capacity);

}  // namespace fp4moe::parallel
