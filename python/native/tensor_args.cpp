#include "tensor_args.hpp"

#include <sstream>

namespace fp4moe::python {

const char* name(Dt d) {
  switch (d) {
    case Dt::u8: return "uint8";
    case Dt::i32: return "int32";
    case Dt::i64: return "int64";
    case Dt::f32: return "float32";
    case Dt::bf16: return "bfloat16";
    case Dt::e4m3: return "float8_e4m3fn";
    case Dt::e8m0: return "float8_e8m0fnu";
  }
  return "?";
}

bool is(const DLDataType& t, Dt d) {
  if (t.lanes != 1) return false;
  switch (d) {
    case Dt::u8: return t.code == kDLUInt && t.bits == 8;
    case Dt::i32: return t.code == kDLInt && t.bits == 32;
    case Dt::i64: return t.code == kDLInt && t.bits == 64;
    case Dt::f32: return t.code == kDLFloat && t.bits == 32;
    case Dt::bf16: return t.code == kDLBfloat && t.bits == 16;
    case Dt::e4m3: return t.code == kDLFloat8_e4m3fn && t.bits == 8;
    case Dt::e8m0: return t.code == kDLFloat8_e8m0fnu && t.bits == 8;
  }
  return false;
}

namespace {
std::string dtype_name(const DLDataType& t) {
  for (Dt d : {Dt::u8, Dt::i32, Dt::i64, Dt::f32, Dt::bf16, Dt::e4m3, Dt::e8m0})
    if (is(t, d)) return name(d);
  std::ostringstream os;
  os << "dtype(code " << int(t.code) << ", bits " << int(t.bits) << ", lanes " << t.lanes << ")";
  return os.str();
}
std::string device_name(DLDeviceType type, int id) {
  if (type == kDLCPU) return "cpu";
  if (type == kDLCUDA) return id < 0 ? "cuda" : "cuda:" + std::to_string(id);
  return "device type " + std::to_string(int(type));
}
}  // namespace

std::string describe(const TensorView& t) {
  std::ostringstream os;
  os << dtype_name(t.dtype()) << " [";
  for (int i = 0; i < t.ndim(); ++i) os << (i ? ", " : "") << t.shape()[i];
  os << "] on " << device_name(t.device().device_type, t.device().device_id);
  if (!t.IsContiguous()) os << ", not contiguous";
  return os.str();
}

void check(const TensorView& t, const Expect& e) {
  bool ok = t.IsContiguous() && t.ndim() == int(e.shape.size()) && t.device().device_type == e.device &&
            (e.device_id < 0 || t.device().device_id == e.device_id);
  bool dtype_ok = false;
  for (Dt d : e.dtypes) dtype_ok |= is(t.dtype(), d);
  ok &= dtype_ok;
  for (size_t i = 0; ok && i < e.shape.size(); ++i) ok &= e.shape[i] == kAny || t.shape()[int(i)] == e.shape[i];
  if (ok) return;
  std::ostringstream os;
  os << e.arg << ": expected a contiguous ";
  for (size_t i = 0; i < e.dtypes.size(); ++i) os << (i ? " or " : "") << name(e.dtypes[i]);
  os << " tensor [";
  for (size_t i = 0; i < e.shape.size(); ++i) {
    os << (i ? ", " : "");
    if (e.shape[i] == kAny) os << "*";
    else os << e.shape[i];
  }
  os << "] on " << device_name(e.device, e.device_id) << "; got " << describe(t);
  throw Error(os.str());
}

}  // namespace fp4moe::python
