// Fp4Matrix accessors and dequantization.
//
// Dequantized value = e2m1(q) * fl(scale * weight_scale_2), in fp32, in the
// order ModelOpt's NVFP4QTensor.dequantize computes it (the block's scale
// times the tensor's first, then the code value). For MXFP4 weight_scale_2 is
// 1 and the value is exact.
#include <cstdint>
#include <vector>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe {
namespace {

float decode_scale(Fp4Format f, uint8_t bits) {
  return f == Fp4Format::nvfp4 ? e4m3_decode(bits) : ue8m0_decode(bits);
}

void check_consistent(const Fp4Matrix& m) {
  FP4MOE_CHECK(m.format == Fp4Format::nvfp4 || m.format == Fp4Format::mxfp4,
               "Fp4Matrix: format = " << static_cast<int>(m.format) << " is not a known Fp4Format");
  FP4MOE_CHECK(m.rows >= 0 && m.cols >= 0, "Fp4Matrix: shape " << m.rows << " x " << m.cols << " is negative");
  FP4MOE_CHECK(m.cols % m.block_size() == 0, "Fp4Matrix: cols = " << m.cols << " is not a multiple of the "
                                                 << to_string(m.format) << " block size " << m.block_size());
  FP4MOE_CHECK(m.packed.size() == static_cast<size_t>(m.rows * (m.cols / 2)),
               "Fp4Matrix: packed has " << m.packed.size() << " bytes, expected rows * cols / 2 = "
                                        << m.rows * (m.cols / 2));
  FP4MOE_CHECK(m.scales.size() == static_cast<size_t>(m.rows * m.scale_cols()),
               "Fp4Matrix: scales has " << m.scales.size() << " bytes, expected rows * cols / "
                                        << m.block_size() << " = " << m.rows * m.scale_cols());
}

}  // namespace

const char* to_string(Fp4Format f) {
  switch (f) {
    case Fp4Format::nvfp4: return "nvfp4";
    case Fp4Format::mxfp4: return "mxfp4";
  }
  return "unknown";
}

Fp4Format parse_fp4_format(const std::string& name) {
  if (name == "nvfp4") return Fp4Format::nvfp4;
  if (name == "mxfp4") return Fp4Format::mxfp4;
  throw Error("format '" + name + "' is not nvfp4 or mxfp4");
}

const char* to_string(ActivationFormat a) { return a == ActivationFormat::fp8 ? "fp8" : "bf16"; }

ActivationFormat parse_activation_format(const std::string& name) {
  if (name == "bf16") return ActivationFormat::bf16;
  if (name == "fp8" || name == "fp8_e4m3" || name == "e4m3") return ActivationFormat::fp8;
  throw Error("activations '" + name + "' is not bf16 or fp8");
}

float Fp4Matrix::scale(int64_t r, int64_t kb) const {
  FP4MOE_CHECK(r >= 0 && r < rows && kb >= 0 && kb < scale_cols(),
               "Fp4Matrix::scale: (" << r << ", " << kb << ") is outside the " << rows << " x " << scale_cols()
                                     << " scale grid");
  return decode_scale(format, scales[static_cast<size_t>(r * scale_cols() + kb)]);
}

float Fp4Matrix::dequant(int64_t r, int64_t c) const {
  FP4MOE_CHECK(r >= 0 && r < rows && c >= 0 && c < cols,
               "Fp4Matrix::dequant: (" << r << ", " << c << ") is outside the " << rows << " x " << cols
                                       << " matrix");
  return e2m1_decode(code(r, c)) * (scale(r, c / block_size()) * weight_scale_2);
}

std::vector<float> dequantize(const Fp4Matrix& m) {
  check_consistent(m);
  const int64_t kc = m.scale_cols();
  const int bs = m.block_size();
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t kb = 0; kb < kc; ++kb) {
      const float s = decode_scale(m.format, m.scales[static_cast<size_t>(r * kc + kb)]) * m.weight_scale_2;
      for (int i = 0; i < bs; ++i) {
        const int64_t c = kb * bs + i;
        out[static_cast<size_t>(r * m.cols + c)] = e2m1_decode(m.code(r, c)) * s;
      }
    }
  }
  return out;
}

}  // namespace fp4moe
