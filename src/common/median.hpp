// The median of a sorted, non-empty sample (the mean of the middle two for an
// even count): the timing code and the tuner's rounds share it.
#pragma once
#include <vector>

namespace fp4moe::detail {

inline double median_of_sorted(const std::vector<double>& sorted) {
  const std::size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

}  // namespace fp4moe::detail
