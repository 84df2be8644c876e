#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "common/parallel.hpp"

namespace fp4moe::detail {

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn, int max_threads) {
  if (n <= 0) return;
  const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  const int64_t threads = std::min<int64_t>({n, hw, std::max(1, max_threads)});
  if (threads == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  // The error of the lowest failing index, as a plain loop would report it: items
  // are claimed in order, so every index below a failure has started and finishes.
  std::exception_ptr first_error;
  int64_t first_error_index = n;
  std::mutex error_mutex;
  const auto worker = [&] {
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) return;
      const int64_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < first_error_index) first_error = std::current_exception(), first_error_index = i;
        failed.store(true);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int64_t i = 0; i + 1 < threads; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& th : pool) th.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace fp4moe::detail
