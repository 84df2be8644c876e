// detail::parallel_for: every item runs once, and a failure is reported as a
// sequential loop would report it (the lowest failing index), whatever the schedule.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/parallel.hpp"

namespace fp4moe {
namespace {

TEST(ParallelFor, RunsEveryItemOnce) {
  std::vector<std::atomic<int>> hits(1000);
  detail::parallel_for(1000, [&](int64_t i) { hits[size_t(i)].fetch_add(1); }, 8);
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << "item " << i;
}

TEST(ParallelFor, ReportsTheLowestFailingItem) {
  for (int round = 0; round < 50; ++round) {
    try {
      detail::parallel_for(64, [](int64_t i) {
        if (i >= 16) throw std::runtime_error("item " + std::to_string(i));
      }, 8);
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()), "item 16") << "round " << round;
    }
  }
}

}  // namespace
}  // namespace fp4moe
