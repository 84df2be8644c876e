// The GPU targets fp4moe plans for: one value per architecture, with the
// shared-memory capacities every plan is measured against.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fp4moe::plan {

struct Arch {
  std::string_view name;        // "sm_90"
  int cc;                       // compute capability * 10: 90
  int64_t smem_optin_per_block; // bytes of dynamic shared memory one block may opt into
  int64_t smem_per_sm;          // bytes of shared memory per SM
  int64_t smem_reserved_per_block;  // what the runtime keeps per block (not part of optin)
  bool has_wgmma;               // Hopper warpgroup MMA (sm_90a)
  bool has_fp4_mma;             // native block-scaled FP4 MMA (sm_100a / sm_120a)
};

std::span<const Arch> all_archs();
// Accepts "sm_90", "sm90", "90", "sm_90a", "9.0"; throws fp4moe::Error naming the value.
const Arch& find_arch(std::string_view name);
const Arch* find_arch_by_cc(int cc);

}  // namespace fp4moe::plan
