// launch_gather_rows refuses bad arguments on the host, naming the value,
// before anything reaches the GPU: this test links the CUDA library but needs
// no GPU, so it runs in CI too.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fp4moe/error.hpp"
#include "kernels/routing_kernels.hpp"

namespace fp4moe {
namespace {

std::string error_of(const kernels::GatherRowsArgs& a) {
  try {
    kernels::launch_gather_rows(a, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GatherRowsArgs, BadArgumentsAreNamedBeforeAnyLaunch) {
  alignas(16) static uint8_t buffer[64];
  auto* x = reinterpret_cast<const __nv_bfloat16*>(buffer);
  auto* out = reinterpret_cast<__nv_bfloat16*>(buffer + 32);
  static const int32_t rows[1] = {0};
  const kernels::GatherRowsArgs ok{x, rows, 0, 8, out};  // count 0: checked, then nothing to launch
  EXPECT_EQ(error_of(ok), "");

  kernels::GatherRowsArgs a = ok;
  a.out = nullptr;
  EXPECT_NE(error_of(a).find("got null"), std::string::npos) << error_of(a);
  a = ok;
  a.cols = 12;
  EXPECT_NE(error_of(a).find("cols = 12"), std::string::npos) << error_of(a);
  a = ok;
  a.count = -3;
  EXPECT_NE(error_of(a).find("count = -3"), std::string::npos) << error_of(a);
  a = ok;
  a.x = reinterpret_cast<const __nv_bfloat16*>(buffer + 8);
  EXPECT_NE(error_of(a).find("16-byte aligned"), std::string::npos) << error_of(a);
  a = ok;
  a.out = reinterpret_cast<__nv_bfloat16*>(buffer + 40);
  EXPECT_NE(error_of(a).find("16-byte aligned"), std::string::npos) << error_of(a);
}

}  // namespace
}  // namespace fp4moe
