// The safetensors header parser: what it accepts and each error it names.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fp4moe/error.hpp"
#include "io/safetensors.hpp"

namespace fp4moe::io {
namespace {

// A file image: 8-byte length, the header text, then `data_bytes` zero bytes.
std::vector<uint8_t> image(const std::string& header, uint64_t data_bytes, int64_t length_delta = 0) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size() + uint64_t(length_delta);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
  if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
  try {
    parse_safetensors(b.data(), b.size(), "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR_HAS(bytes, text) EXPECT_NE(error_of(bytes).find(text), std::string::npos) << error_of(bytes)

TEST(SafetensorsHeader, ParsesTensorsAndMetadata) {
  const std::string h =
      R"({"b":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"a":{"dtype":"BF16","shape":[],"data_offsets":[24,26]},)"
      R"("__metadata__":{"format":"pt"}}  )";
  const std::vector<uint8_t> b = image(h, 26);
  const SafetensorsLayout l = parse_safetensors(b.data(), b.size(), "t");
  ASSERT_EQ(l.tensors.size(), 2u);
  EXPECT_EQ(l.tensors[0].name, "a");  // sorted by name
  EXPECT_EQ(l.data_start, 8 + h.size());
  const TensorInfo* t = l.find("b");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, Dtype::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->numel(), 6);
  EXPECT_EQ(l.find("a")->numel(), 1);
  EXPECT_EQ(l.find("c"), nullptr);
  EXPECT_EQ(l.metadata.at("format"), "pt");
}

TEST(SafetensorsHeader, EmptyAndZeroSizedTensors) {
  EXPECT_EQ(error_of(image("{}", 0)), "<no error>");
  EXPECT_EQ(error_of(image(R"({"z":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]},"y":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", 0)),
            "<no error>");
}

TEST(SafetensorsHeader, TruncatedOrNotSafetensors) {
  EXPECT_ERROR_HAS(std::vector<uint8_t>(5), "too short");
  EXPECT_ERROR_HAS(image("{}", 0, 100), "longer than the");
  EXPECT_ERROR_HAS(image("[1]", 0), "does not start with '{'");
  EXPECT_ERROR_HAS(image("{\"a\":", 0), "not valid JSON");
  std::vector<uint8_t> huge = image("{}", 0);
  huge[5] = 0x01;  // a header length of 2^40 in a tiny file
  EXPECT_ERROR_HAS(huge, "header length 1099511627778 is longer than");
  // A valid file cut short: its last tensor runs past the end.
  std::vector<uint8_t> cut = image(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16);
  cut.resize(cut.size() - 3);
  EXPECT_ERROR_HAS(cut, "tensor 'x' data_offsets [0, 16] run past the data section's 13 bytes");
}

TEST(SafetensorsHeader, BadEntriesAreNamed) {
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1), "tensor 'x' has unknown dtype 'F7'");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1), "shape entry -1");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1), "shape entry 1.5");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}})", 1), "holds 1 bytes, but U8 [2] needs 2");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", 1), "end before they begin");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[1]}})", 1), "tensor 'x' has no data_offsets");
  EXPECT_ERROR_HAS(image(R"({"x":{"shape":[1],"data_offsets":[0,1]}})", 1), "tensor 'x' has no dtype");
  EXPECT_ERROR_HAS(image(R"({"x":3})", 1), "tensor 'x' is not a JSON object");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,1]}})", 1),
                   "more elements than 2^64");
  EXPECT_ERROR_HAS(image(R"({"__metadata__":{"a":1}})", 0), "__metadata__ entry 'a' is not a string");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
                   "names tensor 'x' twice");
  EXPECT_ERROR_HAS(image(R"({"x":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", 1), "nests deeper");
}

TEST(SafetensorsHeader, OffsetsMustTileTheDataSection) {
  // Tensor a at [0, 4], tensor b at [b, e].
  auto with = [](int b, int e) {
    std::ostringstream h;
    h << R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[)" << b << ','
      << e << "]}}";
    return h.str();
  };
  EXPECT_EQ(error_of(image(with(4, 8), 8)), "<no error>");
  EXPECT_ERROR_HAS(image(with(2, 6), 8), "tensor 'b' data_offsets [2, 6] overlap tensor 'a' [0, 4]");
  EXPECT_ERROR_HAS(image(with(5, 9), 9), "bytes [4, 5) of the data section belong to no tensor");
  EXPECT_ERROR_HAS(image(with(4, 8), 10), "2 trailing bytes belong to no tensor");
  EXPECT_ERROR_HAS(image(with(8, 12), 8), "run past the data section's 8 bytes");
}

TEST(SafetensorsHeader, DtypeTable) {
  EXPECT_EQ(dtype_bytes(Dtype::BF16), 2);
  EXPECT_EQ(dtype_bytes(Dtype::F8_E4M3), 1);
  EXPECT_EQ(std::string(dtype_name(Dtype::I32)), "I32");
  EXPECT_EQ(dtype_from_name("F64"), Dtype::F64);
  EXPECT_FALSE(dtype_from_name("f32").has_value());
  EXPECT_EQ(shape_string({}), "[]");
  EXPECT_EQ(shape_string({2, 3}), "[2, 3]");
}

}  // namespace
}  // namespace fp4moe::io
