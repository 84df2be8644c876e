#include "runtime/device_buffer.hpp"

#include <sstream>

namespace fp4moe::detail {

namespace {
std::string gib(size_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << double(bytes) / double(size_t(1) << 30) << " GiB";
  return os.str();
}
}  // namespace

void throw_allocation_failure(cudaError_t err, size_t bytes) {
  int dev = -1;
  size_t free_b = 0, total = 0;
  // (an allocation failure is not sticky: the device still answers, and the error is cleared)
  if (err == cudaErrorMemoryAllocation && cudaGetDevice(&dev) == cudaSuccess && cudaMemGetInfo(&free_b, &total) == cudaSuccess) {
    (void)cudaGetLastError();
    throw OutOfDeviceMemory("out of device memory: " + gib(bytes) + " asked for with " + gib(free_b) + " of " + gib(total) +
                " free on device " + std::to_string(dev));
  }
  throw Error(std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes failed: " + cudaGetErrorName(err) + " (" +
              cudaGetErrorString(err) + ")");
}

}  // namespace fp4moe::detail
