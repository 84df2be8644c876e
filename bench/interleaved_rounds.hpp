// Interleaved A/B timing (docs/benchmarks.md): the H200's clocks move with its
// power cap, so two versions are compared only within one run, each round
// timing every side once in turn, and the ratio taken per round.
#pragma once
#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/median.hpp"
#include "measure/steady_timing.hpp"

namespace fp4moe::bench {

struct InterleavedTiming {
  std::vector<double> median_ms;  // per side, the median over the rounds
  double ratio = 0;               // the median over the rounds of side 0's time over side 1's
  nlohmann::json rounds = nlohmann::json::array();  // per round: <name>_us, <name>_mhz, <name>_w
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return detail::median_of_sorted(v);
}

// sides: (name, a steady-state timing of that side), at least two; `rounds` rounds of each side in turn.
inline InterleavedTiming time_interleaved(const std::vector<std::pair<std::string, std::function<SteadyTiming()>>>& sides,
                                          int rounds) {
  std::vector<std::vector<double>> ms(sides.size());
  std::vector<double> ratios;
  InterleavedTiming r;
  for (int i = 0; i < rounds; ++i) {
    nlohmann::json round = nlohmann::json::object();
    for (size_t s = 0; s < sides.size(); ++s) {
      const SteadyTiming t = sides[s].second();
      ms[s].push_back(t.steady.median_ms);
      round[sides[s].first + "_us"] = t.steady.median_ms * 1e3;
      round[sides[s].first + "_mhz"] = t.sensors.sm_clock_mhz_median;
      round[sides[s].first + "_w"] = t.sensors.power_w_median;
    }
    ratios.push_back(ms[0].back() / ms[1].back());
    r.rounds.push_back(round);
  }
  for (const auto& v : ms) r.median_ms.push_back(median(v));
  r.ratio = median(ratios);
  return r;
}

}  // namespace fp4moe::bench
