// The benchmarks' floors and their report: each timing is put against the
// ceilings taken in the same state (steady state against steady state, the
// after-idle burst against the start of the run). Host code of the CUDA
// library that needs no GPU, so it runs in CI too.
#include <gtest/gtest.h>

#include <string>

#include "fp4moe/error.hpp"
#include "measure/ceilings.hpp"
#include "measure/layer_benchmark.hpp"
#include "measure/report_json.hpp"

namespace fp4moe {
namespace {

Ceilings sample_ceilings() {
  Ceilings c;
  c.copy_tb_per_s = 4.0, c.bf16_tflop_per_s = 700.0;               // steady state, at the cap
  c.copy_tb_per_s_burst = 4.25, c.bf16_tflop_per_s_burst = 790.0;  // start of the run
  c.gemm_sensors.samples = 10, c.gemm_sensors.sm_clock_mhz_median = 1650, c.gemm_sensors.power_w_median = 699;
  c.warm_seconds = 2;
  return c;
}

TEST(BenchmarkFloors, EachStateHasItsOwnCeilings) {
  const Ceilings c = sample_ceilings();
  // bytes-bound: 4 GB at 4 TB/s is 1 ms (FLOPs would take 0.1 ms)
  EXPECT_DOUBLE_EQ(floor_ms(c, 4e9, 70e9), 1.0);
  EXPECT_NEAR(floor_ms(c, 4e9, 70e9, /*burst=*/true), 4e9 / 4.25e12 * 1e3, 1e-12);
  // FLOP-bound: 1.4 TFLOP at 700 TFLOP/s is 2 ms; the start-of-run rate gives less
  EXPECT_DOUBLE_EQ(floor_ms(c, 1e9, 1.4e12), 2.0);
  EXPECT_NEAR(floor_ms(c, 1e9, 1.4e12, true), 1.4e12 / 790e12 * 1e3, 1e-12);
  EXPECT_GT(floor_ms(c, 1e9, 1.4e12), floor_ms(c, 1e9, 1.4e12, true));
}

// At the cap a launch needs its energy over the power above static: the
// energy floor is that or the roofline floor, whichever is longer.
TEST(BenchmarkFloors, TheEnergyFloorBindsWhereTheCapDoes) {
  Ceilings c = sample_ceilings();
  EXPECT_DOUBLE_EQ(energy_floor_ms(c, 4e9, 1e12), floor_ms(c, 4e9, 1e12)) << "no energy model: the roofline floor";
  c.energy.why_not.clear();
  c.energy.power_cap_w = 700, c.energy.static_w = 120;
  c.energy.joules_per_byte = 115e-12, c.energy.joules_per_bf16_flop = 0.6e-12;
  // bytes alone: 0.46 J at 580 W is 0.79 ms, under the 1 ms of 4 GB at 4 TB/s
  EXPECT_DOUBLE_EQ(energy_floor_ms(c, 4e9, 0), 1.0);
  // with 1 TFLOP: 1.06 J at 580 W is 1.83 ms, over the roofline's 1.43 ms
  EXPECT_NEAR(energy_floor_ms(c, 4e9, 1e12), (4e9 * 115e-12 + 1e12 * 0.6e-12) / 580 * 1e3, 1e-12);
  EXPECT_GT(energy_floor_ms(c, 4e9, 1e12), floor_ms(c, 4e9, 1e12));
  c.energy.why_not = "no NVML";
  EXPECT_DOUBLE_EQ(energy_floor_ms(c, 4e9, 1e12), floor_ms(c, 4e9, 1e12));
  EXPECT_FALSE(energy_json(c.energy)["measured"].get<bool>());
}

TEST(BenchmarkFloors, ABadWarmUpIsNamedBeforeAnyWork) {
  try {
    measure_ceilings(-1.0);
    FAIL() << "measure_ceilings(-1) returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warm_seconds = -1"), std::string::npos) << e.what();
  }
}

TEST(BenchmarkFloors, TheReportCarriesBothCeilingsAndTheTableShowsThem) {
  const Ceilings c = sample_ceilings();
  const nlohmann::json ce = ceilings_json(c);
  EXPECT_DOUBLE_EQ(ce["bf16_tflop_per_s"].get<double>(), 700.0);
  EXPECT_DOUBLE_EQ(ce["bf16_tflop_per_s_burst"].get<double>(), 790.0);
  EXPECT_DOUBLE_EQ(ce["gemm_sensors"]["power_w_median"].get<double>(), 699.0);

  nlohmann::json layer = {{"time", {{"median_ms", 2.0}, {"min_ms", 1.9}, {"max_ms", 2.1}}},
                          {"burst_time", {{"median_ms", 1.5}, {"min_ms", 1.5}, {"max_ms", 1.6}}},
                          {"floor_fraction", 0.5}, {"burst_floor_fraction", 0.61}, {"non_gemm_fraction", 0.05}};
  const nlohmann::json report = {{"device", "test GPU"}, {"model", "glm5"}, {"finalize", "split"}, {"ceilings", ce},
                                 {"timing", {{"warm_seconds", 2.0}}},
                                 {"cases", {{{"tokens", 512}, {"tokens_per_expert", 16.0}, {"layer", layer}, {"gemms", nlohmann::json::array()}}}},
                                 {"skewed_cases", nlohmann::json::array()}};
  const std::string table = layer_bench_table(report);
  EXPECT_NE(table.find("at steady state: copy 4.00 TB/s, cuBLAS bf16 700 TFLOP/s (at the start: 4.25 TB/s, 790 TFLOP/s)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 2.0000 | 50% | 1.5000 (61%) |"), std::string::npos) << table;
  nlohmann::json with_energy = report;
  with_energy["cases"][0]["layer"]["energy_floor_fraction"] = 0.8;
  const std::string energy_table = layer_bench_table(with_energy);
  EXPECT_NE(energy_table.find("| 2.0000 | 50% (80%) | 1.5000 (61%) |"), std::string::npos) << energy_table;
}

}  // namespace
}  // namespace fp4moe
