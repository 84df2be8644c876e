#include <gtest/gtest.h>

#include "fp4moe/error.hpp"
#include "plan/arch.hpp"

namespace fp4moe::plan {

TEST(Arch, CapacitiesMatchTheDesignTable) {
  EXPECT_EQ(find_arch("sm_80").smem_optin_per_block, 166912);
  EXPECT_EQ(find_arch("sm_86").smem_optin_per_block, 101376);
  EXPECT_EQ(find_arch("sm_89").smem_optin_per_block, 101376);
  EXPECT_EQ(find_arch("sm_90").smem_optin_per_block, 232448);
  EXPECT_EQ(find_arch("sm_100").smem_optin_per_block, 232448);
  EXPECT_EQ(find_arch("sm_103").smem_optin_per_block, 232448);
  EXPECT_EQ(find_arch("sm_120").smem_optin_per_block, 101376);
  EXPECT_EQ(find_arch("sm_121").smem_optin_per_block, 101376);
  EXPECT_EQ(find_arch("sm_90").smem_per_sm, 233472);
  EXPECT_EQ(find_arch("sm_90").smem_reserved_per_block, 1024);
}

TEST(Arch, AcceptsCommonSpellings) {
  EXPECT_EQ(find_arch("sm120").cc, 120);
  EXPECT_EQ(find_arch("sm_90a").cc, 90);
  EXPECT_EQ(find_arch("90").cc, 90);
  EXPECT_EQ(find_arch("SM_100").cc, 100);
}

TEST(Arch, UnknownArchIsAClearError) {
  try {
    find_arch("sm_75");
    FAIL() << "sm_75 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sm_75"), std::string::npos) << e.what();
  }
  EXPECT_THROW(find_arch("banana"), Error);
  EXPECT_THROW(find_arch(""), Error);
}

}  // namespace fp4moe::plan
