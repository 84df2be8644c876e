// ConcurrentMemo (the layer's plan cache) from many threads: each value made
// once, every caller sees the same one, values handed out survive clear(),
// a failed make leaves nothing behind, and with a capacity the least recently
// asked-for value is forgotten (and survives in its holders' hands).
// Run under ThreadSanitizer by scripts/test-sanitizers.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/concurrent_memo.hpp"

namespace fp4moe {
namespace {

struct Made {
  int key;
  std::vector<int> payload;  // something a freed value would show as garbage
};

TEST(ConcurrentMemo, EachValueIsMadeOnceAndSharedAcrossThreads) {
  ConcurrentMemo<int, Made> memo;
  std::atomic<int> made{0};
  constexpr int kThreads = 8, kKeys = 16, kRounds = 2000;
  std::vector<std::vector<const Made*>> seen(kThreads, std::vector<const Made*>(kKeys, nullptr));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int key = (i * 7 + t) % kKeys;
        const auto v = memo.get(key, [&](int k) {
          made.fetch_add(1);
          return Made{k, std::vector<int>(64, k)};
        });
        ASSERT_EQ(v->key, key);
        ASSERT_EQ(v->payload[63], key);
        if (!seen[size_t(t)][size_t(key)]) seen[size_t(t)][size_t(key)] = v.get();
        ASSERT_EQ(seen[size_t(t)][size_t(key)], v.get()) << "one value per key until clear()";
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(made.load(), kKeys);
  EXPECT_EQ(memo.size(), size_t(kKeys));
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[size_t(t)], seen[0]) << "every thread got the same values";
}

TEST(ConcurrentMemo, ValuesHeldOutliveClearFromAnotherThread) {
  ConcurrentMemo<int, Made> memo;
  std::atomic<bool> stop{false};
  std::thread clearer([&] {
    while (!stop.load()) memo.clear(), std::this_thread::yield();
  });
  std::vector<std::thread> users;
  for (int t = 0; t < 4; ++t)
    users.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const auto v = memo.get(i % 5, [](int k) { return Made{k, std::vector<int>(256, k)}; });
        std::this_thread::yield();  // a forward being queued while the cache is cleared
        long sum = 0;
        for (int x : v->payload) sum += x;
        ASSERT_EQ(sum, 256L * (i % 5)) << "thread " << t;
      }
    });
  for (auto& th : users) th.join();
  stop = true;
  clearer.join();
}

// A make() that throws (a plan that does not fit) leaves the key as it was:
// the caller gets the error, size() does not count it, the next get() retries.
TEST(ConcurrentMemo, AFailedMakeIsNotKeptAndTheNextGetRetries) {
  ConcurrentMemo<int, Made> memo;
  int calls = 0;
  auto make = [&](int k) {
    if (++calls == 1) throw std::runtime_error("no plan fits");
    return Made{k, std::vector<int>(4, k)};
  };
  EXPECT_THROW(memo.get(3, make), std::runtime_error);
  EXPECT_EQ(memo.size(), 0u);
  const auto v = memo.get(3, make);
  EXPECT_EQ(v->key, 3);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(memo.get(3, make), v) << "made once it succeeded";
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(memo.size(), 1u);
}

TEST(ConcurrentMemo, WithACapacityTheLeastRecentlyAskedForIsForgotten) {
  ConcurrentMemo<int, Made> memo(2);
  auto make = [](int k) { return Made{k, std::vector<int>(64, k)}; };
  const auto one = memo.get(1, make);
  memo.get(2, make);
  EXPECT_EQ(memo.get(1, make), one) << "1 is now the most recent";
  const auto three = memo.get(3, make);  // forgets 2, the least recent
  EXPECT_EQ(memo.size(), 2u);
  EXPECT_EQ(memo.made(), 3);
  EXPECT_EQ(memo.get(1, make), one) << "1 was kept";
  EXPECT_EQ(memo.made(), 3);
  const auto two = memo.get(2, make);  // made again; forgets 3 (1 was asked for since)
  EXPECT_EQ(memo.made(), 4);
  EXPECT_EQ(two->payload[63], 2);
  EXPECT_EQ(memo.get(1, make), one);
  EXPECT_EQ(memo.made(), 4);
  memo.get(3, make);
  EXPECT_EQ(memo.made(), 5) << "3 had been forgotten";
  EXPECT_EQ(three->payload[63], 3) << "a forgotten value lives on with its holder";
  EXPECT_EQ(memo.size(), 2u);
  EXPECT_EQ(memo.capacity(), 2u);
  memo.set_capacity(1);  // keeps 3, the most recent
  EXPECT_EQ(memo.size(), 1u);
  memo.get(3, make);
  EXPECT_EQ(memo.made(), 5);
}

TEST(ConcurrentMemo, ABoundedMemoFromManyThreadsHoldsAtMostItsCapacity) {
  ConcurrentMemo<int, Made> memo(4);
  constexpr int kThreads = 8, kKeys = 16, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int key = (i * 7 + t * 3) % kKeys;
        const auto v = memo.get(key, [](int k) { return Made{k, std::vector<int>(64, k)}; });
        ASSERT_EQ(v->key, key);
        ASSERT_EQ(v->payload[63], key);
        ASSERT_LE(memo.size(), 4u);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(memo.size(), 4u);
  EXPECT_GT(memo.made(), kKeys) << "16 keys through 4 places: some were made again";
}

}  // namespace
}  // namespace fp4moe
