#include "runtime/prepared_projection.hpp"

#include <climits>
#include <string>

#include "format/prepare_fp8.hpp"
#include "fp4moe/error.hpp"
#include "kernels/prepare_fp8_weights.hpp"

namespace fp4moe {
// Every buffer is [experts][...] in the prepared layout: an expert's bytes are
// one contiguous piece of each.
void place_experts(PreparedProjection& dst, int64_t at, const PreparedProjection& src, const char* what) {
  FP4MOE_CHECK(dst.n == src.n && dst.k == src.k && dst.format == src.format && dst.scale_parts == src.scale_parts &&
                   dst.activations == src.activations && !dst.biased() && !src.biased() && dst.row_scale.size() == 0 &&
                   at >= 0 && at + src.experts <= dst.experts,
               what << ": experts of [" << src.n << ", " << src.k << "] " << to_string(src.format) << " do not fit slots "
                    << at << ".." << at + src.experts << " of [" << dst.n << ", " << dst.k << "] "
                    << to_string(dst.format) << " x " << dst.experts);
  const auto copy = [&](auto& d, const auto& s, int64_t per_expert) {
    FP4MOE_CUDA_CHECK(cudaMemcpy(d.get() + at * per_expert, s.get(), s.bytes(), cudaMemcpyDeviceToDevice));
  };
  copy(dst.weights, src.weights, dst.n * dst.k / 2);
  copy(dst.scales, src.scales, pack::scale_bytes(dst.n, dst.k));
  copy(dst.dequant_scale, src.dequant_scale, dst.scale_parts);
}

void PreparedProjection::convert_to_fp8(const char* what, bool round_nvfp4) {
  if (activations == plan::ActivationType::e4m3) return;
  try {
    check_fp8_format(format, round_nvfp4);
  } catch (const Error& e) {
    throw Error(std::string(what) + ": " + e.what());
  }
  if (experts == 0) {
    activations = plan::ActivationType::e4m3;
    return;
  }
  try {
    DeviceBuffer<int> below{static_cast<size_t>(experts)};
    DeviceBuffer<int> first_row{std::vector<int>(static_cast<size_t>(experts), INT_MAX)};
    below.fill_bytes(0);
    row_scale.resize(size_t(experts * n));
    kernels::PrepareFp8Args a;
    a.weights = weights.get(), a.scales = scales.get(), a.dequant_scale = dequant_scale.get();
    a.format = format;
    a.scale_parts = scale_parts, a.row_scale = row_scale.get();
    a.experts = experts, a.n = n, a.k = k;
    a.below = below.get(), a.first_row = first_row.get();
    kernels::launch_prepare_fp8_weights(a, nullptr);
    const std::vector<int> b = below.download(), f = first_row.download();  // (synchronizes)
    check_fp8_fold(std::vector<int64_t>(b.begin(), b.end()), std::vector<int64_t>(f.begin(), f.end()), format);
  } catch (const Error& e) {
    // the re-pack ran in place: what is left is neither layout, so nothing is kept
    weights.resize(0), scales.resize(0), row_scale.resize(0);
    throw Error(std::string(what) + ": " + e.what());
  }
  activations = plan::ActivationType::e4m3;
}

}  // namespace fp4moe
