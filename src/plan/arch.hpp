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

// What one block may use: the opt-in limit, what an SM holds in all, and the
// runtime's per-block reservation. From the table, or read off a real device.
struct SmemBudget {
  int64_t optin_per_block = 0;
  int64_t per_sm = 0;
  int64_t reserved_per_block = 0;
  int cc = 0;  // the target's compute capability (*10); its features: has_wgmma() and the Arch table
  // Bytes one block may allocate when `ctas_per_sm` blocks must be resident together.
  constexpr int64_t per_block_at(int ctas_per_sm) const {
    const int64_t share = per_sm / ctas_per_sm - reserved_per_block;
    return share < optin_per_block ? share : optin_per_block;
  }
  // A target with only `optin` bytes per block (e.g. sm_120's 101376 on this GPU).
  static constexpr SmemBudget clamped(int64_t optin, int cc) { return {optin, optin + 1024, 1024, cc}; }
  // Whether the target runs fp4moe's sm_90a kernels (warpgroup MMA, tensor
  // copies into transaction barriers): Arch::has_wgmma of its architecture.
  bool has_wgmma() const;
};
constexpr SmemBudget budget_of(const Arch& a) {
  return {a.smem_optin_per_block, a.smem_per_sm, a.smem_reserved_per_block, a.cc};
}

// One GPU as the planner and the kernel launchers see it, read off the device
// (runtime/device_limits.hpp): launchers take it as a value.
struct DeviceLimits {
  int device = -1, sm_count = 0;
  SmemBudget budget;
};

std::span<const Arch> all_archs();
// Accepts "sm_90", "sm90", "90", "sm_90a", "9.0"; throws fp4moe::Error naming the value.
const Arch& find_arch(std::string_view name);
const Arch* find_arch_by_cc(int cc);

}  // namespace fp4moe::plan
