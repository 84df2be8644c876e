// The 128x4 swizzled scale layout (docs/formats.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

TEST(FormatSwizzle, BytesPadRowsTo128AndColumnsTo4) {
  EXPECT_EQ(swizzled_scale_bytes(0, 0), 0u);
  EXPECT_EQ(swizzled_scale_bytes(0, 8), 0u);
  EXPECT_EQ(swizzled_scale_bytes(1, 1), 512u);
  EXPECT_EQ(swizzled_scale_bytes(128, 4), 512u);
  EXPECT_EQ(swizzled_scale_bytes(129, 5), 256u * 8u);
  EXPECT_EQ(swizzled_scale_bytes(6144, 384), 6144u * 384u);
  EXPECT_THROW(swizzled_scale_bytes(-1, 4), Error);
}

TEST(FormatSwizzle, HandComputedOffsets) {
  EXPECT_EQ(swizzled_scale_offset(0, 0, 8), 0u);
  EXPECT_EQ(swizzled_scale_offset(0, 1, 8), 1u);
  EXPECT_EQ(swizzled_scale_offset(0, 3, 8), 3u);
  EXPECT_EQ(swizzled_scale_offset(0, 4, 8), 512u);   // next 128x4 tile along K
  EXPECT_EQ(swizzled_scale_offset(1, 0, 8), 16u);    // rows m and m+1 are 16 bytes apart
  EXPECT_EQ(swizzled_scale_offset(32, 0, 8), 4u);    // rows m and m+32 share a 16-byte line
  EXPECT_EQ(swizzled_scale_offset(33, 2, 8), 22u);   // 16 + 4 + 2
  EXPECT_EQ(swizzled_scale_offset(127, 3, 8), 511u); // 31*16 + 3*4 + 3: last byte of the tile
  EXPECT_EQ(swizzled_scale_offset(128, 0, 8), 1024u);
  EXPECT_EQ(swizzled_scale_offset(130, 5, 6), 1569u);  // 1*2*512 + 1*512 + 2*16 + 0 + 1
  EXPECT_EQ(swizzled_scale_offset(100, 2, 3), 4u * 16 + 3 * 4 + 2);  // 100%32 = 4, 100/32 = 3
}

TEST(FormatSwizzle, OffsetArgumentsAreChecked) {
  try {
    swizzled_scale_offset(0, 8, 5);
    FAIL() << "kb = 8 accepted for 5 (padded 8) scale columns";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kb = 8"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(swizzled_scale_offset(0, 7, 5));  // a padding column is addressable
  EXPECT_THROW(swizzled_scale_offset(-1, 0, 4), Error);
  EXPECT_THROW(swizzle_scales_128x4(nullptr, 2, 4), Error);
  EXPECT_THROW(unswizzle_scales_128x4(nullptr, 2, 4), Error);
}

TEST(FormatSwizzle, OffsetsAreABijection) {
  for (int64_t rows : {1, 31, 128, 129, 300}) {
    for (int64_t kc : {1, 3, 4, 5, 7, 12}) {
      const int64_t pr = round_up(rows, 128), pc = round_up(kc, 4);
      const size_t bytes = swizzled_scale_bytes(rows, kc);
      ASSERT_EQ(bytes, static_cast<size_t>(pr * pc));
      // The padded grid maps onto [0, bytes) one to one ...
      std::vector<int> hits(bytes, 0);
      for (int64_t m = 0; m < pr; ++m)
        for (int64_t kb = 0; kb < pc; ++kb) {
          const size_t off = swizzled_scale_offset(m, kb, kc);
          ASSERT_LT(off, bytes);
          ++hits[off];
        }
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(hits[i], 1) << rows << "x" << kc << " byte " << i;
      // ... so the real positions map one to one onto the non-padding bytes,
      // which the swizzled copy of an all-nonzero input shows (padding is 0).
      std::vector<uint8_t> ones(static_cast<size_t>(rows * kc), 0xAB);
      const auto sw = swizzle_scales_128x4(ones.data(), rows, kc);
      for (int64_t m = 0; m < pr; ++m)
        for (int64_t kb = 0; kb < pc; ++kb) {
          const bool real = m < rows && kb < kc;
          ASSERT_EQ(sw[swizzled_scale_offset(m, kb, kc)], real ? 0xAB : 0x00) << m << ", " << kb;
        }
    }
  }
}

TEST(FormatSwizzle, RoundTripOnUnalignedShapes) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t rows : {1, 77, 128, 200, 257}) {
    for (int64_t kc : {1, 2, 6, 9, 16}) {
      std::vector<uint8_t> s(static_cast<size_t>(rows * kc));
      for (auto& b : s) b = static_cast<uint8_t>(byte(rng));
      const auto sw = swizzle_scales_128x4(s.data(), rows, kc);
      ASSERT_EQ(sw.size(), swizzled_scale_bytes(rows, kc));
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t kb = 0; kb < kc; ++kb)
          ASSERT_EQ(sw[swizzled_scale_offset(m, kb, kc)], s[static_cast<size_t>(m * kc + kb)]);
      EXPECT_EQ(unswizzle_scales_128x4(sw.data(), rows, kc), s) << rows << "x" << kc;
    }
  }
  EXPECT_TRUE(swizzle_scales_128x4(nullptr, 0, 4).empty());
}

}  // namespace
}  // namespace fp4moe
