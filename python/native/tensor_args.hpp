// Checks of the tensors the Python package passes (DLPack, through tvm-ffi):
// dtype, shape, device and contiguity, each failure naming the argument, what
// was expected and what came. And the conversion of fp4moe::Error into the
// ValueError Python sees.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include "fp4moe/error.hpp"

namespace fp4moe::python {

using tvm::ffi::TensorView;

enum class Dt { u8, i32, i64, f32, bf16, e4m3, e8m0 };
const char* name(Dt d);
bool is(const DLDataType& t, Dt d);
std::string describe(const TensorView& t);

// One expected dimension: a size, or kAny.
inline constexpr int64_t kAny = -1;

struct Expect {
  const char* arg;
  std::vector<Dt> dtypes;  // any of these
  std::vector<int64_t> shape;
  DLDeviceType device;     // kDLCPU or kDLCUDA
  int device_id = -1;      // CUDA: the layer's device; -1 any
};
// Throws naming the argument unless t matches (contiguous, the dtype, every dimension, the device).
void check(const TensorView& t, const Expect& e);

template <class T>
T* data(const TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

// Calls f, turning fp4moe::Error into a tvm-ffi ValueError (Python: ValueError).
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw tvm::ffi::Error("ValueError", e.what(), "");
  }
}

}  // namespace fp4moe::python
