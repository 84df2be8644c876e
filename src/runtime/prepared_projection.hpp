// A layer's prepared FP4 weights on the device: one projection of a set of
// experts in the kernels' layout (src/format/prepare_gemm.hpp), with its biases.
#pragma once
#include <cstdint>

#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/layer.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/gemm_step.hpp"

namespace fp4moe {

struct PreparedProjection {  // one prepared projection of all experts
  DeviceBuffer<uint8_t> weights, scales;
  DeviceBuffer<float> dequant_scale;
  DeviceBuffer<float> bias;  // [E][N] in the prepared row order (prepared_bias), or empty
  int scale_parts = 1;
  int64_t n = 0, k = 0, experts = 0;
  Fp4Format format = Fp4Format::nvfp4;
  // e4m3: weights and scales hold the FP8 layout (format/prepare_fp8.hpp) and
  // row_scale its per-row scales [E][N]; dequant_scale is kept for nothing.
  plan::ActivationType activations = plan::ActivationType::bf16;
  DeviceBuffer<float> row_scale;

  explicit PreparedProjection(const PreparedExpertWeights& p)
      : weights(p.weights), scales(p.scales), dequant_scale(p.dequant_scale), scale_parts(p.scale_parts), n(p.n),
        k(p.k), experts(p.experts), format(p.format) {}
  PreparedProjection() = default;
  int64_t bytes() const {
    return int64_t(weights.bytes() + scales.bytes() + dequant_scale.bytes() + bias.bytes() + row_scale.bytes());
  }
  bool biased() const { return bias.size() > 0; }  // its GEMM runs the biased epilogue instance
  ProjectionView view() const {
    ProjectionView v{weights.get(), scales.get(), dequant_scale.get(), biased() ? bias.get() : nullptr, scale_parts,
                     format, n, k, experts};
    v.activations = activations;
    v.row_scale = row_scale.get();
    return v;
  }
  // Re-packs the weights in place for e4m3 activations, on the GPU
  // (kernels/prepare_fp8_weights.hpp; synchronizes); an fp4moe::Error naming
  // `what` where they cannot fold (NVFP4 without round_nvfp4: before any
  // change; blocks out of range: the weights are then dropped, the projection
  // empty). round_nvfp4: NVFP4 weights fold rounded (fp8::rounded_fold_table).
  void convert_to_fp8(const char* what, bool round_nvfp4 = false);
};

// Copies src's experts into dst's slots [at, at + src.experts) (the same
// shape, format and scale parts, no biases; `what` names it in errors).
// Synchronous, at construction.
void place_experts(PreparedProjection& dst, int64_t at, const PreparedProjection& src, const char* what);

struct ExpertPair {  // GEMM1 (gate/up interleaved) and GEMM2 (down) of a set of experts
  PreparedProjection w13, w2;
};

// Prepares one projection of `experts` experts from device tensors [n_src,
// k_src] on the device (kernels/prepare_weights.cu) into the prepared [n, k],
// padded with zero weights, with `room` more expert slots after them for
// place_experts. `what` names it in errors.
PreparedProjection prepare_on_device(const DeviceProjection& src, Fp4Format format, ScaleLayout layout, int64_t experts,
                                     int64_t n, int64_t k, int64_t n_src, int64_t k_src, bool gated,
                                     GateUpOrder order, const char* what, int64_t room = 0);

}  // namespace fp4moe
