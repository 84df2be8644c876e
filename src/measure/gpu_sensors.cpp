#include "measure/gpu_sensors.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <string>

#include <cuda_runtime.h>

#include "common/median.hpp"

namespace fp4moe {
namespace {

// The few NVML entry points used, by their C signatures (nvml.h: handles are opaque pointers).
using Handle = void*;
struct Nvml {
  int (*init)() = nullptr;
  int (*by_pci)(const char*, Handle*) = nullptr;
  int (*clock)(Handle, int, unsigned*) = nullptr;  // nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM = 1, &mhz)
  int (*power)(Handle, unsigned*) = nullptr;       // nvmlDeviceGetPowerUsage(dev, &milliwatts)
  // optional: nvmlDeviceGetTotalEnergyConsumption(dev, &millijoules since the driver loaded),
  // nvmlDeviceGetEnforcedPowerLimit(dev, &milliwatts)
  int (*energy)(Handle, unsigned long long*) = nullptr;
  int (*power_limit)(Handle, unsigned*) = nullptr;
  std::string error;
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      r.error = "libnvidia-ml.so.1 not found";
      return r;
    }
    r.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    r.by_pci = reinterpret_cast<int (*)(const char*, Handle*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    r.clock = reinterpret_cast<int (*)(Handle, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    r.power = reinterpret_cast<int (*)(Handle, unsigned*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    r.energy = reinterpret_cast<int (*)(Handle, unsigned long long*)>(dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    r.power_limit = reinterpret_cast<int (*)(Handle, unsigned*)>(dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit"));
    if (!r.init || !r.by_pci || !r.clock || !r.power) r.error = "NVML lacks an entry point used here";
    else if (r.init() != 0) r.error = "nvmlInit_v2 failed";
    return r;
  }();
  return n;
}

// The NVML handle of CUDA device `device`, or null (and why).
Handle handle_of(int device, std::string* why) {
  const Nvml& n = nvml();
  Handle h = nullptr;
  char pci[32] = {0};
  if (!n.error.empty()) *why = n.error;
  else if (cudaDeviceGetPCIBusId(pci, sizeof(pci), device) != cudaSuccess) *why = "no PCI bus id for the CUDA device";
  else if (n.by_pci(pci, &h) != 0) *why = "NVML does not know the device at " + std::string(pci);
  return why->empty() ? h : nullptr;
}

}  // namespace

GpuEnergyCounter::GpuEnergyCounter(int device) {
  handle_ = handle_of(device, &why_not_);
  if (handle_ && !nvml().energy) why_not_ = "NVML has no nvmlDeviceGetTotalEnergyConsumption";
  unsigned long long mj = 0;
  if (why_not_.empty() && nvml().energy(handle_, &mj) != 0) why_not_ = "nvmlDeviceGetTotalEnergyConsumption failed";
}

double GpuEnergyCounter::joules() const {
  unsigned long long mj = 0;
  if (!available() || nvml().energy(handle_, &mj) != 0) return -1;
  return double(mj) * 1e-3;
}

double GpuEnergyCounter::power_limit_w() const {
  unsigned mw = 0;
  if (!handle_ || !nvml().power_limit || nvml().power_limit(handle_, &mw) != 0) return 0;
  return mw * 1e-3;
}

GpuSensorSampler::GpuSensorSampler(int device, int period_ms) {
  const Nvml& n = nvml();
  Handle h = nullptr;
  char pci[32] = {0};
  if (!n.error.empty() || cudaDeviceGetPCIBusId(pci, sizeof(pci), device) != cudaSuccess || n.by_pci(pci, &h) != 0) {
    running_ = false;
    return;
  }
  thread_ = std::thread([this, h, period_ms, &n] {
    while (running_) {
      unsigned mhz = 0, mw = 0;
      if (n.clock(h, 1, &mhz) == 0 && n.power(h, &mw) == 0) clocks_.push_back(mhz), watts_.push_back(mw / 1000.0);
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
    }
  });
}

GpuSensorSampler::~GpuSensorSampler() { stop(); }

SensorSummary GpuSensorSampler::stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
  SensorSummary s;
  s.samples = int(clocks_.size());
  if (s.samples == 0) return s;
  std::vector<double> c = clocks_, w = watts_;
  std::sort(c.begin(), c.end());
  std::sort(w.begin(), w.end());
  s.sm_clock_mhz_median = detail::median_of_sorted(c);
  s.sm_clock_mhz_min = c.front();
  s.power_w_median = detail::median_of_sorted(w);
  s.power_w_max = w.back();
  return s;
}

}  // namespace fp4moe
