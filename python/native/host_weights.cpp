#include "host_weights.hpp"

#include <algorithm>

#include "format/prepared_layout.hpp"

namespace fp4moe::python {

namespace {
Dt scale_dtype(Fp4Format f) { return f == Fp4Format::nvfp4 ? Dt::e4m3 : Dt::e8m0; }
int block_of(Fp4Format f) { return f == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize; }
}  // namespace

int check_experts(const ExpertTensors& t, const MoeConfig& c, Fp4Format f, const std::string& prefix, int64_t E,
                  int64_t width, DLDeviceType device, int device_id, bool swizzled) {
  const int64_t H = c.hidden, block = block_of(f);
  FP4MOE_CHECK(H % block == 0 && width % block == 0,
               prefix << "hidden " << H << " and width " << width << " must be multiples of the " << to_string(f)
                      << " block " << block);
  const std::string n13 = prefix + "w13", n2 = prefix + "w2";
  auto scale_shape = [&](int64_t n, int64_t k) -> std::vector<int64_t> {
    if (swizzled) return {E, pack::round_up(n, 128), pack::round_up(k / block, 4)};
    return {E, n, k / block};
  };
  check(t.w13, {n13.c_str(), {Dt::u8}, {E, 2 * width, H / 2}, device, device_id});
  const std::string s13 = n13 + "_scale", s2 = n2 + "_scale";
  check(t.w13_scale, {s13.c_str(), {Dt::u8, scale_dtype(f)}, scale_shape(2 * width, H), device, device_id});
  check(t.w2, {n2.c_str(), {Dt::u8}, {E, H, width / 2}, device, device_id});
  check(t.w2_scale, {s2.c_str(), {Dt::u8, scale_dtype(f)}, scale_shape(H, width), device, device_id});
  const std::string g13 = n13 + "_scale_2", g2 = n2 + "_scale_2";
  if (f == Fp4Format::mxfp4) {
    FP4MOE_CHECK(!t.w13_scale_2 && !t.w2_scale_2, prefix << "MXFP4 has no weight_scale_2: pass None for " << g13 << " and " << g2);
    return 1;
  }
  FP4MOE_CHECK(t.w13_scale_2 && t.w2_scale_2, prefix << "NVFP4 needs " << g13 << " and " << g2 << " (weight_scale_2)");
  const TensorView& a = *t.w13_scale_2;
  const int parts = a.ndim() == 2 ? 2 : 1;
  check(a, {g13.c_str(), {Dt::f32}, parts == 2 ? std::vector<int64_t>{E, 2} : std::vector<int64_t>{E}, device, device_id});
  check(*t.w2_scale_2, {g2.c_str(), {Dt::f32}, {E}, device, device_id});
  return parts;
}

Fp4Matrix matrix_from(Fp4Format f, const TensorView& packed, const TensorView& scales, float scale_2, int64_t rows,
                      int64_t cols, const char* packed_name, const char* scales_name) {
  check(packed, {packed_name, {Dt::u8}, {rows, cols / 2}, kDLCPU});
  check(scales, {scales_name, {Dt::u8, scale_dtype(f)}, {rows, cols / block_of(f)}, kDLCPU});
  Fp4Matrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  m.packed.assign(data<uint8_t>(packed), data<uint8_t>(packed) + rows * cols / 2);
  m.scales.assign(data<uint8_t>(scales), data<uint8_t>(scales) + rows * (cols / block_of(f)));
  m.weight_scale_2 = f == Fp4Format::nvfp4 ? scale_2 : 1.f;
  return m;
}

std::vector<ExpertWeights> experts_from(const MoeConfig& c, Fp4Format f, const ExpertTensors& t, const std::string& prefix,
                                        int64_t E, int64_t width, DLDeviceType device) {
  const int parts = check_experts(t, c, f, prefix, E, width, device, -1, false);
  const int64_t H = c.hidden, block = block_of(f);
  std::vector<ExpertWeights> out(static_cast<size_t>(E));
  auto slice = [&](const TensorView& v, int64_t e, int64_t row0, int64_t rows, int64_t row_bytes, std::vector<uint8_t>& dst) {
    const uint8_t* p = data<uint8_t>(v) + (e * v.shape()[1] + row0) * row_bytes;
    dst.assign(p, p + rows * row_bytes);
  };
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights& x = out[size_t(e)];
    for (Fp4Matrix* m : {&x.gate, &x.up, &x.down}) m->format = f;
    x.gate.rows = x.up.rows = width;
    x.gate.cols = x.up.cols = H;
    x.down.rows = H;
    x.down.cols = width;
    slice(t.w13, e, 0, width, H / 2, x.gate.packed);
    slice(t.w13, e, width, width, H / 2, x.up.packed);
    slice(t.w13_scale, e, 0, width, H / block, x.gate.scales);
    slice(t.w13_scale, e, width, width, H / block, x.up.scales);
    slice(t.w2, e, 0, H, width / 2, x.down.packed);
    slice(t.w2_scale, e, 0, H, width / block, x.down.scales);
    if (f == Fp4Format::nvfp4) {
      const float* g = data<float>(*t.w13_scale_2);
      x.gate.weight_scale_2 = g[e * parts];
      x.up.weight_scale_2 = g[e * parts + parts - 1];
      x.down.weight_scale_2 = data<float>(*t.w2_scale_2)[e];
    }
  }
  return out;
}

}  // namespace fp4moe::python
