// The problems found in a checkpoint, collected rather than thrown at the
// first, so that the loader and `fp4moe inspect` run one validation and
// inspect can name every problem. Thread-safe: experts are read in parallel.
#pragma once
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fp4moe/error.hpp"

namespace fp4moe::io {

class ProblemList {
 public:
  // `order` sorts the list (config first, then experts by index, ...), so the
  // report is the same whatever order the threads found them in.
  void add(int64_t order, std::string what) {
    const std::lock_guard<std::mutex> lock(mutex_);
    items_.emplace_back(order, std::move(what));
  }
  // Runs fn; an fp4moe::Error it throws becomes a problem. Returns whether fn succeeded.
  template <class Fn>
  bool check(int64_t order, Fn&& fn) {
    try {
      fn();
      return true;
    } catch (const Error& e) {
      add(order, e.what());
      return false;
    }
  }
  bool empty() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return items_.empty();
  }
  std::vector<std::string> sorted() const {
    std::vector<std::pair<int64_t, std::string>> v;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      v = items_;
    }
    std::sort(v.begin(), v.end());
    std::vector<std::string> out;
    for (auto& [order, what] : v) out.push_back(std::move(what));
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<int64_t, std::string>> items_;
};

}  // namespace fp4moe::io
