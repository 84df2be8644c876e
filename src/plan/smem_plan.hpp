// A shared-memory plan: every term of a kernel configuration's budget, the
// stage count, the verdict and, when it does not fit, what would.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fp4moe::plan {

struct SmemTerm {
  std::string name;
  int64_t bytes = 0;
  std::string note;   // e.g. "x 4 stages", "aliased", "runtime reservation (not opt-in)"
};

struct SmemPlan {
  std::string kernel;       // family, e.g. "grouped"
  std::string config;       // e.g. "bm128 nt16 bk256"
  std::string arch;         // e.g. "sm_90" or "capacity override"
  int64_t capacity = 0;     // dynamic shared memory one block may opt into
  int64_t per_stage = 0;
  int stages = 0, min_stages = 0, max_stages = 0;
  int threads = 0, ctas_per_sm = 1;  // launch shape and occupancy target
  std::string activations;           // grouped tiles: "bf16" or "e4m3"
  int64_t smem_bytes = 0;   // dynamic shared memory the kernel allocates
  bool fits = false;
  int64_t headroom = 0;     // capacity - smem_bytes (negative when it does not fit)
  std::vector<SmemTerm> terms;
  std::string explanation;
  std::vector<std::string> suggestions;
};

}  // namespace fp4moe::plan
