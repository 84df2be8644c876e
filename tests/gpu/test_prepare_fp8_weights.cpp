// The FP8 prepare on the GPU (kernels/prepare_fp8_weights.cu, in place)
// against the host's (format/prepare_fp8.cpp): every weight byte, fold code
// and row scale equal, on weights with rows spanning many octaves, zero
// blocks, a zero row and two scale parts; and the same refusals by name.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "format/prepare_fp8.hpp"
#include "format/prepare_gemm.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "gpu_test_util.hpp"
#include "runtime/prepared_projection.hpp"

namespace fp4moe {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

// An expert of [n, k]: N(0, 4^size), row 5 spanning about 9 octaves, an
// all-zero block in row 7, row 9 all zero.
Fp4Matrix expert(uint32_t seed, int size, int64_t n, int64_t k, Fp4Format format) {
  std::vector<float> x = gaussian(n * k, seed);
  for (float& v : x) v *= float(1 << size);
  for (int64_t c = 0; c < k; ++c) x[size_t(5 * k + c)] *= c < 64 ? 300.f : 1.f;
  for (int64_t c = 64; c < 96; ++c) x[size_t(7 * k + c)] = 0.f;
  for (int64_t c = 0; c < k; ++c) x[size_t(9 * k + c)] = 0.f;
  return format == Fp4Format::mxfp4 ? quantize_mxfp4(x.data(), n, k) : quantize_nvfp4(x.data(), n, k);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

void expect_same_as_host(const PreparedExpertWeights& p, const std::string& what) {
  const bool round = p.format == Fp4Format::nvfp4;  // (opted in: the fold rounds)
  const PreparedFp8Weights want = prepare_fp8_gemm_weights(p, round);
  PreparedProjection proj(p);
  proj.convert_to_fp8(what.c_str(), round);
  EXPECT_EQ(proj.activations, plan::ActivationType::e4m3);
  EXPECT_EQ(proj.weights.download(), want.weights) << what;
  EXPECT_EQ(proj.scales.download(), want.scales) << what;
  const std::vector<float> rs = proj.row_scale.download();
  ASSERT_EQ(rs.size(), want.row_scale.size()) << what;
  EXPECT_EQ(std::memcmp(rs.data(), want.row_scale.data(), rs.size() * sizeof(float)), 0) << what << ": row scales";
}

// K = 448 ends in half a scale granule (gpt-oss's 2880 does too). NVFP4:
// opted in, its fold codes carry the scales' mantissas.
TEST(GpuPrepareFp8, EqualsTheHostPrepareByteForByte) {
  FP4MOE_REQUIRE_GPU();
  for (const Fp4Format format : {Fp4Format::mxfp4, Fp4Format::nvfp4})
  for (const int64_t k : {int64_t(384), int64_t(448)}) {
    const int64_t E = 3, n = 48;
    std::vector<Fp4Matrix> a, b;
    for (int64_t e = 0; e < E; ++e) {
      a.push_back(expert(20 + uint32_t(e), int(e), n, k, format));
      b.push_back(expert(30 + uint32_t(e), int(E - 1 - e), n, k, format));
    }
    const std::string at = std::string(" ") + to_string(format) + " at K = " + std::to_string(k);
    expect_same_as_host(prepare_gemm_weights(std::span<const Fp4Matrix>(a)), "down" + at);
    // gate and up interleaved: two scale parts
    expect_same_as_host(prepare_gated_gemm_weights(std::span<const Fp4Matrix>(a), std::span<const Fp4Matrix>(b)),
                        "gate/up" + at);
  }
}

TEST(GpuPrepareFp8, WeightsTheFoldCannotHoldAreRefusedByName) {
  FP4MOE_REQUIRE_GPU();
  const int64_t n = 16, k = 128;
  std::vector<float> x = gaussian(n * k, 8);
  for (int64_t c = 32; c < k; ++c) x[size_t(3 * k + c)] *= 1e-5f;  // row 3: blocks 1..3 2^16 under block 0
  for (int64_t c = 32; c < 48; ++c) x[size_t(3 * k + c)] = 0.f;  // block 1 counted at its second half
  const Fp4Matrix m[2] = {quantize_mxfp4(gaussian(n * k, 7).data(), n, k), quantize_mxfp4(x.data(), n, k)};
  PreparedProjection proj(prepare_gemm_weights(std::span<const Fp4Matrix>(m, 2)));
  const std::string e = error_of([&] { proj.convert_to_fp8("layer.w2"); });
  EXPECT_NE(e.find("layer.w2: FP8 activations: expert 1 has 3 nonzero mxfp4 blocks (the first in row 3)"),
            std::string::npos) << e;
  EXPECT_EQ(proj.weights.size(), 0u);  // re-packed in place, then dropped: neither layout is left
  EXPECT_EQ(proj.activations, plan::ActivationType::bf16);
  const Fp4Matrix nv = quantize_nvfp4(gaussian(n * k, 9).data(), n, k);
  PreparedProjection nvp(prepare_gemm_weights(std::span<const Fp4Matrix>(&nv, 1)));
  const std::string e2 = error_of([&] { nvp.convert_to_fp8("layer.w13"); });
  EXPECT_NE(e2.find("layer.w13: FP8 activations: the weights are nvfp4"), std::string::npos) << e2;
  EXPECT_NE(e2.find("fp8_rounds_nvfp4"), std::string::npos) << e2;
  EXPECT_EQ(nvp.activations, plan::ActivationType::bf16);
}

}  // namespace
}  // namespace fp4moe
