#include "plan/plan_query.hpp"

#include <cstdio>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "fp4moe/format.hpp"
#include "plan/arch.hpp"
#include "plan/gemm_plan.hpp"

namespace fp4moe::plan {
namespace {

using json = nlohmann::json;
namespace cm = cutlass;

void parse_tile(const std::string& s, int& m, int& n, int& k) {
  char x1 = 0, x2 = 0;
  int consumed = 0;
  const int got = std::sscanf(s.c_str(), "%d%c%d%c%d%n", &m, &x1, &n, &x2, &k, &consumed);
  FP4MOE_CHECK(got == 5 && (x1 == 'x' || x1 == 'X') && (x2 == 'x' || x2 == 'X') && consumed == int(s.size()) && m > 0 &&
                   n > 0 && k > 0,
               "'" << s << "' is not AxBxC with positive integers (e.g. tile 128x256x128, cluster 2x1x1)");
}

int tile_of_query(const std::string& s) {
  for (int i = 0; i < kNumGemmTiles; ++i)
    if (gemm_tile_name(i) == s || std::to_string(i) == s) return i;
  std::string known;
  for (int i = 0; i < kNumGemmTiles; ++i) known += (i ? ", " : "") + gemm_tile_name(i);
  throw Error("tile '" + s + "' is not a GEMM tile (known: " + known + ")");
}

json terms_json(const std::vector<cm::Term>& terms) {
  json a = json::array();
  for (const auto& t : terms) a.push_back({{"name", t.name}, {"bytes", t.bytes}, {"source", t.source}});
  return a;
}

}  // namespace

PlanAnswer answer(const PlanQuery& q) {
  FP4MOE_CHECK(!q.arch.empty(), "arch is required (e.g. sm120)");
  const Arch& arch = find_arch(q.arch);
  PlanAnswer a;
  if (q.kernel == "grouped" || q.kernel == "decode") {  // ("decode": its former name)
    FP4MOE_CHECK(q.n > 0 && q.k > 0, "n = " << q.n << " and k = " << q.k << " must be positive");
    const int only = q.sweep ? -1 : tile_of_query(q.tile);
    const bool typed = !q.activations.empty();
    const ActivationType gemm =
        typed && parse_activation_format(q.activations) == ActivationFormat::fp8 ? ActivationType::e4m3 : ActivationType::bf16;
    for (int i = 0; i < kNumGemmTiles; ++i) {
      if (q.sweep ? typed && kGemmTiles[i].activations != gemm : i != only) continue;
      a.grouped.push_back(plan_gemm_tile(i, q.n, q.k, arch, q.stages, typed ? gemm : kGemmTiles[i].activations));
    }
    return a;
  }
  FP4MOE_CHECK(q.kernel == "cutlass" || q.kernel == "trtllm",
               "kernel '" << q.kernel << "' is not one of cutlass (alias trtllm), grouped (alias decode)");
  FP4MOE_CHECK(q.activations.empty(), "activations '" << q.activations
                                                       << "' applies to kernel grouped; cutlass takes --format");
  const cm::Version version = q.cutlass_version.empty() ? cm::kFlashInferPin : cm::parse_version(q.cutlass_version);
  const cm::Format format = cm::parse_format(q.format);
  if (q.sweep) {
    a.cutlass = cm::sweep(arch.cc, format, version);
    return a;
  }
  cm::Config c;
  c.cc = arch.cc;
  c.format = format;
  parse_tile(q.tile, c.tile_m, c.tile_n, c.tile_k);
  c.epilogue = cm::parse_epilogue(q.epilogue);
  int cx = 0, cy = 0, cz = 0;
  parse_tile(q.cluster, cx, cy, cz);
  FP4MOE_CHECK(cy == 1 && cz == 1, "cluster '" << q.cluster << "' is not Mx1x1 (TensorRT-LLM's launcher clusters along M)");
  c.cluster_m = cx;
  c.swap_ab = q.swap_ab;
  c.version = version;
  c.forced_stages = q.stages;
  cm::check(c);
  a.cutlass.push_back(cm::analyze(c));
  return a;
}

json to_json(const cm::Report& r) {
  const cm::Config& c = r.model.config;
  json sug = json::array();
  for (const auto& s : r.suggestions)
    sug.push_back({{"kind", s.kind}, {"text", s.text}, {"stages", s.stages}, {"smem_bytes", s.smem_bytes}, {"fits", s.fits}});
  return {{"arch", r.arch},
          {"kernel", "cutlass_blockscaled_grouped"},
          {"cutlass", cm::to_string(c.version)},
          {"format", std::string(cm::to_string(c.format))},
          {"tile", fmt::format("{}x{}x{}", c.tile_m, c.tile_n, c.tile_k)},
          {"cluster", fmt::format("{}x1x1", c.cluster_m)},
          {"epilogue", std::string(cm::to_string(c.epilogue))},
          {"swap_ab", c.swap_ab},
          {"capacity", r.limit},
          {"stages", r.model.builder.stages},
          {"smem_bytes", r.model.kernel.total},
          {"builder_believes_bytes", r.model.builder.believed_bytes()},
          {"fits", r.fits},
          {"verdict", std::string(cm::to_string(r.verdict))},
          {"headroom", r.headroom},
          {"terms", {{"builder", terms_json(r.builder_terms)}, {"epilogue", terms_json(r.epilogue_terms)},
                     {"kernel", terms_json(r.kernel_terms)}}},
          {"explanation", r.explanation},
          {"suggestions", sug}};
}

json to_json(const SmemPlan& p) {
  json terms = json::array();
  for (const auto& t : p.terms) terms.push_back({{"name", t.name}, {"bytes", t.bytes}, {"note", t.note}});
  return {{"arch", p.arch},       {"kernel", p.kernel},         {"tile", p.config},
          {"capacity", p.capacity}, {"stages", p.stages},       {"per_stage", p.per_stage},
          {"smem_bytes", p.smem_bytes}, {"fits", p.fits},       {"headroom", p.headroom},
          {"terms", terms},       {"explanation", p.explanation}, {"suggestions", p.suggestions},
          {"threads", p.threads}, {"ctas_per_sm", p.ctas_per_sm}, {"activations", p.activations}};
}

json to_json(const PlanQuery& q, const PlanAnswer& a) {
  json all = json::array();
  for (const SmemPlan& p : a.grouped) all.push_back(to_json(p));
  for (const cm::Report& r : a.cutlass) all.push_back(to_json(r));
  return q.sweep ? all : all.at(0);
}

}  // namespace fp4moe::plan
