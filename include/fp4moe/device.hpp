// The CUDA devices fp4moe can see, with the limits the planner needs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fp4moe {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc = 0;                          // compute capability * 10 (90 for sm_90)
  int sm_count = 0;
  int64_t smem_optin_per_block = 0;    // cudaDevAttrMaxSharedMemoryPerBlockOptin
  int64_t smem_per_sm = 0;             // cudaDevAttrMaxSharedMemoryPerMultiprocessor
  int64_t smem_reserved_per_block = 0; // cudaDevAttrReservedSharedMemoryPerBlock
  int64_t global_mem_bytes = 0;
  int64_t l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;
};

// Every device the CUDA runtime reports. Empty when there is none; then
// `why_none` (if given) says what the runtime answered.
std::vector<DeviceInfo> list_devices(std::string* why_none = nullptr);

// Differences between a device's real limits and fp4moe's architecture table
// (empty when they agree, or when the architecture is not in the table).
std::vector<std::string> compare_with_arch_table(const DeviceInfo& d);

}  // namespace fp4moe
