// How one MoE layer is split across ranks (docs/parallel.md). Apart from
// parallel.hpp so that code without NCCL (the partition, the CLI's flags, the
// Python package's checks) names the modes too.
#pragma once
#include <string>

namespace fp4moe {

enum class ParallelMode {
  expert_allgather,  // rank r holds experts [r E/G, (r+1) E/G); tokens all-gathered, sums reduce-scattered
  expert_alltoall,   // the same experts; each token only to the ranks of its experts, and back
  tensor,            // rank r holds [r I/G, (r+1) I/G) of every expert's width; sums all-reduced
};
const char* to_string(ParallelMode m);                 // "allgather", "alltoall", "tp"
ParallelMode parse_parallel_mode(const std::string& s);  // the same spellings; an error names any other

}  // namespace fp4moe
