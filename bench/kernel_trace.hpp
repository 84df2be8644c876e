// Every kernel the GPU ran, with its start and end on the GPU's clock, from
// CUPTI's activity records (the profiler interface the CUDA toolkit ships).
// CUDA events time a stream between two points; a forward's ramp (how long
// after the launch the first weight byte is read) and the gaps between its
// kernels need each kernel's own start, which only the tracer sees. One
// KernelTrace at a time in a process (CUPTI's callbacks are global).
#pragma once
#include <cstdint>
#include <vector>

#include "measure/forward_timeline.hpp"

namespace fp4moe::bench {

class KernelTrace {
 public:
  KernelTrace();   // enables kernel records; throws naming the CUPTI call that failed
  ~KernelTrace();  // disables them
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // The records completed since the last take, in start order (flushes CUPTI's buffers:
  // call after the work has finished, e.g. after a stream synchronisation).
  std::vector<KernelSpan> take();
  // CUPTI's clock, the one the records' start and end are on.
  static uint64_t now();
  // Records CUPTI dropped for want of buffer space since the trace began (0: none lost).
  size_t dropped() const;
};

}  // namespace fp4moe::bench
