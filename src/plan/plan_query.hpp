// One planner question, as the CLI (fp4moe plan) and the Python package
// (fp4moe.plan) ask it, and its answer: the plans, and the same as JSON.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/cutlass_blockscaled_model.hpp"
#include "plan/smem_plan.hpp"

namespace fp4moe::plan {

struct PlanQuery {
  std::string arch;                 // "sm90", "sm120", ...
  std::string kernel = "cutlass";   // cutlass (alias trtllm) or decode
  std::string format = "nvfp4";     // cutlass: nvfp4, mxfp8_mxfp4, mxfp4
  std::string tile = "128x128x128"; // cutlass: MxNxK; decode: a tile name or index
  std::string epilogue = "none";    // cutlass: none or finalize
  std::string cluster = "1x1x1";    // cutlass sm_100: 1x1x1 or 2x1x1
  std::string cutlass_version;      // empty: FlashInfer's pin
  bool swap_ab = false;
  bool sweep = false;               // every tile of the family instead of `tile`
  int stages = 0;                   // 0: the automatic stage count
  int64_t n = 4096, k = 6144;       // decode: the GEMM's N and K
  // grouped: the GEMM's activations, bf16 or fp8 (a sweep lists that type's
  // tiles; a tile of the other type is refused, saying so); empty: each tile
  // planned for its own type
  std::string activations;
};

struct PlanAnswer {
  std::vector<SmemPlan> grouped;           // kernel grouped
  std::vector<cutlass::Report> cutlass;    // kernel cutlass
};

// Throws fp4moe::Error naming a bad field (an impossible request is an error, not a verdict).
PlanAnswer answer(const PlanQuery& q);

nlohmann::json to_json(const SmemPlan& p);
nlohmann::json to_json(const cutlass::Report& r);
// One plan as an object, a sweep as an array.
nlohmann::json to_json(const PlanQuery& q, const PlanAnswer& a);

}  // namespace fp4moe::plan
