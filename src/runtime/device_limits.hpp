// A device's limits (plan::DeviceLimits), read from the runtime's attributes.
#pragma once
#include "plan/arch.hpp"

namespace fp4moe {

using plan::DeviceLimits;
DeviceLimits device_limits(int device);

}  // namespace fp4moe
