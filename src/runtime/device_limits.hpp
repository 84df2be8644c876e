// What the planner and the launchers need to know about one device, read from
// the runtime's attributes.
#pragma once
#include "plan/arch.hpp"

namespace fp4moe {

struct DeviceLimits {
  int device = -1, sm_count = 0, cc = 0;
  plan::SmemBudget budget;
};

DeviceLimits device_limits(int device);

}  // namespace fp4moe
