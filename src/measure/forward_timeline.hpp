// A forward's timeline from its kernels' starts and ends (a tracer's records,
// bench/kernel_trace.hpp): the ramp from the launch to the first weight byte,
// the span, the time no grouped GEMM runs, the gaps between forwards. The
// arithmetic alone, without the tracer, so that CI checks it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4moe {

struct KernelSpan {
  std::string name;             // demangled
  uint64_t start = 0, end = 0;  // ns, on the tracer's clock
  uint32_t correlation = 0;     // the launching API call's: a graph launch's kernels share it
  uint32_t stream = 0;
  int64_t ctas = 0;             // the grid's size
};

// The kernels that stream expert weights: the grouped GEMMs (routed and shared).
inline bool reads_weights(const KernelSpan& k) { return k.name.find("fp4_grouped_gemm") != std::string::npos; }

// One forward's kernels in start order; `launched`: the host's clock at its
// graph launch on the tracer's clock, 0 where it was queued behind another.
struct ForwardSpans {
  std::vector<KernelSpan> kernels;
  uint64_t launched = 0;
};

// One forward's figures, in microseconds (negative where not measured).
struct ForwardFigures {
  double launch_to_first_kernel = -1, launch_to_first_gemm = -1;  // graph launch to those starts
  double first_gemm = -1;     // first kernel's start to the first grouped GEMM's
  double span = 0;            // first kernel's start to the last end
  double outside_gemms = 0;   // the span less the union of the grouped GEMMs' intervals
  double gap = -1;            // the previous forward's last end to this one's first start
};

inline ForwardFigures forward_figures(const ForwardSpans& f, const ForwardSpans* previous) {
  ForwardFigures r;
  if (f.kernels.empty()) return r;
  const auto us = [](uint64_t later, uint64_t earlier) { return double(int64_t(later - earlier)) / 1e3; };
  const uint64_t t0 = f.kernels.front().start;
  uint64_t end = 0, gemm_busy = 0, busy_until = 0, first_gemm = 0;
  for (const KernelSpan& k : f.kernels) {  // start order
    end = std::max(end, k.end);
    if (!reads_weights(k)) continue;
    if (!first_gemm) first_gemm = k.start;
    // the union: a dependent launch overlaps its predecessor's tail
    const uint64_t from = std::max(k.start, busy_until);
    if (k.end > from) gemm_busy += k.end - from;
    busy_until = std::max(busy_until, k.end);
  }
  r.span = us(end, t0);
  r.outside_gemms = double(end - t0 - gemm_busy) / 1e3;
  if (first_gemm) r.first_gemm = us(first_gemm, t0);
  if (f.launched) {
    r.launch_to_first_kernel = us(t0, f.launched);
    if (first_gemm) r.launch_to_first_gemm = us(first_gemm, f.launched);
  }
  if (previous && !previous->kernels.empty()) {
    uint64_t previous_end = 0;
    for (const KernelSpan& k : previous->kernels) previous_end = std::max(previous_end, k.end);
    r.gap = us(t0, previous_end);
  }
  return r;
}

// Back-to-back forwards of `per_forward` kernels each, from their kernels in
// start order (a graph launch's kernels run after the last launch's): empty
// where the count does not divide.
inline std::vector<ForwardSpans> split_forwards(const std::vector<KernelSpan>& all, size_t per_forward) {
  std::vector<ForwardSpans> out;
  if (per_forward == 0 || all.size() % per_forward != 0) return out;
  out.resize(all.size() / per_forward);
  for (size_t i = 0; i < all.size(); ++i) out[i / per_forward].kernels.push_back(all[i]);
  return out;
}

}  // namespace fp4moe
