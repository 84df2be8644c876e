// The device a benchmark measures on: the first CUDA device, or none when
// there is none or (need_sm90) it cannot run the sm_90a tiles. Then it says
// why and the benchmark has nothing to measure: it exits 0, as CI runs it.
#pragma once
#include <optional>

#include <fmt/core.h>

#include "fp4moe/device.hpp"

namespace fp4moe::bench {

inline std::optional<DeviceInfo> bench_device(const char* bench, bool need_sm90 = false) {
  std::string why;
  const auto devs = list_devices(&why);
  if (devs.empty()) {
    fmt::print("{}: no CUDA device ({}): nothing to measure\n", bench, why);
    return std::nullopt;
  }
  if (need_sm90 && devs[0].cc != 90) {
    fmt::print("{}: the FP8 and warp-specialized tiles need sm_90a; this device is sm_{}\n", bench, devs[0].cc);
    return std::nullopt;
  }
  return devs[0];
}

}  // namespace fp4moe::bench
