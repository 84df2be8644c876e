#include <gtest/gtest.h>

#include <cstdlib>

#include "fp4moe/device.hpp"
#include "gpu_test_util.hpp"
#include "kernels/dependent_launch.hpp"

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

// sm_90 runs fp4moe's own sm_90a code, so its launches overlap (unless switched off).
TEST(GpuDevice, DependentLaunchOnSm90) {
  std::string why;
  const auto devs = list_devices(&why);
  if (devs.empty()) GTEST_SKIP() << "no CUDA device (" << why << "): GPU test skipped";
  const char* off = std::getenv("FP4MOE_NO_PDL");
  const bool switched_off = off && *off && *off != '0';
  if (test::first_device_has_wgmma()) {
    EXPECT_EQ(kernels::dependent_launch_available(), !switched_off);
  }
  if (devs[0].cc < 90) {
    EXPECT_FALSE(kernels::dependent_launch_available());
  }
}

}  // namespace fp4moe
