// The energy a launch cannot do without, measured in the run: at the power cap
// a launch takes at least (bytes x energy per byte + FLOPs x energy per FLOP)
// / (cap - static power), however fast the memory and the tensor cores are.
// Method and uncertainty: docs/benchmarks.md, "The energy floor".
#pragma once
#include <string>
#include <vector>

namespace fp4moe {

// One steady loop: how long it ran, the board energy it drew, what it moved and computed.
struct EnergySample {
  std::string what;  // "copy 528 CTAs", "cuBLAS bf16 8192^3"
  double seconds = 0, joules = 0, bytes = 0, flops = 0;
  double watts() const { return seconds > 0 ? joules / seconds : 0; }
};

struct EnergyModel {
  std::string why_not = "not measured";  // empty when measured
  double power_cap_w = 0;   // the enforced power limit
  double static_w = 0;      // the copy loops' power at zero bytes per second (the fit's intercept)
  double joules_per_byte = 0;       // HBM bytes read or written (the fit's slope)
  double joules_per_bf16_flop = 0;  // cuBLAS bf16 GEMM, above static and its bytes
  double joules_per_fp8_flop = 0;   // cuBLASLt e4m3 GEMM, the same way (0 where it could not run)
  std::string fp8_why_not;          // why joules_per_fp8_flop is 0
  double fit_rms_w = 0;     // the copy loops' residual about the line
  std::vector<EnergySample> samples;
  bool measured() const { return why_not.empty(); }
};

// Copy loops at several rates (fewer CTAs, fewer bytes per second), one
// dense bf16 and one dense FP8 GEMM loop, each `seconds_per_loop` back to back on the current
// device, read with NVML's energy counter.
EnergyModel measure_energy_model(double seconds_per_loop = 1.0);

// The time, ms, that the energy of `bytes`, bf16 `flops` and `fp8_flops`
// takes at the cap; 0 when the model was not measured.
double energy_bound_ms(const EnergyModel& m, double bytes, double flops, double fp8_flops = 0);

}  // namespace fp4moe
