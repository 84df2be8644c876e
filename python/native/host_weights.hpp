// The expert tensors the package takes, in the layout serving engines hold
// (w13 [E, 2W, H/2] with its block scales and weight_scale_2, w2 [E, H, W/2]
// with its own): their checks, and their split into per-expert matrices for
// the CPU reference.
#pragma once
#include <string>
#include <vector>

#include <tvm/ffi/optional.h>

#include "fp4moe/reference.hpp"
#include "tensor_args.hpp"

namespace fp4moe::python {

struct ExpertTensors {
  TensorView w13, w13_scale;
  tvm::ffi::Optional<TensorView> w13_scale_2;
  TensorView w2, w2_scale;
  tvm::ffi::Optional<TensorView> w2_scale_2;
};

// Checks every tensor of E experts of width W (dtype, shape, device), naming it
// `prefix` + "w13" etc. Scales are [E, N, K/block], or with swizzled scales
// [E, N rounded up to 128, K/block rounded up to 4]. weight_scale_2: NVFP4
// only, fp32 [E] or (w13) [E, 2]. Returns w13_scale_2's values per expert.
int check_experts(const ExpertTensors& t, const MoeConfig& c, Fp4Format f, const std::string& prefix, int64_t E,
                  int64_t width, DLDeviceType device, int device_id, bool swizzled);

// One [rows, cols] matrix from host tensors (checked).
Fp4Matrix matrix_from(Fp4Format f, const TensorView& packed, const TensorView& scales, float scale_2, int64_t rows,
                      int64_t cols, const char* packed_name, const char* scales_name);

// E experts (gate = w13's first W rows, up = the next W, linear scales) on the CPU.
std::vector<ExpertWeights> experts_from(const MoeConfig& c, Fp4Format f, const ExpertTensors& t, const std::string& prefix,
                                        int64_t E, int64_t width, DLDeviceType device);

}  // namespace fp4moe::python
