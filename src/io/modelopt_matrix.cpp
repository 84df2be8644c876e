// One NVFP4 matrix as ModelOpt stores it: weight, weight_scale, weight_scale_2
// (and input_scale), read with every value checked, or written from an Fp4Matrix.
#include <cmath>
#include <sstream>

#include "fp4moe/error.hpp"
#include "io/modelopt.hpp"

namespace fp4moe::io::modelopt {
namespace {

// UE4M3 block scales: e4m3fn bytes with the sign clear; 0x7F is NaN. A zero
// with the sign set (0x80) is harmless and accepted. Names how many are bad and the first.
void check_block_scales(const uint8_t* scales, size_t count, int64_t scale_cols, const TensorRef& t) {
  int64_t nans = 0, negatives = 0;
  size_t first = count;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t b = scales[i];
    const bool nan = (b & 0x7F) == 0x7F, negative = !nan && b > 0x80;
    nans += nan;
    negatives += negative;
    if ((nan || negative) && first == count) first = i;
  }
  if (first == count) return;
  const uint8_t b = scales[first];
  std::ostringstream os;
  os << t.where() << ": block scale at row " << int64_t(first) / scale_cols << ", block " << int64_t(first) % scale_cols
     << " is " << ((b & 0x7F) == 0x7F ? "NaN" : "negative") << " (byte 0x" << std::hex << int(b) << std::dec << ")";
  if (nans + negatives > 1) os << "; " << nans << " NaN and " << negatives << " negative block scales in all";
  throw Error(os.str());
}

float checked_scalar(const TensorRef& t, const char* what) {
  const float v = read_scalar_f32(t);
  FP4MOE_CHECK(std::isfinite(v) && v > 0.0f, t.where() << ": " << what << " = " << v << " is not a finite positive number");
  return v;
}

}  // namespace

std::optional<LoadedNvfp4> load_nvfp4_matrix(const TensorStore& store, const std::string& prefix, int64_t rows,
                                             int64_t cols, const std::string& shape_source, ProblemList& problems,
                                             int64_t order, bool read_codes) {
  LoadedNvfp4 out;
  Fp4Matrix& m = out.matrix;
  m.format = Fp4Format::nvfp4;
  m.rows = rows;
  m.cols = cols;
  bool ok = problems.check(order, [&] {
    const TensorRef w = store.get(prefix + "weight");
    FP4MOE_CHECK(w.info->dtype != Dtype::BF16 && w.info->dtype != Dtype::F32,
                 w.where() << " is " << dtype_name(w.info->dtype)
                           << ", not quantized (excluded from quantization?); `fp4moe quantize` makes NVFP4 of it");
    expect_dtype(w, {Dtype::U8});
    expect_shape(w, {rows, cols / 2}, shape_source + ", packed two FP4 values per byte");
    if (read_codes) m.packed = read_bytes(w);
  });
  ok &= problems.check(order, [&] {
    const TensorRef s = store.get(prefix + "weight_scale");
    expect_dtype(s, {Dtype::F8_E4M3});
    expect_shape(s, {rows, cols / kNvfp4BlockSize}, shape_source + ", one scale per 16 values");
    check_block_scales(s.data(), s.info->bytes(), cols / kNvfp4BlockSize, s);
    if (read_codes) m.scales = read_bytes(s);
  });
  ok &= problems.check(order, [&] { m.weight_scale_2 = checked_scalar(store.get(prefix + "weight_scale_2"), "weight_scale_2"); });
  if (store.contains(prefix + "input_scale")) {
    ok &= problems.check(order, [&] { checked_scalar(store.get(prefix + "input_scale"), "input_scale"); });
    out.has_input_scale = true;
  }
  if (!ok) return std::nullopt;
  return out;
}

void append_nvfp4_tensors(std::vector<TensorToWrite>& out, const std::string& prefix, const Fp4Matrix& m) {
  FP4MOE_CHECK(m.format == Fp4Format::nvfp4, prefix << ": only NVFP4 matrices are written in the ModelOpt layout");
  static const float input_scale = kUncalibratedInputScale;
  out.push_back({prefix + "weight", Dtype::U8, {m.rows, m.cols / 2}, m.packed.data(), m.packed.size()});
  out.push_back({prefix + "weight_scale", Dtype::F8_E4M3, {m.rows, m.scale_cols()}, m.scales.data(), m.scales.size()});
  out.push_back({prefix + "weight_scale_2", Dtype::F32, {}, &m.weight_scale_2, sizeof(float)});
  out.push_back({prefix + "input_scale", Dtype::F32, {}, &input_scale, sizeof(float)});
}

}  // namespace fp4moe::io::modelopt
