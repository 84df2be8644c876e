// The pieces of a benchmark report's JSON that every benchmark writes the same
// way (schema: docs/benchmarks.md).
#pragma once
#include <nlohmann/json.hpp>

#include "measure/ceilings.hpp"
#include "measure/gpu_sensors.hpp"

namespace fp4moe {

inline nlohmann::json sensors_json(const SensorSummary& s) {
  return {{"samples", s.samples},
          {"sm_clock_mhz_median", s.sm_clock_mhz_median},
          {"sm_clock_mhz_min", s.sm_clock_mhz_min},
          {"power_w_median", s.power_w_median},
          {"power_w_max", s.power_w_max}};
}

// The energy model and the loops it was fitted on.
inline nlohmann::json energy_json(const EnergyModel& m) {
  nlohmann::json loops = nlohmann::json::array();
  for (const EnergySample& e : m.samples)
    loops.push_back({{"what", e.what}, {"seconds", e.seconds}, {"joules", e.joules}, {"watts", e.watts()},
                     {"bytes", e.bytes}, {"flops", e.flops}});
  if (!m.measured()) return {{"measured", false}, {"why_not", m.why_not}, {"loops", loops}};
  return {{"measured", true},
          {"power_cap_w", m.power_cap_w},
          {"static_w", m.static_w},
          {"pj_per_byte", m.joules_per_byte * 1e12},
          {"pj_per_bf16_flop", m.joules_per_bf16_flop * 1e12},
          {"pj_per_fp8_flop", m.joules_per_fp8_flop * 1e12},
          {"fp8_why_not", m.fp8_why_not},
          {"fit_rms_w", m.fit_rms_w},
          {"loops", loops}};
}

// Steady-state ceilings (the headline's floor) with their sensors, and the start-of-run ones (the burst's floor).
inline nlohmann::json ceilings_json(const Ceilings& c) {
  return {{"copy_tb_per_s", c.copy_tb_per_s},
          {"bf16_tflop_per_s", c.bf16_tflop_per_s},
          {"copy_tb_per_s_burst", c.copy_tb_per_s_burst},
          {"bf16_tflop_per_s_burst", c.bf16_tflop_per_s_burst},
          {"copy_sensors", sensors_json(c.copy_sensors)},
          {"gemm_sensors", sensors_json(c.gemm_sensors)},
          {"warm_seconds", c.warm_seconds},
          {"energy", energy_json(c.energy)}};
}

}  // namespace fp4moe
