#include "plan/tune_rounds.hpp"

#include <algorithm>

#include "common/median.hpp"
#include "fp4moe/error.hpp"

namespace fp4moe::plan {

std::vector<TileTiming> close_candidates(const std::vector<TileTiming>& sweep, int must_include, double margin,
                                         std::size_t max_count) {
  FP4MOE_CHECK(margin >= 0 && max_count >= 1, "close_candidates: margin " << margin << " or count " << max_count << " is invalid");
  std::vector<TileTiming> sorted = sweep;
  std::stable_sort(sorted.begin(), sorted.end(), [](const TileTiming& a, const TileTiming& b) { return a.ms < b.ms; });
  std::vector<TileTiming> out;
  for (const TileTiming& t : sorted)
    if (out.size() < max_count && t.ms <= sorted.front().ms * (1 + margin)) out.push_back(t);
  const bool has = std::any_of(out.begin(), out.end(), [&](const TileTiming& t) { return t.tile == must_include; });
  if (!has)
    for (const TileTiming& t : sorted)
      if (t.tile == must_include) out.push_back(t);
  return out;
}

std::vector<double> interleaved_medians(const std::vector<TileTiming>& candidates, int rounds,
                                        const std::function<double(const TileTiming&)>& time_once) {
  FP4MOE_CHECK(rounds >= 2 && rounds % 2 == 0, "interleaved_medians: rounds = " << rounds << " is not a positive even number");
  const std::size_t n = candidates.size();
  std::vector<std::vector<double>> times(n);
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t c = r % 2 ? n - 1 - i : i;
      times[c].push_back(time_once(candidates[c]));
    }
  std::vector<double> medians;
  for (std::vector<double>& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(detail::median_of_sorted(t));
  }
  return medians;
}

}  // namespace fp4moe::plan
