#include "kernels/dependent_launch.cuh"

#include <array>
#include <cstdlib>

namespace fp4moe::kernels {

bool dependent_launch_enabled() {
  static const bool switched_off = [] {
    const char* e = std::getenv("FP4MOE_NO_PDL");
    return e && *e && *e != '0';
  }();
  if (switched_off) return false;
  // per device: -1 unknown, else whether it is sm_90+
  static thread_local std::array<int, 64> known = [] {
    std::array<int, 64> a{};
    a.fill(-1);
    return a;
  }();
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= int(known.size())) return false;
  if (known[size_t(dev)] < 0) {
    int major = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    known[size_t(dev)] = major >= 9;
  }
  return known[size_t(dev)] == 1;
}

}  // namespace fp4moe::kernels
