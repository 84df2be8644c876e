// The FP8 row copy against the host's quantize_rows_e4m3, bitwise: codes and
// scales, per row and per 128 columns, gathered or in order, padded (to a
// width that is not a whole warp's step too), on rows with outlier channels
// and an all-zero row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/fp8_rows.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "gpu_test_util.hpp"
#include "kernels/quantize_rows_fp8.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

struct Case {
  int64_t cols, out_cols, group;
  bool gathered;
};

TEST(GpuQuantizeRowsFp8, MatchesTheHostBitwise) {
  FP4MOE_REQUIRE_GPU();
  const int64_t src_rows = 37, count = 53;
  for (const Case& cs : {Case{2880, 3072, 0, true}, Case{2880, 3072, 128, true}, Case{6144, 0, 128, false},
                         Case{2048, 0, 0, false}, Case{160, 256, 128, true},
                         Case{2880, 2944, 128, true}}) {
    const int64_t cols = cs.cols, out_cols = cs.out_cols ? cs.out_cols : cs.cols;
    const int64_t rows_in = cs.gathered ? src_rows : count;
    test::Bf16Matrix x = test::random_bf16(rows_in * cols, 11 + uint64_t(cols) + uint64_t(cs.group));
    for (int64_t r = 0; r < rows_in; ++r)  // outlier channels, and row 3 all zero
      for (int64_t c = 0; c < cols; ++c) {
        float& v = x.values[size_t(r * cols + c)];
        if (c % 97 == 5) v = bf16_to_float(bf16_from_float(v * 50.f));
        if (r == 3) v = 0.f;
        x.bits[size_t(r * cols + c)] = bf16_from_float(v);
      }
    std::vector<int32_t> rows(static_cast<size_t>(count));
    std::mt19937 g(5);
    for (int32_t& r : rows) r = int32_t(g() % uint32_t(src_rows));
    rows[7] = 3;
    // the host's answer on the rows the kernel reads
    std::vector<float> gathered(size_t(count * cols));
    for (int64_t p = 0; p < count; ++p) {
      const int64_t src = cs.gathered ? rows[size_t(p)] : p;
      std::memcpy(&gathered[size_t(p * cols)], &x.values[size_t(src * cols)], size_t(cols) * 4);
    }
    const Fp8Rows want = quantize_rows_e4m3(gathered.data(), count, cols, cs.group);
    const std::vector<uint8_t>& want_codes = want.codes;

    DeviceBuffer<uint16_t> dx(x.bits);
    DeviceBuffer<int32_t> drows(rows);
    DeviceBuffer<uint8_t> codes(size_t(count * out_cols));
    DeviceBuffer<float> scales(size_t(count * want.groups()));
    codes.fill_bytes(0xFF);   // e4m3 NaN: any byte left unwritten shows
    scales.fill_bytes(0xFF);  // fp32 NaN
    kernels::QuantizeRowsFp8Args a;
    a.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
    a.rows = cs.gathered ? drows.get() : nullptr;
    a.count = count, a.cols = cols, a.group = cs.group, a.out_cols = cs.out_cols;
    a.codes = codes.get(), a.scales = scales.get();
    kernels::launch_quantize_rows_fp8(a, nullptr);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = codes.download();
    const std::vector<float> got_scales = scales.download();
    const std::string what = "cols " + std::to_string(cols) + " out_cols " + std::to_string(out_cols) + " group " +
                             std::to_string(cs.group) + (cs.gathered ? " gathered" : "");
    for (int64_t p = 0; p < count; ++p) {
      for (int64_t c = 0; c < out_cols; ++c) {
        const uint8_t w = c < cols ? want_codes[size_t(p * cols + c)] : 0;
        ASSERT_EQ(int(got[size_t(p * out_cols + c)]), int(w)) << what << ": row " << p << " position " << c;
      }
      for (int64_t gi = 0; gi < want.groups(); ++gi)
        ASSERT_EQ(got_scales[size_t(p * want.groups() + gi)], want.scales[size_t(p * want.groups() + gi)])
            << what << ": row " << p << " group " << gi;
    }
  }
}

TEST(QuantizeRowsFp8Args, BadArgumentsAreNamedBeforeAnyLaunch) {
  alignas(16) static uint8_t buffer[256];
  auto error_of = [](const kernels::QuantizeRowsFp8Args& a) -> std::string {
    try {
      kernels::launch_quantize_rows_fp8(a, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  kernels::QuantizeRowsFp8Args ok;
  ok.x = reinterpret_cast<const __nv_bfloat16*>(buffer);
  ok.codes = buffer + 64, ok.scales = reinterpret_cast<float*>(buffer + 128);
  ok.count = 0, ok.cols = 16;  // count 0: checked, then nothing to launch
  EXPECT_EQ(error_of(ok), "");
  kernels::QuantizeRowsFp8Args a = ok;
  a.scales = nullptr;
  EXPECT_NE(error_of(a).find("got null"), std::string::npos) << error_of(a);
  a = ok, a.cols = 24;
  EXPECT_NE(error_of(a).find("cols = 24"), std::string::npos) << error_of(a);
  a = ok, a.group = 64;
  EXPECT_NE(error_of(a).find("group = 64"), std::string::npos) << error_of(a);
  a = ok, a.out_cols = 8;
  EXPECT_NE(error_of(a).find("out_cols = 8"), std::string::npos) << error_of(a);
  a = ok, a.count = -1;
  EXPECT_NE(error_of(a).find("count = -1"), std::string::npos) << error_of(a);
  a = ok, a.codes = buffer + 72;
  EXPECT_NE(error_of(a).find("16-byte aligned"), std::string::npos) << error_of(a);
}

}  // namespace
}  // namespace fp4moe
