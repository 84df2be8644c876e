// The replay's output file and its error figures.
#include <cmath>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "io/replay.hpp"

namespace fp4moe::io {

void set_replay_error(ReplayOutputs& out) {
  const int64_t T = out.tokens, H = out.hidden;
  FP4MOE_CHECK(int64_t(out.output.size()) == T * H && int64_t(out.reference_output.size()) == T * H,
               "replay error: output has " << out.output.size() << " and reference_output " << out.reference_output.size()
                                           << " values, expected T x H = " << T * H);
  out.error_per_token.assign(size_t(T), 0.0f);
  double num = 0, den = 0;
  for (int64_t t = 0; t < T; ++t) {
    double n = 0, d = 0;
    for (int64_t c = 0; c < H; ++c) {
      const double ref = out.reference_output[size_t(t * H + c)];
      const double diff = double(bf16_to_float(out.output[size_t(t * H + c)])) - ref;
      n += std::isfinite(diff) ? diff * diff : INFINITY;
      d += ref * ref;
    }
    out.error_per_token[size_t(t)] = float(d > 0 ? std::sqrt(n / d) : std::sqrt(n));
    num += n;
    den += d;
  }
  out.error = float(den > 0 ? std::sqrt(num / den) : std::sqrt(num));
}

void write_replay_outputs(const std::string& path, const ReplayOutputs& o) {
  const int64_t T = o.tokens, H = o.hidden, k = o.top_k;
  std::vector<TensorToWrite> t{
      {"output", Dtype::BF16, {T, H}, o.output.data(), o.output.size() * 2},
      {"topk_ids", Dtype::I32, {T, k}, o.topk_ids.data(), o.topk_ids.size() * 4},
      {"topk_weights", Dtype::F32, {T, k}, o.topk_weights.data(), o.topk_weights.size() * 4},
  };
  if (o.checked) {
    t.push_back({"reference_output", Dtype::F32, {T, H}, o.reference_output.data(), o.reference_output.size() * 4});
    t.push_back({"reference_topk_ids", Dtype::I32, {T, k}, o.reference_topk_ids.data(), o.reference_topk_ids.size() * 4});
    t.push_back({"reference_topk_weights", Dtype::F32, {T, k}, o.reference_topk_weights.data(),
                 o.reference_topk_weights.size() * 4});
    t.push_back({"error", Dtype::F32, {}, &o.error, 4});
    t.push_back({"error_per_token", Dtype::F32, {T}, o.error_per_token.data(), o.error_per_token.size() * 4});
  }
  write_safetensors(path, t, o.metadata);
}

}  // namespace fp4moe::io
