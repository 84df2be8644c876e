// fp4moe's NVFP4 quantizer against NVIDIA Model Optimizer's own: the vectors in
// tests/data/modelopt_nvfp4_vectors.safetensors were made by ModelOpt's
// NVFP4QTensor on a CUDA device (tests/tools/modelopt_nvfp4_vectors.py, whose
// header says which files of ModelOpt run and how); every code, block scale
// and weight_scale_2 must be equal byte for byte.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <string>

#include "fp4moe/format.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe {
namespace {

const std::string kVectors = std::string(FP4MOE_TEST_DATA_DIR) + "/modelopt_nvfp4_vectors.safetensors";

TEST(FormatModelOptVectors, QuantizeIsBitExactWithModelOpt) {
  const io::TensorStore store = io::TensorStore::open(kVectors);
  const auto& meta = store.files().front()->layout().metadata;
  ASSERT_TRUE(meta.count("cases") && meta.count("modelopt")) << kVectors << " has no cases/modelopt metadata";
  const int cases = std::stoi(meta.at("cases"));
  ASSERT_GE(cases, 20);
  int64_t codes = 0, scales = 0;
  for (int i = 0; i < cases; ++i) {
    std::string p = "c";  // (built in steps: GCC 12 warns falsely on "c" + to_string(i) + ".")
    p += std::to_string(i);
    p += '.';
    const std::string what = p + meta.at(p + "what");
    const io::TensorRef x = store.get(p + "x");
    ASSERT_EQ(x.info->shape.size(), 2u) << what;
    const int64_t rows = x.info->shape[0], cols = x.info->shape[1];
    const float amax = io::read_scalar_f32(store.get(p + "amax"));
    const Fp4Matrix m = quantize_nvfp4(io::read_floats(x).data(), rows, cols, amax);
    const std::vector<uint8_t> want_packed = io::read_bytes(store.get(p + "weight"));
    const std::vector<uint8_t> want_scales = io::read_bytes(store.get(p + "weight_scale"));
    const float want_ws2 = io::read_scalar_f32(store.get(p + "weight_scale_2"));
    EXPECT_EQ(std::bit_cast<uint32_t>(m.weight_scale_2), std::bit_cast<uint32_t>(want_ws2))
        << what << ": weight_scale_2 " << m.weight_scale_2 << ", ModelOpt " << want_ws2;
    ASSERT_EQ(m.packed.size(), want_packed.size()) << what;
    ASSERT_EQ(m.scales.size(), want_scales.size()) << what;
    int64_t bad_codes = 0, bad_scales = 0;
    std::string first;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t b = want_packed[size_t(r * (cols / 2) + c / 2)];
        const uint8_t want = (c & 1) ? b >> 4 : b & 0xF;
        if (m.code(r, c) != want && bad_codes++ == 0)
          first = "code at [" + std::to_string(r) + ", " + std::to_string(c) + "]: " + std::to_string(m.code(r, c)) +
                  ", ModelOpt " + std::to_string(want);
      }
    for (size_t j = 0; j < want_scales.size(); ++j)
      if (m.scales[j] != want_scales[j] && bad_scales++ == 0 && first.empty())
        first = "block scale " + std::to_string(j) + ": " + std::to_string(m.scales[j]) + ", ModelOpt " +
                std::to_string(want_scales[j]);
    EXPECT_EQ(bad_codes, 0) << what << ": " << bad_codes << " of " << rows * cols << " codes differ; first " << first;
    EXPECT_EQ(bad_scales, 0) << what << ": " << bad_scales << " of " << want_scales.size() << " block scales differ; first " << first;
    codes += rows * cols;
    scales += int64_t(want_scales.size());
  }
  std::printf("  %d cases from ModelOpt %s on %s: %lld codes and %lld block scales compared\n", cases,
              meta.at("modelopt").c_str(), meta.count("device") ? meta.at("device").c_str() : "?", (long long)codes,
              (long long)scales);
}

}  // namespace
}  // namespace fp4moe
