#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "fp4moe/error.hpp"
#include "fp4moe/version.hpp"
#include "plan/tune_cache.hpp"

namespace fp4moe::plan {
namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()) + ".json")).string();
}

TuneContext h200() { return {"NVIDIA H200", 90, 13000, 13000, kVersion}; }

TEST(TuneCache, BucketsArePowersOfTwoThenStepsOf256) {
  EXPECT_EQ(token_bucket(0.03), 1);
  EXPECT_EQ(token_bucket(1.0), 1);
  EXPECT_EQ(token_bucket(3.0), 4);
  EXPECT_EQ(token_bucket(64.0), 64);
  EXPECT_EQ(token_bucket(200.0), 256);
  EXPECT_EQ(token_bucket(257.0), 512);
  EXPECT_EQ(token_bucket(700.0), 768);
  const auto b = token_buckets_up_to(1024);
  const std::vector<int64_t> want = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024};
  EXPECT_EQ(b, want);
}

TEST(TuneCache, SaveLoadMergeAndOtherGpusAreIgnoredWithAReason) {
  const std::string path = temp_path("fp4moe-tune");
  std::filesystem::remove(path);
  const TuneKey k1{"decode", "nvfp4", 4096, 6144, 256, 4}, k2{"decode", "nvfp4", 6144, 2048, 256, 4};
  {
    TuneCache c = TuneCache::load(path, h200());
    EXPECT_EQ(c.size(), 0u);
    EXPECT_TRUE(c.notice().empty());
    c.put(k1, {"bm128_nt8_bk256_mt1_c3", 3, 0.5, "bm64_nt8_bk256_mt1_c4", 0.6});
    c.save();
  }
  {
    TuneCache c = TuneCache::load(path, h200());  // a second writer adds k2: merged, k1 kept
    ASSERT_TRUE(c.find(k1));
    c.put(k2, {"bm128_nt16_bk256_mt1_c2", 3, 0.3, "bm128_nt16_bk256_mt1_c2", 0.3});
    c.save();
  }
  TuneCache again = TuneCache::load(path, h200());
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.find(k1)->tile, "bm128_nt8_bk256_mt1_c3");
  EXPECT_DOUBLE_EQ(again.find(k1)->default_ms, 0.6);

  TuneContext other = h200();
  other.gpu = "NVIDIA RTX PRO 6000";
  other.cc = 120;
  TuneCache o = TuneCache::load(path, other);
  EXPECT_EQ(o.size(), 0u);
  EXPECT_NE(o.notice().find("NVIDIA H200"), std::string::npos) << o.notice();
  o.put(k1, {"bm64_nt8_bk128_mt1_c3", 3, 0.9, "", 0});
  o.save();  // both sections survive
  EXPECT_EQ(TuneCache::load(path, h200()).size(), 2u);
  EXPECT_EQ(TuneCache::load(path, other).size(), 1u);
  TuneContext newer = h200();
  newer.fp4moe_version = std::string(kVersion) + "-next";
  EXPECT_NE(TuneCache::load(path, newer).notice().find("ignored"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(TuneCache, CorruptFileIsNeverTrustedAndSaveReplacesIt) {
  const std::string path = temp_path("fp4moe-tune-bad");
  const TuneKey k{"grouped swiglu", "nvfp4", 4096, 6144, 256, 8};
  {  // a good file first, to cut short and to break
    TuneCache c = TuneCache::load(path, h200());
    c.put(k, {"bm64_nt8_bk128_mt1_c3", 3, 0.9, "", 0});
    c.save();
  }
  std::string good;
  {
    std::ifstream f(path);
    good.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{ not json", "parse error"},
      {good.substr(0, good.size() / 2), "parse error"},  // cut short, as by a crash mid-write
      {R"({"something": "else"})", "not an fp4moe tune cache"},
      {R"({"format": 1, "sections": [{"context": 7}]})", "corrupt"},
      {good.replace(good.find("\"stages\": 3"), 11, "\"stages\": 0"), "0 stages"}};
  for (const auto& [text, why] : bad) {
    std::ofstream(path) << text;
    TuneCache c;
    ASSERT_NO_THROW(c = TuneCache::load(path, h200())) << text;
    EXPECT_EQ(c.size(), 0u) << text;
    EXPECT_NE(c.notice().find(path), std::string::npos) << c.notice();
    EXPECT_NE(c.notice().find("corrupt"), std::string::npos) << c.notice();
    EXPECT_NE(c.notice().find(why), std::string::npos) << c.notice();
    c.put(k, {"bm64_nt8_bk128_mt1_c3", 3, 0.9, "", 0});
    ASSERT_NO_THROW(c.save());  // rebuilt, whole
    const TuneCache again = TuneCache::load(path, h200());
    EXPECT_EQ(again.size(), 1u) << text;
    EXPECT_EQ(again.notice(), "");
  }
  std::filesystem::remove(path);
}

// save() reads the file with load()'s own checks: an entry load() would call
// corrupt, in any section, is never merged into the new file, which would
// then be corrupt again and lose the entries just tuned.
TEST(TuneCache, SaveReplacesAFileWithABadEntryInAnySection) {
  const std::string path = temp_path("fp4moe-tune-bad-entry");
  const TuneKey good{"grouped swiglu", "nvfp4", 4096, 6144, 256, 8}, bad{"grouped swiglu", "nvfp4", 4096, 6144, 256, 16},
      ours{"grouped store", "nvfp4", 6144, 2048, 256, 8};
  TuneContext other = h200();
  other.gpu = "NVIDIA B200";
  for (const TuneContext& holder : {h200(), other}) {
    std::filesystem::remove(path);
    {
      TuneCache c = TuneCache::load(path, holder);
      c.put(good, {"bm64_nt8_bk128_mt1_c3", 3, 0.9, "", 0});
      c.put(bad, {"bm64_nt8_bk128_mt1_c3", 3, 0.7, "", 0});
      c.save();
    }
    std::string text;
    {
      std::ifstream f(path);
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    text.replace(text.find("0.7"), 3, "-1.0");  // the bad key's time
    std::ofstream(path) << text;
    TuneCache c = TuneCache::load(path, h200());
    EXPECT_EQ(c.size(), 0u) << holder.gpu;
    EXPECT_NE(c.notice().find("corrupt"), std::string::npos) << c.notice();
    EXPECT_NE(c.notice().find("bucket 16"), std::string::npos) << c.notice();
    c.put(ours, {"bm128_nt16_bk256_mt1_c2", 3, 0.3, "", 0});
    c.save();
    const TuneCache again = TuneCache::load(path, h200());
    EXPECT_EQ(again.notice(), "") << holder.gpu;
    EXPECT_EQ(again.size(), 1u) << holder.gpu;
    EXPECT_TRUE(again.find(ours)) << holder.gpu;
    EXPECT_EQ(TuneCache::load(path, other).size(), 0u) << "the corrupt file went whole";
  }
  std::filesystem::remove(path);
}

// A layer plans forwards (find) while tune() puts and saves on another
// thread. Run under ThreadSanitizer by scripts/test-sanitizers.sh.
TEST(TuneCache, FindPutAndSaveFromManyThreads) {
  const std::string path = temp_path("fp4moe-tune-threads");
  std::filesystem::remove(path);
  TuneCache c = TuneCache::load(path, h200());
  constexpr int kWriters = 4, kKeys = 64;
  auto key = [](int i) { return TuneKey{"grouped swiglu", "nvfp4", 4096, 6144, 256, int64_t(i + 1)}; };
  std::atomic<int> writing{kWriters};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      for (int i = w; i < kKeys; i += kWriters) c.put(key(i), {"bm64_nt8_bk128_mt1_c3", 3, 0.5 + i, "", 0});
      --writing;
    });
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&] {
      while (writing.load() > 0)
        for (int i = 0; i < kKeys; ++i) {
          const auto e = c.find(key(i));
          ASSERT_TRUE(!e || e->ms == 0.5 + i) << "a torn entry for bucket " << i + 1;
        }
    });
  threads.emplace_back([&] {
    while (writing.load() > 0) c.save(), (void)c.size();
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.size(), size_t(kKeys));
  c.save();
  EXPECT_EQ(TuneCache::load(path, h200()).size(), size_t(kKeys));
  std::filesystem::remove(path);
}

TEST(TuneCache, DefaultPathFollowsTheEnvironment) {
  EXPECT_EQ(TuneCache::default_path("/x/y.json"), "/x/y.json");
  ::setenv("FP4MOE_CACHE", "/tmp/from-env.json", 1);
  EXPECT_EQ(TuneCache::default_path(), "/tmp/from-env.json");
  ::unsetenv("FP4MOE_CACHE");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(TuneCache::default_path(), "/tmp/xdg/fp4moe/tune.json");
  ::unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace fp4moe::plan

namespace fp4moe {
namespace {

// The version a tune cache records is the project's (CMakeLists.txt).
TEST(Version, MatchesTheCMakeProjectVersion) { EXPECT_STREQ(kVersion, FP4MOE_PROJECT_VERSION); }

}  // namespace
}  // namespace fp4moe
