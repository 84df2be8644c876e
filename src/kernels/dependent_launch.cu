#include "kernels/dependent_launch.cuh"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace fp4moe::kernels {
namespace {

__global__ void dependent_launch_probe() {}

}  // namespace

bool dependent_launch_enabled(const void* kernel) {
  static const bool switched_off = [] {
    const char* e = std::getenv("FP4MOE_NO_PDL");
    return e && *e && *e != '0';
  }();
  if (switched_off) return false;
  int dev = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_pair(dev, kernel);  // (device, kernel) -> enabled
  // Asked before every small launch (route, permute, row copy, finalize) from
  // every serving thread: each thread keeps the answers it has had, so that
  // the launch path takes no lock after a kernel's first launch on it.
  thread_local std::map<std::pair<int, const void*>, bool> seen;
  if (const auto it = seen.find(key); it != seen.end()) return it->second;
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(key);
  if (it == known.end()) {
    int major = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaFuncAttributes attr{};
    FP4MOE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    it = known.emplace(key, major >= 9 && attr.ptxVersion >= 90).first;
  }
  return seen[key] = it->second;
}

namespace {
std::atomic<bool> skip_launches{false};
}  // namespace

void skip_launches_for_host_timing(bool skip) { skip_launches.store(skip, std::memory_order_relaxed); }
bool launches_skipped() { return skip_launches.load(std::memory_order_relaxed); }

bool dependent_launch_available() { return dependent_launch_enabled(reinterpret_cast<const void*>(&dependent_launch_probe)); }

}  // namespace fp4moe::kernels
