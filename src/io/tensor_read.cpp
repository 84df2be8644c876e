// Typed reads of checkpoint tensors; every mismatch names the tensor and file.
#include <cmath>
#include <cstring>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io {
namespace {

// IEEE half to float, exact (every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

template <class T>
std::vector<T> copy_as(const TensorRef& t) {
  std::vector<T> v(static_cast<size_t>(t.info->numel()));
  if (!v.empty()) std::memcpy(v.data(), t.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

void expect_dtype(const TensorRef& t, std::initializer_list<Dtype> allowed) {
  std::string names;
  for (Dtype d : allowed) {
    if (d == t.info->dtype) return;
    names += std::string(names.empty() ? "" : " or ") + dtype_name(d);
  }
  throw Error(t.where() + " has dtype " + dtype_name(t.info->dtype) + ", expected " + names);
}

void expect_shape(const TensorRef& t, const std::vector<int64_t>& shape, const std::string& why) {
  FP4MOE_CHECK(t.info->shape == shape, t.where() << " has shape " << shape_string(t.info->shape) << ", expected "
                                                 << shape_string(shape) << " (" << why << ")");
}

std::vector<uint8_t> read_bytes(const TensorRef& t) {
  return std::vector<uint8_t>(t.data(), t.data() + t.info->bytes());
}

std::vector<float> read_floats(const TensorRef& t) {
  expect_dtype(t, {Dtype::F32, Dtype::BF16, Dtype::F16});
  if (t.info->dtype == Dtype::F32) return copy_as<float>(t);
  const std::vector<uint16_t> bits = copy_as<uint16_t>(t);
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t.info->dtype == Dtype::BF16 ? bf16_to_float(bits[i]) : half_to_float(bits[i]);
  return v;
}

std::vector<uint16_t> read_bf16_bits(const TensorRef& t) {
  expect_dtype(t, {Dtype::BF16, Dtype::F32});
  if (t.info->dtype == Dtype::BF16) return copy_as<uint16_t>(t);
  const std::vector<float> f = copy_as<float>(t);
  std::vector<uint16_t> v(f.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_from_float(f[i]);
  return v;
}

float read_scalar_f32(const TensorRef& t) {
  expect_dtype(t, {Dtype::F32});
  FP4MOE_CHECK(t.info->shape.empty() || t.info->shape == std::vector<int64_t>{1},
               t.where() << " has shape " << shape_string(t.info->shape) << ", expected a scalar ([] or [1])");
  return copy_as<float>(t)[0];
}

}  // namespace fp4moe::io
