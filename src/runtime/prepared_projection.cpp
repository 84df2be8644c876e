#include "runtime/prepared_projection.hpp"

#include <climits>
#include <string>

#include "format/prepare_fp8.hpp"
#include "fp4moe/error.hpp"
#include "kernels/prepare_fp8_weights.hpp"

namespace fp4moe {
namespace {

// a's elements then b's, device to device.
template <class T>
DeviceBuffer<T> concatenated(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
  DeviceBuffer<T> out(a.size() + b.size());
  if (a.size()) FP4MOE_CUDA_CHECK(cudaMemcpy(out.get(), a.get(), a.bytes(), cudaMemcpyDeviceToDevice));
  if (b.size()) FP4MOE_CUDA_CHECK(cudaMemcpy(out.get() + a.size(), b.get(), b.bytes(), cudaMemcpyDeviceToDevice));
  return out;
}

}  // namespace

// Every buffer is [experts][...] in the prepared layout, so appending experts
// appends each buffer.
PreparedProjection concat_experts(const PreparedProjection& a, const PreparedProjection& b, const char* what) {
  FP4MOE_CHECK(a.n == b.n && a.k == b.k && a.format == b.format && a.scale_parts == b.scale_parts &&
                   a.activations == b.activations && a.biased() == b.biased() && a.row_scale.size() == 0 &&
                   b.row_scale.size() == 0,
               what << ": experts of [" << a.n << ", " << a.k << "] " << to_string(a.format) << " and [" << b.n << ", "
                    << b.k << "] " << to_string(b.format) << " do not make one projection");
  PreparedProjection p;
  p.weights = concatenated(a.weights, b.weights);
  p.scales = concatenated(a.scales, b.scales);
  p.dequant_scale = concatenated(a.dequant_scale, b.dequant_scale);
  p.bias = concatenated(a.bias, b.bias);
  p.scale_parts = a.scale_parts;
  p.n = a.n, p.k = a.k, p.experts = a.experts + b.experts;
  p.format = a.format;
  p.activations = a.activations;
  return p;
}

void PreparedProjection::convert_to_fp8(const char* what) {
  if (activations == plan::ActivationType::e4m3) return;
  try {
    check_fp8_format(format);
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
    a.scale_parts = scale_parts, a.row_scale = row_scale.get();
    a.experts = experts, a.n = n, a.k = k;
    a.below = below.get(), a.first_row = first_row.get();
    kernels::launch_prepare_fp8_weights(a, nullptr);
    const std::vector<int> b = below.download(), f = first_row.download();  // (synchronizes)
    check_fp8_fold(std::vector<int64_t>(b.begin(), b.end()), std::vector<int64_t>(f.begin(), f.end()));
  } catch (const Error& e) {
    // the re-pack ran in place: what is left is neither layout, so nothing is kept
    weights.resize(0), scales.resize(0), row_scale.resize(0);
    throw Error(std::string(what) + ": " + e.what());
  }
  activations = plan::ActivationType::e4m3;
}

}  // namespace fp4moe
