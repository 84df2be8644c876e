#include "fp4moe/device.hpp"

#include <string>

#include "plan/arch.hpp"
#include "runtime/device_limits.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe {

std::vector<DeviceInfo> list_devices(std::string* why_none) {
  std::vector<DeviceInfo> out;
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    if (why_none) *why_none = err != cudaSuccess ? std::string(cudaGetErrorString(err)) : "the runtime reports 0 devices";
    cudaGetLastError();  // clear the sticky "no device" error
    return out;
  }
  int drv = 0, rt = 0;
  FP4MOE_CUDA_CHECK(cudaDriverGetVersion(&drv));
  FP4MOE_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    FP4MOE_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    auto attr = [i](cudaDeviceAttr a) {
      int v = 0;
      FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, i));
      return static_cast<int64_t>(v);
    };
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc = p.major * 10 + p.minor;
    d.sm_count = p.multiProcessorCount;
    d.smem_optin_per_block = attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    d.smem_per_sm = attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
    d.smem_reserved_per_block = attr(cudaDevAttrReservedSharedMemoryPerBlock);
    d.global_mem_bytes = static_cast<int64_t>(p.totalGlobalMem);
    d.l2_bytes = p.l2CacheSize;
    d.driver_version = drv;
    d.runtime_version = rt;
    out.push_back(d);
  }
  return out;
}

std::vector<std::string> compare_with_arch_table(const DeviceInfo& d) {
  std::vector<std::string> diffs;
  const plan::Arch* a = plan::find_arch_by_cc(d.cc);
  if (!a) return diffs;
  auto cmp = [&](const char* what, int64_t table, int64_t real) {
    if (table != real)
      diffs.push_back(std::string(what) + ": table " + std::to_string(table) + ", device " + std::to_string(real));
  };
  cmp("smem opt-in per block", a->smem_optin_per_block, d.smem_optin_per_block);
  cmp("smem per SM", a->smem_per_sm, d.smem_per_sm);
  cmp("smem reserved per block", a->smem_reserved_per_block, d.smem_reserved_per_block);
  return diffs;
}

DeviceLimits device_limits(int device) {
  auto attr = [device](cudaDeviceAttr a) {
    int v = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
    return v;
  };
  DeviceLimits d;
  d.device = device;
  d.sm_count = attr(cudaDevAttrMultiProcessorCount);
  d.budget.optin_per_block = attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  d.budget.per_sm = attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  d.budget.reserved_per_block = attr(cudaDevAttrReservedSharedMemoryPerBlock);
  d.budget.cc = attr(cudaDevAttrComputeCapabilityMajor) * 10 + attr(cudaDevAttrComputeCapabilityMinor);
  return d;
}

}  // namespace fp4moe
