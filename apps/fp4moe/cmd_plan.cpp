// fp4moe plan: shared-memory budgets and verdicts, as a table or JSON.
//   --kernel cutlass : CUTLASS's sm_120 block-scaled grouped GEMM as TensorRT-LLM builds it
//   --kernel decode  : fp4moe's decode grouped GEMM (src/plan/decode_layout.hpp)
#include <cstdio>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "fp4moe/error.hpp"
#include "plan/arch.hpp"
#include "plan/cutlass_blockscaled_model.hpp"
#include "plan/decode_plan.hpp"

namespace fp4moe::cli {
namespace {

using json = nlohmann::json;
namespace cm = plan::cutlass;

struct PlanOptions {
  std::string arch;
  std::string kernel = "cutlass";
  std::string format = "nvfp4";
  std::string tile = "128x128x128";
  std::string epilogue = "none";
  std::string cutlass_version;
  bool swap_ab = false;
  bool as_json = false;
  bool sweep = false;
  int stages = 0;
  int64_t n = 4096, k = 6144;
};

void parse_tile(const std::string& s, int& m, int& n, int& k) {
  char x1 = 0, x2 = 0;
  int consumed = 0;
  const int got = std::sscanf(s.c_str(), "%d%c%d%c%d%n", &m, &x1, &n, &x2, &k, &consumed);
  FP4MOE_CHECK(got == 5 && (x1 == 'x' || x1 == 'X') && (x2 == 'x' || x2 == 'X') && consumed == int(s.size()) && m > 0 &&
                   n > 0 && k > 0,
               "--tile '" << s << "' is not MxNxK with positive integers (e.g. 128x256x128)");
}

json terms_json(const std::vector<cm::Term>& terms) {
  json a = json::array();
  for (const auto& t : terms) a.push_back({{"name", t.name}, {"bytes", t.bytes}, {"source", t.source}});
  return a;
}

json report_json(const cm::Report& r) {
  const cm::Config& c = r.model.config;
  json sug = json::array();
  for (const auto& s : r.suggestions)
    sug.push_back({{"kind", s.kind}, {"text", s.text}, {"stages", s.stages}, {"smem_bytes", s.smem_bytes}, {"fits", s.fits}});
  return {{"arch", r.arch},
          {"kernel", "cutlass_blockscaled_grouped"},
          {"cutlass", cm::to_string(c.version)},
          {"format", std::string(cm::to_string(c.format))},
          {"tile", fmt::format("{}x{}x{}", c.tile_m, c.tile_n, c.tile_k)},
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

json plan_json(const plan::SmemPlan& p) {
  json terms = json::array();
  for (const auto& t : p.terms) terms.push_back({{"name", t.name}, {"bytes", t.bytes}, {"note", t.note}});
  return {{"arch", p.arch},       {"kernel", p.kernel},         {"tile", p.config},
          {"capacity", p.capacity}, {"stages", p.stages},       {"per_stage", p.per_stage},
          {"smem_bytes", p.smem_bytes}, {"fits", p.fits},       {"headroom", p.headroom},
          {"terms", terms},       {"explanation", p.explanation}, {"suggestions", p.suggestions},
          {"threads", p.threads}, {"ctas_per_sm", p.ctas_per_sm}};
}

void print_terms(const char* title, const std::vector<cm::Term>& terms) {
  fmt::print("  {}\n", title);
  for (const auto& t : terms) fmt::print("    {:<44} {:>8}  {}\n", t.name, t.bytes, t.source);
}

void print_report(const cm::Report& r) {
  const cm::Config& c = r.model.config;
  fmt::print("{} CUTLASS {} block-scaled grouped GEMM, {} {}x{}x{}, epilogue {}{}\n", r.arch, cm::to_string(c.version),
             cm::to_string(c.format), c.tile_m, c.tile_n, c.tile_k, cm::to_string(c.epilogue), c.swap_ab ? ", swap_ab" : "");
  print_terms("builder (what CUTLASS's collective builder decides):", r.builder_terms);
  print_terms("carveout = sizeof(CollectiveEpilogue::SharedStorage):", r.epilogue_terms);
  print_terms("kernel (sizeof(GemmKernel::SharedStorage)):", r.kernel_terms);
  fmt::print("  capacity {}  stages {}  kernel needs {}  headroom {}  -> {}\n", r.limit, r.model.builder.stages,
             r.model.kernel.total, r.headroom, r.fits ? "FITS" : "DOES NOT FIT");
  fmt::print("  {}\n", r.explanation);
  for (const auto& s : r.suggestions) fmt::print("  suggestion ({}): {}\n", s.kind, s.text);
}

void print_plan(const plan::SmemPlan& p) {
  fmt::print("{} fp4moe {} grouped GEMM, tile {}\n", p.arch, p.kernel, p.config);
  for (const auto& t : p.terms) fmt::print("    {:<30} {:>8}  {}\n", t.name, t.bytes, t.note);
  fmt::print("  capacity {}  stages {}  needs {}  headroom {}  -> {}\n", p.capacity, p.stages, p.smem_bytes, p.headroom,
             p.fits ? "FITS" : "DOES NOT FIT");
  fmt::print("  {}\n", p.explanation);
  for (const auto& s : p.suggestions) fmt::print("  suggestion: {}\n", s);
}

int decode_tile_index(const std::string& s) {
  for (int i = 0; i < plan::kNumDecodeTiles; ++i)
    if (plan::decode_tile_name(i) == s || std::to_string(i) == s) return i;
  std::string known;
  for (int i = 0; i < plan::kNumDecodeTiles; ++i) known += (i ? ", " : "") + plan::decode_tile_name(i);
  throw Error("--tile '" + s + "' is not a decode tile (known: " + known + ")");
}

void run_plan(const PlanOptions& o) {
  FP4MOE_CHECK(!o.arch.empty(), "--arch is required (e.g. --arch sm120)");
  const plan::Arch& arch = plan::find_arch(o.arch);
  if (o.kernel == "decode") {
    FP4MOE_CHECK(o.n > 0 && o.k > 0, "--n " << o.n << " and --k " << o.k << " must be positive");
    json all = json::array();
    for (int i = 0; i < plan::kNumDecodeTiles; ++i) {
      if (!o.sweep && i != decode_tile_index(o.tile)) continue;
      const plan::SmemPlan p = plan::plan_decode_tile(i, o.n, o.k, arch, o.stages);
      if (o.as_json) all.push_back(plan_json(p));
      else if (o.sweep) fmt::print("{:<28} stages {:>2}  {:>7} of {:>6} bytes  {}\n", p.config, p.stages, p.smem_bytes, p.capacity, p.fits ? "fits" : "does not fit");
      else print_plan(p);
    }
    if (o.as_json) fmt::print("{}\n", (o.sweep ? all : all.at(0)).dump(2));
    return;
  }
  FP4MOE_CHECK(o.kernel == "cutlass" || o.kernel == "trtllm",
               "--kernel '" << o.kernel << "' is not one of cutlass (alias trtllm), decode");
  const cm::Version version = o.cutlass_version.empty() ? cm::kFlashInferPin : cm::parse_version(o.cutlass_version);
  const cm::Format format = cm::parse_format(o.format);
  if (o.sweep) {
    json all = json::array();
    for (const cm::Report& r : cm::sweep(arch.cc, format, version)) {
      if (o.as_json) {
        all.push_back(report_json(r));
        continue;
      }
      const cm::Config& c = r.model.config;
      fmt::print("{:>3}x{:<3}x{:<3} {:<8} {:<7} stages {:>2}  kernel {:>6} of {:>6}  {:<13} {}\n", c.tile_m, c.tile_n,
                 c.tile_k, cm::to_string(c.epilogue), c.swap_ab ? "swap_ab" : "", r.model.builder.stages,
                 r.model.kernel.total, r.limit, cm::to_string(r.verdict), r.fits ? "" : r.explanation);
    }
    if (o.as_json) fmt::print("{}\n", all.dump(2));
    return;
  }
  cm::Config c;
  c.cc = arch.cc;
  c.format = format;
  parse_tile(o.tile, c.tile_m, c.tile_n, c.tile_k);
  c.epilogue = cm::parse_epilogue(o.epilogue);
  c.swap_ab = o.swap_ab;
  c.version = version;
  c.forced_stages = o.stages;
  cm::check(c);  // impossible requests are errors, not verdicts
  const cm::Report r = cm::analyze(c);
  if (o.as_json) fmt::print("{}\n", report_json(r).dump(2));
  else print_report(r);
}

}  // namespace

void register_plan(CLI::App& app) {
  static PlanOptions o;
  auto* cmd = app.add_subcommand("plan", "Shared-memory budget and verdict of a kernel configuration on a target");
  cmd->add_option("--arch", o.arch, "Target: sm80 sm86 sm89 sm90 sm100 sm103 sm120 sm121")->required();
  cmd->add_option("--kernel", o.kernel, "cutlass (TensorRT-LLM's block-scaled grouped GEMM) or decode (fp4moe)")->capture_default_str();
  cmd->add_option("--format", o.format, "nvfp4, mxfp8_mxfp4 or mxfp4 (cutlass)")->capture_default_str();
  cmd->add_option("--tile", o.tile, "MxNxK (cutlass) or a decode tile name/index")->capture_default_str();
  cmd->add_option("--epilogue", o.epilogue, "none or finalize (cutlass)")->capture_default_str();
  cmd->add_flag("--swap-ab", o.swap_ab, "Swap A and B (cutlass)");
  cmd->add_option("--cutlass", o.cutlass_version, "CUTLASS version of the model, e.g. 4.4 or 4.4.2 (default: FlashInfer's pin)");
  cmd->add_option("--stages", o.stages, "Force a stage count instead of the automatic one")->check(CLI::Range(0, 64));
  cmd->add_option("--n", o.n, "N of the problem (decode)")->capture_default_str();
  cmd->add_option("--k", o.k, "K of the problem (decode)")->capture_default_str();
  cmd->add_flag("--json", o.as_json, "JSON instead of a table");
  cmd->add_flag("--sweep", o.sweep, "Every tile x epilogue x swap of the family with its verdict");
  cmd->callback([] { run_plan(o); });
}

}  // namespace fp4moe::cli
