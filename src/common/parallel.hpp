// A small work-sharing loop for host-side bulk work (the CPU reference,
// quantization, the prepare step). Results go to per-item storage, so the
// outcome does not depend on the thread count or schedule.
#pragma once
#include <cstdint>
#include <functional>

namespace fp4moe::detail {

// Runs fn(i) for i in [0, n) on up to max_threads threads; the exception of the
// lowest failing i (as a sequential loop would throw it) is rethrown in the
// caller after all threads finish.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn, int max_threads = 16);

}  // namespace fp4moe::detail
