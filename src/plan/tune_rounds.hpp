// The tuner's second pass. A sequential sweep times the tiles in list order
// while the GPU heats toward its power cap (700 W on the H200), so a tile late
// in the list measured up to ~20% slower than the same tile timed cool.
// The close candidates of the sweep are therefore timed again in rounds, every
// other round in reverse order, and compared by the median of their rounds:
// with an even number of rounds every candidate's median falls at the same
// point of a steady drift.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace fp4moe::plan {

struct TileTiming {
  int tile = -1;
  int stages = 0;
  double ms = 0;
};

// The sweep's candidates within `margin` (0.15: 15%) of its fastest, fastest
// first, at most `max_count`; the tile `must_include` (the ranking's choice)
// is added when it was timed and is missing.
std::vector<TileTiming> close_candidates(const std::vector<TileTiming>& sweep, int must_include, double margin,
                                         std::size_t max_count);

// Times every candidate once per round (`time_once` returns milliseconds), in
// the candidates' order in even rounds and in reverse in odd ones, and returns
// each candidate's median over the rounds, in the candidates' order. `rounds`
// must be even.
std::vector<double> interleaved_medians(const std::vector<TileTiming>& candidates, int rounds,
                                        const std::function<double(const TileTiming&)>& time_once);

}  // namespace fp4moe::plan
