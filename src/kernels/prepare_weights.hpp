// The one-time prepare step on the GPU: FP4 experts in the checkpoint layout a
// serving engine holds on the device (ModelOpt NVFP4 or MXFP4, row-major or
// 128x4 swizzled scales, gate/up in either order or alternating) -> the
// kernels' prepared layout, padded with zero weights where the prepared shape
// is larger, byte for byte what the host packer (format/prepare_gemm.cpp) makes.
#pragma once
#include <array>
#include <cstdint>

#include <cuda_runtime.h>

#include "format/prepared_layout.hpp"

namespace fp4moe::kernels {

struct PrepareWeightsArgs {
  const uint8_t* packed = nullptr;  // [E, N, K/2], element 2i in the low nibble
  const uint8_t* scales = nullptr;  // [E, N, K/block] row-major, or per expert 128x4 swizzled
  bool swizzled_scales = false;
  int block = 16;                   // scale block along K: 16 (NVFP4) or 32 (MXFP4)
  int64_t experts = 0, n = 0, k = 0;  // the prepared shape
  int64_t n_src = 0, k_src = 0;     // the checkpoint's (0: n, k); rows and columns past them are zero weights
  bool gated = false;               // N = 2I rows of gate and up, interleaved by 16 in the output
  GateUpOrder order = GateUpOrder::gate_up;  // how the gated source holds gate and up
  // Prepared byte of each scale byte: >= 0, -1 outside the kernels' range, -2 a zero scale.
  std::array<int16_t, 256> prepared_scale{};
  uint8_t* weights = nullptr;       // [E, N, K/2] prepared
  uint8_t* prepared_scales = nullptr;  // [E, N, K/16] prepared
  // Smallest (e * N + prepared row) * (K/16) + column block whose scale is out of range; stays ~0 if none.
  unsigned long long* first_bad = nullptr;
};
void launch_prepare_weights(const PrepareWeightsArgs& a, cudaStream_t stream);

}  // namespace fp4moe::kernels
