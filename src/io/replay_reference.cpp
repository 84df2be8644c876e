// The CPU reference's side of a replay: logits (given or from the router
// weight), the reference router and the reference layer.
#include "fp4moe/error.hpp"
#include "io/replay.hpp"

namespace fp4moe::io {

std::vector<float> replay_router_logits(const MoeConfig& cfg, const MoeWeights& w, const ReplayInputs& in,
                                        const std::vector<float>& hidden) {
  if (!in.router_logits.empty()) return in.router_logits;
  FP4MOE_CHECK(!w.router_weight.empty(), in.path << ": no tensor 'router_logits', and the layer has no router weight "
                                                    "(mlp.gate.weight) to compute them from");
  return router_logits_reference(hidden.data(), in.tokens, cfg.hidden, w.router_weight, w.router_bias);
}

ReferenceReplay replay_reference(const MoeConfig& cfg, const MoeWeights& w, const ReplayInputs& in) {
  ReferenceReplay r;
  r.logits_computed = in.router_logits.empty();
  const std::vector<float> logits = replay_router_logits(cfg, w, in, in.hidden);
  r.routing = route_reference(cfg, logits.data(), in.tokens, w.correction_bias);
  r.output = moe_forward_reference(cfg, w, in.hidden.data(), in.tokens, r.routing);
  return r;
}

}  // namespace fp4moe::io
