// The SM clock and board power of the current GPU while a benchmark runs, read
// through NVML (the driver's libnvidia-ml, opened at run time: nothing to link,
// and a machine without it reports no samples rather than failing).
#pragma once
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace fp4moe {

struct SensorSummary {
  int samples = 0;  // 0: NVML was not available
  double sm_clock_mhz_median = 0, sm_clock_mhz_min = 0, power_w_median = 0, power_w_max = 0;
};

// The board's energy counter (NVML, millijoule resolution, since the driver
// loaded) and its enforced power limit.
class GpuEnergyCounter {
 public:
  explicit GpuEnergyCounter(int device);
  bool available() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }
  double joules() const;         // -1 when unavailable
  double power_limit_w() const;  // 0 when unavailable

 private:
  void* handle_ = nullptr;
  std::string why_not_;
};

// Samples every `period_ms` on a thread of its own from construction to
// stop(); stop() returns the summary.
class GpuSensorSampler {
 public:
  explicit GpuSensorSampler(int device, int period_ms = 20);
  ~GpuSensorSampler();
  GpuSensorSampler(const GpuSensorSampler&) = delete;
  GpuSensorSampler& operator=(const GpuSensorSampler&) = delete;
  SensorSummary stop();

 private:
  std::vector<double> clocks_, watts_;
  std::atomic<bool> running_{true};
  std::thread thread_;
};

}  // namespace fp4moe
