// fp4moe plan: shared-memory budgets and verdicts, as a table or JSON.
//   --kernel cutlass : CUTLASS's sm_120 block-scaled grouped GEMM as TensorRT-LLM builds it
//   --kernel grouped : fp4moe's FP4 grouped GEMM (src/plan/gemm_layout.hpp)
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "fp4moe/error.hpp"
#include "plan/arch.hpp"
#include "plan/cutlass_blockscaled_model.hpp"
#include "plan/gemm_plan.hpp"
#include "plan/plan_query.hpp"

namespace fp4moe::cli {
namespace {

namespace cm = plan::cutlass;

struct PlanOptions : plan::PlanQuery {
  bool as_json = false;
};

void print_terms(const char* title, const std::vector<cm::Term>& terms) {
  fmt::print("  {}\n", title);
  for (const auto& t : terms) fmt::print("    {:<44} {:>8}  {}\n", t.name, t.bytes, t.source);
}

void print_report(const cm::Report& r) {
  const cm::Config& c = r.model.config;
  fmt::print("{} CUTLASS {} block-scaled grouped GEMM, {} {}x{}x{}{}, epilogue {}{}\n", r.arch, cm::to_string(c.version),
             cm::to_string(c.format), c.tile_m, c.tile_n, c.tile_k,
             cm::is_sm100(c.cc) ? fmt::format(", cluster {}x1x1", c.cluster_m) : "", cm::to_string(c.epilogue),
             c.swap_ab ? ", swap_ab" : "");
  print_terms("builder (what CUTLASS's collective builder decides):", r.builder_terms);
  print_terms("carveout = sizeof(CollectiveEpilogue::SharedStorage):", r.epilogue_terms);
  print_terms("kernel (sizeof(GemmKernel::SharedStorage)):", r.kernel_terms);
  fmt::print("  capacity {}  stages {}  kernel needs {}  headroom {}  -> {}\n", r.limit, r.model.builder.stages,
             r.model.kernel.total, r.headroom, r.fits ? "FITS" : "DOES NOT FIT");
  fmt::print("  {}\n", r.explanation);
  for (const auto& s : r.suggestions) fmt::print("  suggestion ({}): {}\n", s.kind, s.text);
}

void print_plan(const plan::SmemPlan& p) {
  fmt::print("{} fp4moe {} GEMM, tile {}\n", p.arch, p.kernel, p.config);
  for (const auto& t : p.terms) fmt::print("    {:<30} {:>8}  {}\n", t.name, t.bytes, t.note);
  fmt::print("  capacity {}  stages {}  needs {}  headroom {}  -> {}\n", p.capacity, p.stages, p.smem_bytes, p.headroom,
             p.fits ? "FITS" : "DOES NOT FIT");
  fmt::print("  {}\n", p.explanation);
  for (const auto& s : p.suggestions) fmt::print("  suggestion: {}\n", s);
}

void run_plan(const PlanOptions& o) {
  const plan::PlanAnswer a = plan::answer(o);
  if (o.as_json) {
    fmt::print("{}\n", plan::to_json(o, a).dump(2));
    return;
  }
  for (const plan::SmemPlan& p : a.grouped) {
    if (o.sweep) fmt::print("{:<38} stages {:>2}  {:>7} of {:>6} bytes  {}\n", p.config, p.stages, p.smem_bytes, p.capacity, p.fits ? "fits" : "does not fit");
    else print_plan(p);
  }
  for (const cm::Report& r : a.cutlass) {
    if (!o.sweep) {
      print_report(r);
      continue;
    }
    const cm::Config& c = r.model.config;
    fmt::print("{:>3}x{:<3}x{:<3} {:<6} {:<8} {:<7} stages {:>2}  kernel {:>6} of {:>6}  {:<13} {}\n", c.tile_m, c.tile_n,
               c.tile_k, fmt::format("{}x1x1", c.cluster_m), cm::to_string(c.epilogue), c.swap_ab ? "swap_ab" : "", r.model.builder.stages,
               r.model.kernel.total, r.limit, cm::to_string(r.verdict), r.fits ? "" : r.explanation);
  }
}

}  // namespace

void register_plan(CLI::App& app) {
  static PlanOptions o;
  auto* cmd = app.add_subcommand("plan", "Shared-memory budget and verdict of a kernel configuration on a target");
  cmd->add_option("--arch", o.arch, "Target: sm80 sm86 sm89 sm90 sm100 sm103 sm120 sm121")->required();
  cmd->add_option("--kernel", o.kernel, "cutlass (TensorRT-LLM's block-scaled grouped GEMM) or grouped (fp4moe's; also spelled decode)")->capture_default_str();
  cmd->add_option("--format", o.format, "nvfp4, mxfp8_mxfp4 or mxfp4 (cutlass)")->capture_default_str();
  cmd->add_option("--tile", o.tile, "MxNxK (cutlass) or a GEMM tile name/index (kernel grouped)")->capture_default_str();
  cmd->add_option("--epilogue", o.epilogue, "none or finalize (cutlass)")->capture_default_str();
  cmd->add_option("--cluster", o.cluster, "1x1x1 or 2x1x1 (cutlass, sm100: the MMA tile's M is CTA_M x cluster M)")
      ->capture_default_str();
  cmd->add_flag("--swap-ab", o.swap_ab, "Swap A and B (cutlass)");
  cmd->add_option("--cutlass", o.cutlass_version, "CUTLASS version of the model, e.g. 4.4 or 4.4.2 (default: FlashInfer's pin)");
  cmd->add_option("--stages", o.stages, "Force a stage count instead of the automatic one")->check(CLI::Range(0, 64));
  cmd->add_option("--n", o.n, "N of the problem (grouped)")->capture_default_str();
  cmd->add_option("--k", o.k, "K of the problem (grouped)")->capture_default_str();
  cmd->add_option("--activations", o.activations,
                  "grouped: the GEMM's activations, bf16 or fp8 (default: each tile for its own type)");
  cmd->add_flag("--json", o.as_json, "JSON instead of a table");
  cmd->add_flag("--sweep", o.sweep, "Every tile x epilogue x swap of the family with its verdict");
  cmd->callback([] { run_plan(o); });
}

}  // namespace fp4moe::cli
