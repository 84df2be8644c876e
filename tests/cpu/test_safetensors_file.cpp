// Reading and writing safetensors files: round trips, atomic writes, sharded
// checkpoints with an index, typed reads and their errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "checkpoint_test_util.hpp"
#include "fp4moe/format.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io {
namespace {

using test::TempDir;

TEST(SafetensorsFile, WriteThenReadRoundTrip) {
  TempDir dir;
  const std::vector<float> a{1.f, -2.5f, 3.f, 0.f, 1e-3f, 7.f};
  const std::vector<uint16_t> b{bf16_from_float(1.f), bf16_from_float(-0.5f)};
  const std::vector<uint8_t> c{1, 2, 3};
  const float s = 0.25f;
  write_safetensors(dir / "x.safetensors",
                    {{"a", Dtype::F32, {2, 3}, a.data(), 24}, {"b", Dtype::BF16, {2}, b.data(), 4},
                     {"c", Dtype::U8, {3}, c.data(), 3}, {"s", Dtype::F32, {}, &s, 4}, {"z", Dtype::F16, {0, 5}, nullptr, 0}},
                    {{"format", "pt"}});
  const SafetensorsFile f(dir / "x.safetensors");
  EXPECT_EQ(f.layout().data_start % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(f.layout().metadata.at("format"), "pt");
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_EQ(f.find("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(0, std::memcmp(f.data(*f.find("a")), a.data(), 24));
  EXPECT_EQ(0, std::memcmp(f.data(*f.find("c")), c.data(), 3));
  EXPECT_EQ(f.find("z")->numel(), 0);

  const TensorStore store = TensorStore::open(dir / "x.safetensors");
  EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b", "c", "s", "z"}));
  EXPECT_EQ(read_floats(store.get("a")), a);
  EXPECT_EQ(read_floats(store.get("b")), (std::vector<float>{1.f, -0.5f}));
  EXPECT_EQ(read_bf16_bits(store.get("b")), b);
  EXPECT_EQ(read_bf16_bits(store.get("a"))[1], bf16_from_float(-2.5f));
  EXPECT_EQ(read_scalar_f32(store.get("s")), 0.25f);
  EXPECT_EQ(read_bytes(store.get("c")), c);
}

TEST(SafetensorsFile, TypedReadErrorsNameTensorAndFile) {
  TempDir dir;
  const std::vector<float> a(6, 1.f);
  write_safetensors(dir / "x.safetensors", {{"a", Dtype::F32, {2, 3}, a.data(), 24}, {"i", Dtype::I32, {6}, a.data(), 24}});
  const TensorStore store = TensorStore::open(dir / "x.safetensors");
  EXPECT_ERROR_CONTAINS(read_floats(store.get("i")), "tensor 'i' in " + (dir / "x.safetensors") + " has dtype I32, expected F32 or BF16 or F16");
  EXPECT_ERROR_CONTAINS(expect_shape(store.get("a"), {3, 2}, "from the test"), "has shape [2, 3], expected [3, 2] (from the test)");
  EXPECT_ERROR_CONTAINS(read_scalar_f32(store.get("a")), "expected a scalar ([] or [1])");
  EXPECT_ERROR_CONTAINS(store.get("b"), "no tensor 'b'");
}

TEST(SafetensorsFile, BadFilesAreRefusedOnOpen) {
  TempDir dir;
  const std::vector<float> a(64, 1.f);
  write_safetensors(dir / "ok.safetensors", {{"a", Dtype::F32, {64}, a.data(), 256}});
  std::vector<uint8_t> bytes = test::read_file(dir / "ok.safetensors");
  test::write_file(dir / "cut.safetensors", std::vector<uint8_t>(bytes.begin(), bytes.end() - 10));
  EXPECT_ERROR_CONTAINS(SafetensorsFile(dir / "cut.safetensors"), "run past the data section");
  test::write_file(dir / "empty.safetensors", {});
  EXPECT_ERROR_CONTAINS(SafetensorsFile(dir / "empty.safetensors"), "too short");
  EXPECT_ERROR_CONTAINS(SafetensorsFile(dir / "missing.safetensors"), "cannot open");
  EXPECT_ERROR_CONTAINS(SafetensorsFile(dir.path()), "not a regular file");
}

TEST(SafetensorsFile, WritesAreAtomic) {
  TempDir dir;
  const std::vector<float> a(4, 2.f);
  write_safetensors(dir / "x.safetensors", {{"a", Dtype::F32, {4}, a.data(), 16}});
  const std::vector<uint8_t> before = test::read_file(dir / "x.safetensors");
  // A bad tensor list fails before anything is written: the old file stays.
  EXPECT_ERROR_CONTAINS(write_safetensors(dir / "x.safetensors", {{"a", Dtype::F32, {5}, a.data(), 16}}),
                        "has 16 bytes, but F32 [5] needs 20");
  EXPECT_ERROR_CONTAINS(write_safetensors(dir / "x.safetensors", {{"a", Dtype::F32, {4}, a.data(), 16}, {"a", Dtype::F32, {4}, a.data(), 16}}),
                        "is given twice");
  EXPECT_EQ(test::read_file(dir / "x.safetensors"), before);
  EXPECT_ERROR_CONTAINS(write_safetensors(dir / "nope/x.safetensors", {}), "cannot write");
  EXPECT_ERROR_CONTAINS(write_safetensors(dir.path(), {}), "is a directory");
  EXPECT_EQ(test::entries(dir.path()), std::vector<std::string>{"x.safetensors"}) << "no temporary file left";
}

TEST(SafetensorsFile, ShardedCheckpointWithIndex) {
  TempDir dir;
  const std::vector<float> a(4, 1.f), b(2, 2.f);
  write_safetensors(dir / "m-1.safetensors", {{"a", Dtype::F32, {4}, a.data(), 16}});
  write_safetensors(dir / "m-2.safetensors", {{"b", Dtype::F32, {2}, b.data(), 8}, {"unlisted", Dtype::F32, {2}, b.data(), 8}});
  test::write_text(dir / kIndexFileName, R"({"metadata":{},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}})");
  const TensorStore store = TensorStore::open(dir.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b"})) << "the index decides";
  EXPECT_EQ(store.files().size(), 2u);
  EXPECT_EQ(read_floats(store.get("b")), b);
  EXPECT_NE(store.get("b").where().find("m-2.safetensors"), std::string::npos);

  test::write_text(dir / kIndexFileName, R"({"weight_map":{"a":"m-2.safetensors"}})");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "puts tensor 'a' in m-2.safetensors, which does not hold it");
  test::write_text(dir / kIndexFileName, R"({"weight_map":{"a":"../m-1.safetensors"}})");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "is not a file inside the checkpoint directory");
  test::write_text(dir / kIndexFileName, R"({"weight_map":{"a":"m-3.safetensors"}})");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "m-3.safetensors: cannot open");
  test::write_text(dir / kIndexFileName, R"({"weights":{}})");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "has no \"weight_map\" object");
  test::write_text(dir / kIndexFileName, "{");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "not valid JSON");
  std::filesystem::remove(dir / kIndexFileName);
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "holds neither model.safetensors.index.json nor model.safetensors");
}

}  // namespace
}  // namespace fp4moe::io
