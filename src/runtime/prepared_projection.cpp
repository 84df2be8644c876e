#include "runtime/prepared_projection.hpp"

#include "format/prepare_fp8.hpp"
#include "fp4moe/error.hpp"

namespace fp4moe {

void PreparedProjection::convert_to_fp8(const char* what) {
  if (activations == plan::ActivationType::e4m3) return;
  PreparedExpertWeights host;
  host.format = format;
  host.experts = experts, host.n = n, host.k = k;
  host.scale_parts = scale_parts;
  host.weights = weights.download();
  host.scales = scales.download();
  host.dequant_scale = dequant_scale.download();
  PreparedFp8Weights fp8;
  try {
    fp8 = prepare_fp8_gemm_weights(host);
  } catch (const Error& e) {
    throw Error(std::string(what) + ": " + e.what());
  }
  weights.upload(fp8.weights);
  scales.upload(fp8.scales);
  row_scale.upload(fp8.row_scale);
  activations = plan::ActivationType::e4m3;
}

}  // namespace fp4moe
