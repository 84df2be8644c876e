// A deliberately simple GPU oracle for the GPU tests' large problems, where
// the CPU reference in double would take minutes: the same function as
// src/reference (weights dequantized exactly as dequantize() does, products
// and sums in fp64), one warp per output element. Test GpuReference.* checks
// it against the CPU reference on small problems of both formats.
#pragma once
#include <cstdint>
#include <vector>

#include "fp4moe/format.hpp"
#include "fp4moe/reference.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe::test {

// An Fp4Matrix (checkpoint layout) on the device.
struct DeviceFp4Matrix {
  explicit DeviceFp4Matrix(const Fp4Matrix& m);
  DeviceBuffer<uint8_t> packed, scales;
  Fp4Format format;
  int64_t rows, cols;
  float weight_scale_2;
};

// y[r, :] = x[rows ? rows[r] : r, :] . dequant(w)^T for r < count, fp64 sums.
// x: device [*, K] fp32 or fp64 (x_stride elements per row); rows: device int32 or null;
// y: device [count, N], fp32 or fp64.
template <class In, class Out>
void reference_gemm(const DeviceFp4Matrix& w, const In* x, int64_t x_stride, const int32_t* rows, int64_t count, Out* y);

// The grouped GEMM the kernel tests check: expert e's permuted rows
// [offsets[e], offsets[e+1]) read x[gather[p]] (or x[p] without gather).
// Host in, host out (fp32 [P, N]).
std::vector<float> grouped_gemm_reference_gpu(const std::vector<const DeviceFp4Matrix*>& experts,
                                              const std::vector<float>& x, int64_t k,
                                              const std::vector<int32_t>& offsets, const std::vector<int32_t>& gather);

// moe_forward_reference on the GPU: the same steps and order, expert MLPs in
// fp64 on the device, the weighted sum over slots (ascending) and the shared
// expert in fp64 on the host.
std::vector<float> moe_forward_reference_gpu(const MoeConfig& cfg, const MoeWeights& w, const float* x, int64_t tokens,
                                             const Routing& routing);

}  // namespace fp4moe::test
