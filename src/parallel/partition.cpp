#include "parallel/partition.hpp"

#include <algorithm>

#include "fp4moe/error.hpp"

namespace fp4moe {

const char* to_string(ParallelMode m) {
  switch (m) {
    case ParallelMode::expert_allgather: return "allgather";
    case ParallelMode::expert_alltoall: return "alltoall";
    case ParallelMode::tensor: return "tp";
  }
  return "?";
}

ParallelMode parse_parallel_mode(const std::string& s) {
  if (s == "allgather") return ParallelMode::expert_allgather;
  if (s == "alltoall") return ParallelMode::expert_alltoall;
  if (s == "tp") return ParallelMode::tensor;
  throw Error("parallel mode '" + s + "' is not one of allgather, alltoall, tp");
}

}  // namespace fp4moe

namespace fp4moe::parallel {

namespace {
void check_rank(int rank, int ranks) {
  FP4MOE_CHECK(ranks >= 1, "ranks = " << ranks << " must be at least 1");
  FP4MOE_CHECK(rank >= 0 && rank < ranks, "rank = " << rank << " is outside 0.." << ranks - 1);
}

// Rows [r0, r0 + n) of m (codes and block scales), or columns [c0, c0 + n).
Fp4Matrix rows_of(const Fp4Matrix& m, int64_t r0, int64_t n) {
  Fp4Matrix o = m;
  o.rows = n;
  o.packed.assign(m.packed.begin() + r0 * (m.cols / 2), m.packed.begin() + (r0 + n) * (m.cols / 2));
  o.scales.assign(m.scales.begin() + r0 * m.scale_cols(), m.scales.begin() + (r0 + n) * m.scale_cols());
  return o;
}
Fp4Matrix cols_of(const Fp4Matrix& m, int64_t c0, int64_t n) {
  Fp4Matrix o = m;
  o.cols = n;
  o.packed.clear();
  o.scales.clear();
  const int64_t b = m.block_size();
  for (int64_t r = 0; r < m.rows; ++r) {
    const auto p = m.packed.begin() + r * (m.cols / 2) + c0 / 2;
    o.packed.insert(o.packed.end(), p, p + n / 2);
    const auto s = m.scales.begin() + r * m.scale_cols() + c0 / b;
    o.scales.insert(o.scales.end(), s, s + n / b);
  }
  return o;
}
// Biases follow their rows; the down projection's bias is added once, by the first rank.
ExpertWeights slice_expert(const ExpertWeights& e, int64_t i0, int64_t n, bool first_rank) {
  ExpertWeights o;
  o.gate = rows_of(e.gate, i0, n);
  o.up = rows_of(e.up, i0, n);
  o.down = cols_of(e.down, i0, n);
  if (!e.gate_bias.empty()) o.gate_bias.assign(e.gate_bias.begin() + i0, e.gate_bias.begin() + i0 + n);
  if (!e.up_bias.empty()) o.up_bias.assign(e.up_bias.begin() + i0, e.up_bias.begin() + i0 + n);
  if (!e.down_bias.empty()) o.down_bias = first_rank ? e.down_bias : std::vector<float>(e.down_bias.size(), 0.f);
  return o;
}
}  // namespace

ExpertRange expert_range(const MoeConfig& cfg, int rank, int ranks) {
  check_rank(rank, ranks);
  FP4MOE_CHECK(cfg.num_experts % ranks == 0, "expert parallelism: E = " << cfg.num_experts << " experts do not divide among "
                                                                         << ranks << " ranks");
  const int64_t per = cfg.num_experts / ranks;
  return {rank * per, per};
}

MoeWeights slice_experts(const MoeWeights& w, ExpertRange r) {
  FP4MOE_CHECK(r.begin >= 0 && r.count >= 1 && r.begin + r.count <= int64_t(w.experts.size()),
               "slice_experts: [" << r.begin << ", " << r.begin + r.count << ") is outside the " << w.experts.size()
                                  << " experts");
  MoeWeights o;
  o.experts.assign(w.experts.begin() + r.begin, w.experts.begin() + r.begin + r.count);
  o.correction_bias = w.correction_bias;
  o.router_weight = w.router_weight;
  o.router_bias = w.router_bias;
  o.has_shared = w.has_shared;
  o.shared = w.shared;
  return o;
}

MoeConfig tp_config(const MoeConfig& cfg, int ranks) {
  FP4MOE_CHECK(ranks >= 1, "ranks = " << ranks << " must be at least 1");
  auto part = [&](int64_t width, const char* what) {
    FP4MOE_CHECK(width % ranks == 0 && (width / ranks) % 128 == 0,
                 "tensor parallelism: " << what << " = " << width << " over " << ranks << " ranks gives "
                                        << double(width) / ranks << " per rank; it must be a positive multiple of 128");
    return width / ranks;
  };
  MoeConfig c = cfg;
  c.intermediate = part(cfg.intermediate, "the expert width I");
  if (cfg.shared_expert) c.shared_intermediate = part(cfg.shared_intermediate, "the shared expert's width");
  return c;
}

MoeWeights slice_intermediate(const MoeConfig& cfg, const MoeWeights& w, int rank, int ranks) {
  check_rank(rank, ranks);
  const MoeConfig part = tp_config(cfg, ranks);
  MoeWeights o;
  o.correction_bias = w.correction_bias;
  o.router_weight = w.router_weight;
  o.router_bias = w.router_bias;
  for (const ExpertWeights& e : w.experts)
    o.experts.push_back(slice_expert(e, rank * part.intermediate, part.intermediate, rank == 0));
  o.has_shared = w.has_shared;
  if (w.has_shared) o.shared = slice_expert(w.shared, rank * part.shared_intermediate, part.shared_intermediate, rank == 0);
  return o;
}

AllToAllPlan plan_alltoall(const MoeConfig& cfg, const Routing& r, int ranks, int64_t capacity) {
  const int64_t per = expert_range(cfg, 0, ranks).count, k = r.top_k;
  FP4MOE_CHECK(capacity >= r.tokens, "alltoall: capacity " << capacity << " is below the " << r.tokens << " tokens");
  AllToAllPlan p;
  p.ranks = ranks;
  p.capacity = capacity;
  p.count.assign(size_t(ranks), 0);
  p.token.assign(size_t(ranks * capacity), -1);
  p.ids.assign(size_t(ranks * capacity * k), -1);
  p.weights.assign(size_t(ranks * capacity * k), 0.f);
  // Tokens in order; a token takes the next slot of every rank one of its pairs goes to.
  for (int64_t t = 0; t < r.tokens; ++t) {
    for (int d = 0; d < ranks; ++d) {
      int64_t slot = -1;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = r.topk_ids[size_t(t * k + j)];
        if (id < 0 || id / per != d) continue;
        if (slot < 0) slot = p.count[size_t(d)]++, p.token[size_t(d * capacity + slot)] = int32_t(t);
        p.ids[size_t((d * capacity + slot) * k + j)] = id;
        p.weights[size_t((d * capacity + slot) * k + j)] = r.topk_weights[size_t(t * k + j)];
      }
    }
  }
  return p;
}

}  // namespace fp4moe::parallel
