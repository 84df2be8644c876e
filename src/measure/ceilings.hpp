// The two ceilings every benchmark is measured against, taken in the same run:
// device-to-device copy bandwidth and the cuBLAS bf16 dense GEMM rate.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "measure/energy.hpp"
#include "measure/gpu_sensors.hpp"

namespace fp4moe {

// Each ceiling at steady state (run back to back for warm_seconds first, as the
// benchmarks' headline times are: on the H200 a dense GEMM at the 700 W cap
// runs well below its start-of-run rate) and at the start of the run (the
// burst, taken first, against which the after-idle figures are put).
struct Ceilings {
  double copy_tb_per_s = 0;     // (bytes read + bytes written) / time, large cudaMemcpy D2D; steady state
  double bf16_tflop_per_s = 0;  // cuBLAS bf16 GEMM, fp32 accumulation, random data; steady state
  double copy_tb_per_s_burst = 0, bf16_tflop_per_s_burst = 0;  // the same at the start of the run
  SensorSummary copy_sensors, gemm_sensors;                      // beside the steady-state timings
  EnergyModel energy;  // measured with the steady-state ceilings (not with warm_seconds = 0)
  double warm_seconds = 0;
  int64_t copy_bytes = 0;
  int gemm_size = 0;
};

// warm_seconds: back-to-back time before each steady-state timing (0: the
// steady figures are the start-of-run ones); copy_bytes: buffer size of the
// copy test; gemm_size: M = N = K of the GEMM.
Ceilings measure_ceilings(double warm_seconds, int64_t copy_bytes = int64_t(2) << 30, int gemm_size = 8192);

// The floor of a case, ms: max(bytes / copy bandwidth, FLOPs / bf16 rate) at
// the steady-state ceilings, or at the start-of-run ones (`burst`).
double floor_ms(const Ceilings& c, double bytes, double flops, bool burst = false);
// The steady-state floor or the energy the case needs at the power cap,
// whichever is longer, ms (the roofline floor where no energy model was measured).
double energy_floor_ms(const Ceilings& c, double bytes, double flops);

// The cuBLAS bf16 rate alone (TFLOP/s), timed as the start-of-run ceiling is (3
// warm-up and 20 timed runs, no steady state): beside a case, the rate at that
// moment's clocks (docs/benchmarks.md).
double measure_bf16_tflop_per_s(int gemm_size = 8192);

}  // namespace fp4moe
