// The prepare step from tensors already on the GPU: one projection of every
// expert turned into the kernels' layout by kernels/prepare_weights.cu, its
// global scales read once (a construction-time synchronisation).
#include <cmath>
#include <vector>

#include "format/gemm_pack.hpp"
#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "kernels/prepare_weights.hpp"
#include "runtime/prepared_projection.hpp"

namespace fp4moe {

PreparedProjection prepare_on_device(const DeviceProjection& src, Fp4Format format, ScaleLayout layout, int64_t experts,
                                     int64_t n, int64_t k, int64_t n_src, int64_t k_src, bool gated,
                                     GateUpOrder order, const char* what, int64_t room) {
  FP4MOE_CHECK(src.weight && src.scale, what << ": weight and scale must be device pointers, got null");
  const int parts = gated ? 2 : 1;
  FP4MOE_CHECK(format == Fp4Format::mxfp4 || src.scale_2, what << ": NVFP4 needs scale_2 (weight_scale_2), got null");
  FP4MOE_CHECK(src.scale_2_parts == 1 || (gated && src.scale_2_parts == 2),
               what << ": scale_2 has " << src.scale_2_parts << " values per expert; "
                    << (gated ? "1 or 2 (one per half of w13)" : "1") << " expected");
  PreparedProjection p;
  p.format = format;
  p.experts = experts + room;
  p.n = n;
  p.k = k;
  p.scale_parts = parts;
  p.weights.resize(size_t((experts + room) * n * k / 2));
  p.scales.resize(size_t((experts + room) * pack::scale_bytes(n, k)));
  // K not a multiple of 128: the last scale granule's bytes past K stay zero, as
  // the host prepare leaves them (the kernel multiplies them by zero codes, and a
  // leftover byte could make an infinite operand: 0 x Inf is NaN)
  if (k % 128) p.scales.fill_bytes(0);
  DeviceBuffer<unsigned long long> first_bad(1);
  first_bad.fill_bytes(0xFF);

  kernels::PrepareWeightsArgs a;
  a.packed = src.weight;
  a.scales = src.scale;
  a.swizzled_scales = layout == ScaleLayout::swizzled_128x4;
  a.block = format == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize;
  a.experts = experts;
  a.n = n;
  a.k = k;
  a.n_src = n_src;
  a.k_src = k_src;
  a.gated = gated;
  a.order = order;
  a.prepared_scale = prepared_scale_table(format);
  a.weights = p.weights.get();
  a.prepared_scales = p.scales.get();
  a.first_bad = first_bad.get();
  kernels::launch_prepare_weights(a, nullptr);

  // Global scales: 2^10 * weight_scale_2 per expert and part (gemm_pack.hpp's kAccumulatorFactor).
  std::vector<float> scale_2(size_t(experts * src.scale_2_parts), 1.f);
  if (format == Fp4Format::nvfp4)
    FP4MOE_CUDA_CHECK(cudaMemcpy(scale_2.data(), src.scale_2, scale_2.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> dequant(size_t((experts + room) * parts), 1.f);
  for (int64_t e = 0; e < experts; ++e)
    for (int q = 0; q < parts; ++q) {
      // the prepared part q is gate (0) or up (1); scale_2's order is w13's halves (alternating rows: gate first)
      const int from = src.scale_2_parts == 1 ? 0 : (q == 1) != (order == GateUpOrder::up_gate) ? 1 : 0;
      const float v = scale_2[size_t(e * src.scale_2_parts + from)];
      FP4MOE_CHECK(std::isfinite(v) && v > 0.f,
                   what << ": scale_2 (weight_scale_2) of expert " << e << (src.scale_2_parts == 2 ? " part " : "")
                        << (src.scale_2_parts == 2 ? std::to_string(from) : "") << " is " << v << "; a positive finite value expected");
      dequant[size_t(e * parts + q)] = pack::kAccumulatorFactor * v;
    }
  p.dequant_scale.upload(dequant);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const unsigned long long bad = first_bad.download()[0];
  if (bad != ~0ull) {
    const int64_t blocks = k / 16, e = int64_t(bad) / (n * blocks), row = (int64_t(bad) / blocks) % n;
    const int64_t col = (int64_t(bad) % blocks) * 16;
    const int64_t src_row = gated ? pack::gated_source_row(row, n_src / 2, order) : row;
    FP4MOE_CHECK(false, what << ": expert " << e << " row " << src_row << " columns " << col << ".." << col + 15
                             << ": the block scale is outside the kernels' range for " << to_string(format)
                             << " (negative, NaN, below 2^-" << (format == Fp4Format::nvfp4 ? 9 : 20) << " or from 2^"
                             << (format == Fp4Format::nvfp4 ? 23 : 12) << " on)");
  }
  return p;
}

}  // namespace fp4moe
