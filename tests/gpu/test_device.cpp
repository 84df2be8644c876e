#include <gtest/gtest.h>

#include "fp4moe/device.hpp"

namespace fp4moe {

TEST(GpuDevice, RealLimitsMatchTheArchTable) {
  std::string why;
  const auto devs = list_devices(&why);
  if (devs.empty()) GTEST_SKIP() << "no CUDA device (" << why << "): GPU test skipped";
  for (const DeviceInfo& d : devs) {
    EXPECT_GT(d.sm_count, 0);
    EXPECT_GT(d.smem_optin_per_block, 48 * 1024);
    for (const auto& diff : compare_with_arch_table(d)) ADD_FAILURE() << d.name << ": " << diff;
  }
}

}  // namespace fp4moe
