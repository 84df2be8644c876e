// Runtime side of the CUTLASS block-scaled grouped GEMM model: validation with
// clear errors, verdicts, explanations, suggestions and the TRT-LLM tile sweep.
// The arithmetic itself lives in cutlass_blockscaled_model.hpp (constexpr).
#include "plan/cutlass_blockscaled_model.hpp"

#include <array>
#include <cctype>
#include <sstream>

#include "fp4moe/error.hpp"
#include "plan/arch.hpp"

namespace fp4moe::plan::cutlass {
namespace {

std::string lower(std::string_view s) {
  std::string out;
  for (char ch : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string tile_string(const Config& c) {
  std::ostringstream os;
  os << c.tile_m << "x" << c.tile_n << "x" << c.tile_k;
  return os.str();
}

std::string config_string(const Config& c) {
  std::ostringstream os;
  os << "sm_" << c.cc << " " << to_string(c.format) << " " << tile_string(c);
  if (is_sm100(c.cc)) os << " cluster " << c.cluster_m << "x1x1";
  os << " epilogue " << to_string(c.epilogue) << (c.swap_ab ? " swap_ab" : "") << " (CUTLASS " << to_string(c.version)
     << ")";
  return os.str();
}

const Arch& arch_for(int cc) {
  const Arch* a = find_arch_by_cc(cc);
  FP4MOE_CHECK(a != nullptr, "no architecture with compute capability " << cc << " in the arch table");
  return *a;
}

// What the kernel needs at each explicit stage count, highest first, until one fits.
int best_explicit_stages(const Config& c, int below, std::int64_t limit, std::int64_t* bytes) {
  for (int s = below; s >= min_stages(c); --s) {
    const std::int64_t b = kernel_bytes_at(c, s);
    if (b <= limit) {
      *bytes = b;
      return s;
    }
  }
  return 0;
}

Verdict verdict_of(const Model& m, std::int64_t limit) {
  if (m.builder.stages < min_stages(m.config)) return Verdict::too_few_stages;
  if (m.kernel.total > limit) return Verdict::exceeds_limit;
  return Verdict::fits;
}

// ---- sm_100 terms (cutlass_sm100_model.hpp) ----

std::vector<Term> sm100_builder_terms(const Model& m) {
  const auto& s = m.stage;
  const auto& b = m.builder;
  const Config& c = m.config;
  const int mc = c.tile_m / c.cluster_m, nb = c.tile_n / c.cluster_m;
  const std::string per_cta = c.cluster_m == 2 ? " (per CTA of the 2-SM pair)" : "";
  std::vector<Term> v;
  v.push_back({"per stage: A " + std::to_string(mc) + "x" + std::to_string(c.tile_k) + " x 4 bit" + per_cta, s.a,
               "sm100_blockscaled_umma_builder.inl:83, 203"});
  v.push_back({"per stage: B " + std::to_string(nb) + "x" + std::to_string(c.tile_k) + " x 4 bit" + per_cta, s.b,
               "sm100_blockscaled_umma_builder.inl:84, 219"});
  v.push_back({"per stage: SFA " + std::to_string(mc) + " rows x " + std::to_string(c.tile_k / 16) + " scales", s.sfa,
               "sm100_blockscaled_layout.hpp:142"});
  v.push_back({"per stage: SFB " + std::to_string(round_up(c.tile_n, 128)) + " cols (N padded to 128) x " +
                   std::to_string(c.tile_k / 16) + " scales",
               s.sfb, "sm100_blockscaled_layout.hpp:180"});
  v.push_back({m.rules.stage_barrier_rounded ? "per stage: pipeline barriers (16, rounded to 128)" : "per stage: pipeline barriers",
               s.barrier, "sm100_blockscaled_umma_builder.inl:76"});
  v.push_back({"per stage: total", s.total(), "sm100_blockscaled_umma_builder.inl:77-85"});
  v.push_back({"builder capacity (sm100_smem_capacity_bytes)", b.capacity, "cutlass/arch/arch.h:44"});
  v.push_back({"KernelSmemCarveout (pipelines, CLC responses, TMEM, tensor maps)", b.capacity_reduction,
               "sm100_blockscaled_umma_builder.inl:255; sm100_pipeline_carveout.inl:73-82"});
  v.push_back({"carveout = sizeof(CollectiveEpilogue::SharedStorage)", b.carveout, "moe_gemm_tma_ws_launcher.inl:500-502"});
  v.push_back({b.forced ? "stages (StageCount<n>)" : "stages = (capacity - KernelSmemCarveout - carveout) / per stage",
               b.stages, "sm100_blockscaled_umma_builder.inl:87"});
  return v;
}

std::vector<Term> sm100_epilogue_term_list(const Model& m) {
  const auto& e = m.epilogue;
  std::vector<Term> v;
  v.push_back({"D tiles: " + std::to_string(e.stages_d) + " x " + std::to_string(e.tile_m) + "x" + std::to_string(e.tile_n) +
                   " bf16 (C is void: no C tiles)",
               e.smem_d, "sm100_builder.inl:1113; sm100_epilogue_array_tma_warpspecialized.hpp:161-167, 189-192"});
  v.push_back({m.config.epilogue == Epilogue::finalize
                   ? (m.config.swap_ab ? "fusion: router scales row broadcast (float x N)" : "fusion: bias row broadcast (bf16 x N)")
                   : "fusion: LinearCombination (empty)",
               e.fusion, "sm90_visitor_load_tma_warpspecialized.hpp:988; sm90_visitor_scatter.hpp:449-481"});
  v.push_back({"alignment padding (swizzle alignment " + std::to_string(e.alignment) + ")", e.tensors - e.collective - e.fusion,
               "sm100_epilogue_array_tma_warpspecialized.hpp:175, 212-220"});
  v.push_back({"epilogue TensorStorage", e.tensors, "sm100_epilogue_array_tma_warpspecialized.hpp:212-220"});
  v.push_back({"epilogue tensor maps (C, D)", e.tensormaps, "sm100_epilogue_array_tma_warpspecialized.hpp:222-225"});
  v.push_back({"epilogue load pipeline (" + std::to_string(e.stages_c) + " stages, allocated though C is void)", e.pipeline,
               "sm100_builder.inl:1114; sm100_epilogue_array_tma_warpspecialized.hpp:201, 228"});
  v.push_back({"rounding to alignment", e.total - e.tensors - e.tensormaps - e.pipeline,
               "sm100_epilogue_array_tma_warpspecialized.hpp:208-230"});
  v.push_back({"sizeof(CollectiveEpilogue::SharedStorage)", e.total, "sm100_epilogue_array_tma_warpspecialized.hpp:208-230"});
  return v;
}

std::vector<Term> sm100_kernel_term_list(const Model& m) {
  const auto& k = m.kernel;
  const std::string st = std::to_string(k.stages);
  const char* K = "sm100_gemm_array_tma_warpspecialized.hpp:";
  std::vector<Term> v;
  v.push_back({"mainloop pipeline (PipelineTmaUmmaAsync<" + st + ">)", k.mainloop_pipeline, std::string(K) + "235-273"});
  v.push_back({"epilogue load pipeline", k.epilogue_pipeline, std::string(K) + "235-273"});
  v.push_back({"load order barrier", k.load_order, std::string(K) + "235-273"});
  v.push_back({"scheduler pipeline (PipelineAsync<8>, group scheduler)", k.scheduler_pipeline, std::string(K) + "196-198"});
  v.push_back({"accumulator pipeline (PipelineUmmaAsync)", k.accumulator_pipeline, std::string(K) + "193"});
  v.push_back({"CLC throttle and TMEM dealloc barriers", k.small_pipelines, std::string(K) + "205-207"});
  v.push_back({"tensor-map-ready pipeline (async tensor-map update, >= 4.3.0)", k.tensormap_ready, std::string(K) + "270"});
  v.push_back({"scheduler responses", k.scheduler_response, std::string(K) + "210-221, 277"});
  v.push_back({"TMEM base pointer", k.tmem_base_ptr, std::string(K) + "278"});
  v.push_back({"tensor maps (A, B, SFA, SFB, C, D) x " + std::to_string(k.tensormap_copies), k.tensormaps,
               std::string(K) + "280-285"});
  v.push_back({"epilogue TensorStorage", k.epilogue_tensors, std::string(K) + "287-293"});
  v.push_back({"A: " + st + " stages", k.a, "sm100_blockscaled_mma_array_warpspecialized.hpp:287-290"});
  v.push_back({"B: " + st + " stages", k.b, "sm100_blockscaled_mma_array_warpspecialized.hpp:287-290"});
  v.push_back({"SFA: " + st + " stages", k.sfa, "sm100_blockscaled_mma_array_warpspecialized.hpp:287-290"});
  v.push_back({"SFB: " + st + " stages", k.sfb, "sm100_blockscaled_mma_array_warpspecialized.hpp:287-290"});
  v.push_back({"padding (to 128 after the head, to the epilogue's alignment)", k.tail_padding, std::string(K) + "228-296"});
  v.push_back({"GemmKernel::SharedStorageSize", k.total, std::string(K) + "296"});
  return v;
}

std::vector<Term> make_builder_terms(const Model& m) {
  if (is_sm100(m.config.cc)) return sm100_builder_terms(m);
  const auto& s = m.stage;
  const auto& b = m.builder;
  const FormatTraits t = traits(m.config.format);
  std::vector<Term> v;
  std::ostringstream a_name, b_name, sfa_name, sfb_name;
  a_name << "per stage: A " << m.config.tile_m << "x" << m.config.tile_k << " x " << t.a_bits << " bit";
  b_name << "per stage: B " << m.config.tile_n << "x" << m.config.tile_k << " x " << t.b_bits << " bit";
  sfa_name << "per stage: SFA " << m.config.tile_m << " rows x " << m.config.tile_k / t.sf_vector << " scales";
  const int n_sf = m.rules.sfb_padded_to_128 ? std::max(m.config.tile_n, 128) : (m.config.tile_n / 128) * 128;
  sfb_name << "per stage: SFB " << n_sf << " cols x " << m.config.tile_k / t.sf_vector << " scales";
  v.push_back({a_name.str(), s.a, "sm100_blockscaled_umma_builder.inl:83"});
  v.push_back({b_name.str(), s.b, "sm100_blockscaled_umma_builder.inl:84"});
  v.push_back({sfa_name.str(), s.sfa, "sm100_blockscaled_umma_builder.inl:79, sm120_blockscaled_mma_builder.inl:192"});
  v.push_back({sfb_name.str(), s.sfb, "sm100_blockscaled_umma_builder.inl:80, sm120_blockscaled_mma_builder.inl:202"});
  v.push_back({m.rules.stage_barrier_rounded ? "per stage: pipeline barriers (16, rounded to 128)"
                                             : "per stage: pipeline barriers",
               s.barrier, "sm100_blockscaled_umma_builder.inl:76"});
  v.push_back({"per stage: total", s.total(), "sm100_blockscaled_umma_builder.inl:82-85"});
  v.push_back({"builder capacity (sm120_smem_capacity_bytes)", b.capacity, "cutlass/arch/arch.h:45"});
  v.push_back({"builder capacity reduction (grouped, >= 4.4.2)", b.capacity_reduction,
               "sm120_blockscaled_mma_builder.inl:233-254"});
  v.push_back({"carveout = sizeof(CollectiveEpilogue::SharedStorage)", b.carveout,
               "moe_gemm_tma_ws_launcher.inl:500-502"});
  v.push_back({b.forced ? "stages (StageCount<n>)" : "stages = (capacity - reduction - carveout) / per stage", b.stages,
               "sm100_blockscaled_umma_builder.inl:87"});
  return v;
}

std::vector<Term> make_epilogue_terms(const Model& m) {
  if (is_sm100(m.config.cc)) return sm100_epilogue_term_list(m);
  const auto& e = m.epilogue;
  std::vector<Term> v;
  std::ostringstream c_name, d_name;
  c_name << "C tiles: " << e.stages_c << " x " << e.tile_m << "x" << e.tile_n << " bf16";
  d_name << "D tiles: " << (e.reuse_smem_c ? e.stages_c : e.stages_d) << " x " << e.tile_m << "x" << e.tile_n
         << " bf16" << (e.reuse_smem_c ? " (shares C's buffer)" : "");
  v.push_back({c_name.str(), e.smem_c, "sm120_builder.inl:94-103; sm90_epilogue_array_tma_warpspecialized.hpp:173-180"});
  v.push_back({d_name.str(), e.smem_d, "sm90_epilogue_array_tma_warpspecialized.hpp:177-180"});
  v.push_back({e.reuse_smem_c ? "C/D union" : "C + D", e.collective,
               "sm90_epilogue_array_tma_warpspecialized.hpp:201-214"});
  v.push_back({m.config.epilogue == Epilogue::finalize
                   ? (m.config.swap_ab ? "fusion: router scales row broadcast (float x N)"
                                       : "fusion: bias row broadcast (bf16 x N)")
                   : "fusion: LinearCombination (empty)",
               e.fusion, "sm90_visitor_load_tma_warpspecialized.hpp:988; sm90_visitor_scatter.hpp:440-510"});
  v.push_back({"alignment padding (swizzle alignment " + std::to_string(e.alignment) + ")",
               e.tensors - e.collective - e.fusion, "sm90_epilogue_array_tma_warpspecialized.hpp:186-214"});
  v.push_back({"epilogue TensorStorage", e.tensors, "sm90_epilogue_array_tma_warpspecialized.hpp:234-241"});
  v.push_back({"epilogue tensor maps (C + 2 x D)", e.tensormaps, "sm90_epilogue_array_tma_warpspecialized.hpp:243-246"});
  v.push_back({"epilogue load pipeline", e.pipeline, "sm90_epilogue_array_tma_warpspecialized.hpp:218, 248-249"});
  v.push_back({"rounding to alignment", e.total - e.tensors - e.tensormaps - e.pipeline,
               "sm90_epilogue_array_tma_warpspecialized.hpp:233"});
  v.push_back({"sizeof(CollectiveEpilogue::SharedStorage)", e.total, "sm90_epilogue_array_tma_warpspecialized.hpp:233-250"});
  return v;
}

std::vector<Term> make_kernel_terms(const Model& m) {
  if (is_sm100(m.config.cc)) return sm100_kernel_term_list(m);
  const auto& k = m.kernel;
  std::vector<Term> v;
  const std::string st = std::to_string(k.stages);
  v.push_back({"A: " + st + " stages", k.a, "sm120_blockscaled_mma_array_tma.hpp:271"});
  v.push_back({"B: " + st + " stages", k.b, "sm120_blockscaled_mma_array_tma.hpp:272"});
  v.push_back({"SFA: " + st + " stages", k.sfa, "sm120_blockscaled_mma_array_tma.hpp:273"});
  v.push_back({"SFB: " + st + " stages", k.sfb, "sm120_blockscaled_mma_array_tma.hpp:274"});
  v.push_back({"mainloop alignment padding (alignas(1024) A/B, struct rounded to 1024)", k.mainloop_padding,
               "sm120_blockscaled_mma_array_tma.hpp:270-275"});
  v.push_back({"epilogue TensorStorage", k.epilogue_tensors, "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:203"});
  v.push_back({"TensorStorage rounding to 1024", k.tensors_padding,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:198-204"});
  v.push_back({"scheduler pipeline (PipelineAsync<8>)", k.scheduler_pipeline,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:211"});
  v.push_back({"mainloop pipeline (PipelineTmaAsync<" + st + ">)", k.mainloop_pipeline,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:212"});
  v.push_back({"epilogue load pipeline", k.epilogue_pipeline, "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:213"});
  v.push_back({"load order barrier", k.load_order, "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:214"});
  v.push_back({"scheduler responses (8 x 16)", k.scheduler_response,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:217"});
  v.push_back({"mainloop tensor maps (A, B, SFA, SFB)", k.mainloop_tensormaps,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:223; sm120_blockscaled_mma_array_tma.hpp:277-282"});
  v.push_back({"epilogue tensor maps (C, 2 x D)", k.epilogue_tensormaps,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:224"});
  v.push_back({"padding to 128 and rounding to 1024", k.tail_padding,
               "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:197-228"});
  v.push_back({"sizeof(GemmKernel::SharedStorage)", k.total, "sm90_gemm_array_tma_warpspecialized_cooperative.hpp:228"});
  return v;
}

std::string explain(const Model& m, const std::string& arch, std::int64_t limit, Verdict v) {
  const auto& b = m.builder;
  const auto& k = m.kernel;
  std::ostringstream os;
  os << config_string(m.config) << ": ";
  if (b.forced) {
    os << "StageCount<" << b.stages << "> (explicit)";
  } else {
    os << "the builder has " << b.capacity;
    if (b.capacity_reduction) os << " - " << b.capacity_reduction;
    os << " - " << b.carveout << " (epilogue carveout) = " << b.available() << " bytes for stages of "
       << b.per_stage << " bytes";
  }
  os << "; the builder chose " << b.stages << " stage" << (b.stages == 1 ? "" : "s") << "; the kernel needs "
     << k.total << " bytes; the limit is " << limit << " (" << arch << ")";
  switch (v) {
    case Verdict::fits:
      os << ": fits with " << (limit - k.total) << " bytes to spare.";
      break;
    case Verdict::exceeds_limit:
      os << ": initialization fails (cudaFuncSetAttribute(MaxDynamicSharedMemorySize) is refused, "
            "\"Failed to initialize cutlass TMA WS grouped gemm. Error: Error Internal\").";
      break;
    case Verdict::too_few_stages:
      os << (is_sm100(m.config.cc)
                 ? ": does not compile (the builder static_asserts Stages > 0: \"Smem usage is too high.\")."
                 : ": does not compile (the mainloop static_asserts Stages >= 2).");
      break;
  }
  if (is_sm100(m.config.cc) && !b.forced) {
    os << " The builder counted " << b.believed_bytes() << " bytes (KernelSmemCarveout " << b.capacity_reduction
       << " + carveout " << b.carveout << " + " << b.stages << " x " << b.per_stage << "); the kernel lays out "
       << k.total << ": its bookkeeping head (pipelines " << k.pipelines << ", scheduler responses "
       << k.scheduler_response << ", " << k.tensormap_copies << " x " << (k.tensormaps / std::max(k.tensormap_copies, 1))
       << " bytes of tensor maps) and padding differ from the carveout's estimate.";
  } else if (!b.forced && k.total != b.believed_bytes()) {
    const auto& e = m.epilogue;
    const std::int64_t padding = k.mainloop_padding + k.tensors_padding + k.tail_padding;
    const std::int64_t extras = padding + k.pipelines + k.scheduler_response + k.mainloop_tensormaps;
    const std::int64_t epi_own = e.total - e.tensors - e.tensormaps;  // epilogue pipeline + rounding
    const std::int64_t allowances = b.capacity_reduction + b.stages * m.stage.barrier + epi_own;
    os << " The builder counted " << b.believed_bytes() << " bytes (";
    if (b.capacity_reduction) os << "reduction " << b.capacity_reduction << " + ";
    os << "carveout " << b.carveout << " + " << b.stages << " x " << b.per_stage << "); the kernel's SharedStorage "
       << (k.total > b.believed_bytes() ? "needs " : "needs only ") << k.total << ": it adds alignment padding and "
       << "rounding " << padding << ", pipelines " << k.pipelines << ", scheduler responses " << k.scheduler_response
       << " and the mainloop's tensor maps " << k.mainloop_tensormaps << " (" << extras
       << " in all) that the builder does not count, against " << allowances
       << " the builder set aside that the kernel does not spend that way (";
    if (b.capacity_reduction) os << "the " << b.capacity_reduction << "-byte reduction, ";
    os << "per-stage barriers " << b.stages * m.stage.barrier << ", the epilogue's own pipeline and rounding "
       << epi_own << ").";
  }
  return os.str();
}

void add_suggestions(Report& r) {
  const Config& c = r.model.config;
  const std::int64_t limit = r.limit;
  auto describe = [&](const Model& m) {
    std::ostringstream os;
    os << m.builder.stages << " stages, kernel " << m.kernel.total << " bytes";
    if (m.builder.stages < min_stages(m.config)) {
      os << " (does not compile)";
    } else if (m.kernel.total <= limit) {
      os << ", fits with " << (limit - m.kernel.total) << " to spare";
    } else {
      os << ", still " << (m.kernel.total - limit) << " over";
    }
    return os.str();
  };
  auto fits = [&](const Model& m) { return m.builder.stages >= min_stages(m.config) && m.kernel.total <= limit; };
  // A suggestion for an alternative configuration, as the model sees it.
  auto propose = [&](const char* kind, const Config& alt, std::string text) {
    const Model m = model(alt);
    Suggestion sg;
    sg.kind = kind;
    sg.config = alt;
    sg.stages = m.builder.stages;
    sg.smem_bytes = m.kernel.total;
    sg.fits = fits(m);
    sg.text = std::move(text) + describe(m);
    r.suggestions.push_back(sg);
  };

  // 1. An explicit lower stage count (StageCount<n> instead of StageCountAutoCarveout).
  {
    std::int64_t bytes = 0;
    const int below = std::max(r.model.builder.stages - 1, min_stages(c) - 1);
    const int s = r.model.builder.stages > min_stages(c) ? best_explicit_stages(c, below, limit, &bytes) : 0;
    Suggestion sg;
    sg.kind = "stages";
    if (s > 0) {
      sg.config = c;
      sg.config.forced_stages = s;
      sg.stages = s;
      sg.smem_bytes = bytes;
      sg.fits = true;
      std::ostringstream os;
      os << "StageCount<" << s << "> instead of StageCountAutoCarveout: kernel " << bytes << " bytes, fits with "
         << (limit - bytes) << " to spare";
      sg.text = os.str();
    } else {
      sg.config = c;
      sg.config.forced_stages = min_stages(c);
      sg.stages = min_stages(c);
      sg.smem_bytes = kernel_bytes_at(c, min_stages(c));
      sg.fits = false;
      std::ostringstream os;
      os << "no explicit stage count fits: even StageCount<" << min_stages(c) << "> needs " << sg.smem_bytes << " bytes";
      sg.text = os.str();
    }
    r.suggestions.push_back(sg);
  }
  // 2. Split finalize: epilogue NONE here, then a separate finalize (scatter/reduce) pass.
  if (c.epilogue == Epilogue::finalize) {
    Config n = c;
    n.epilogue = Epilogue::none;
    const std::int64_t freed_from = r.model.epilogue.total, freed_to = model(n).epilogue.total;
    std::ostringstream os;
    os << "split finalize (epilogue NONE + a separate finalize pass): the epilogue storage drops from " << freed_from
       << " to " << freed_to << " bytes (frees " << (freed_from - freed_to) << "); ";
    propose("split_finalize", n, os.str());
  }
  // 3. swap_ab.
  {
    Config s = c;
    s.swap_ab = !c.swap_ab;
    propose("swap_ab", s, std::string(s.swap_ab ? "swap_ab" : "without swap_ab") + ": ");
  }
  // 4. A smaller K tile.
  {
    Config s = c;
    s.tile_k = c.tile_k / 2;
    if (validate(s).ok()) propose("smaller_k", s, "K tile " + std::to_string(s.tile_k) + " (" + tile_string(s) + "): ");
  }
}

}  // namespace

std::string_view to_string(Format f) {
  switch (f) {
    case Format::nvfp4: return "nvfp4";
    case Format::mxfp8_mxfp4: return "mxfp8_mxfp4";
    case Format::mxfp4: return "mxfp4";
  }
  return "?";
}

std::string_view to_string(Epilogue e) { return e == Epilogue::finalize ? "finalize" : "none"; }

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::fits: return "fits";
    case Verdict::exceeds_limit: return "exceeds_limit";
    case Verdict::too_few_stages: return "too_few_stages";
  }
  return "?";
}

std::string to_string(Version v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch);
}

Format parse_format(std::string_view s) {
  const std::string l = lower(s);
  if (l == "nvfp4") return Format::nvfp4;
  if (l == "mxfp8_mxfp4" || l == "mxfp8xmxfp4" || l == "mxfp8-mxfp4" || l == "w4a8_mxfp") return Format::mxfp8_mxfp4;
  if (l == "mxfp4") return Format::mxfp4;
  throw Error("unknown format '" + std::string(s) + "' (known: nvfp4, mxfp8_mxfp4, mxfp4)");
}

Epilogue parse_epilogue(std::string_view s) {
  const std::string l = lower(s);
  if (l == "none" || l == "default") return Epilogue::none;
  if (l == "finalize") return Epilogue::finalize;
  throw Error("unknown epilogue '" + std::string(s) + "' (known: none, finalize)");
}

Version parse_version(std::string_view s) {
  Version v;
  int* parts[3] = {&v.major, &v.minor, &v.patch};
  int idx = 0;
  bool digit_seen = false;
  for (char ch : s) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      *parts[idx] = *parts[idx] * 10 + (ch - '0');
      digit_seen = true;
      FP4MOE_CHECK(*parts[idx] < 1000, "CUTLASS version '" << s << "' is not major.minor[.patch]");
    } else if (ch == '.' && digit_seen && idx < 2) {
      ++idx;
      digit_seen = false;
    } else {
      throw Error("CUTLASS version '" + std::string(s) + "' is not major.minor[.patch]");
    }
  }
  FP4MOE_CHECK(digit_seen && idx >= 1, "CUTLASS version '" << s << "' is not major.minor[.patch]");
  return v;
}

void check(const Config& c) {
  const Validation v = validate(c);
  const FormatTraits t = traits(c.format);
  switch (v.problem) {
    case Problem::ok: return;
    case Problem::arch:
      throw Error("the CUTLASS block-scaled grouped GEMM model covers sm_100, sm_120 and sm_121; got sm_" +
                  std::to_string(c.cc) + (c.cc == 103 ? " (sm_103's launcher triples CTA_K and is not modelled)" : ""));
    case Problem::cluster:
      throw Error(is_sm100(c.cc) ? "cluster " + std::to_string(c.cluster_m) +
                                       "x1x1: TensorRT-LLM's sm_100 launcher takes clusters 1x1x1 (1-SM MMA) and 2x1x1 (2-SM MMA)"
                                 : "cluster " + std::to_string(c.cluster_m) + "x1x1: the sm_120 grouped GEMM runs 1x1x1 only");
    case Problem::format:
      throw Error("format " + std::string(to_string(c.format)) + " on sm_100 is not modelled (NVFP4 is)");
    case Problem::version:
      throw Error("CUTLASS " + to_string(c.version) + " has no sm_120 block-scaled grouped GEMM (needs >= 3.9)");
    case Problem::tile_m:
      if (is_sm100(c.cc))
        throw Error("tile M = " + std::to_string(c.tile_m) + " with a " + std::to_string(c.cluster_m) +
                    "x1x1 cluster does not compile: CUTLASS's sm_100 builder static_asserts \"Invalid TileShape_M.\" "
                    "(sm100_common.inl:" + (c.cluster_m == 1 ? "833: the 1-SM block-scaled MMA takes M = 128"
                                                                : "893: the 2-SM block-scaled MMA takes M = 256") +
                    "; the MMA tile's M is CTA_M x cluster M)");
      throw Error("tile M = " + std::to_string(c.tile_m) +
                  " is not a multiple of 128 (the sm_120 cooperative grouped kernel tiles M by 128 and needs M >= 128)");
    case Problem::tile_n:
      if (is_sm100(c.cc))
        throw Error("tile N = " + std::to_string(c.tile_n) + " does not compile on sm_100: \"Invalid TileShape_N.\" "
                    "(sm100_common.inl:837, 897; the mainloop: \"Cta N should be one of 64/128/192/256\")");
      throw Error("tile N = " + std::to_string(c.tile_n) +
                  " is not 32, 64 or a multiple of 128 (sm_120 builder: N >= 32, the MMA permutation and the epilogue "
                  "tile are 32 wide, and the SFB smem layout is made of 128-column blocks)");
    case Problem::tile_k_mma:
      throw Error("tile K = " + std::to_string(c.tile_k) + " is not a multiple of the MMA K tile " +
                  std::to_string(v.multiple) + " for " + std::string(to_string(c.format)));
    case Problem::tile_k_scale:
      throw Error("tile K = " + std::to_string(c.tile_k) + " is not a multiple of 4 scale blocks of " +
                  std::to_string(t.sf_vector) + " (= " + std::to_string(v.multiple) + ") for " +
                  std::string(to_string(c.format)));
    case Problem::forced_stages:
      throw Error("stage count " + std::to_string(c.forced_stages) + " is below the mainloop's minimum of " +
                  std::to_string(min_stages(c)));
  }
  throw Error("invalid configuration " + config_string(c));
}

Report analyze(const Config& c) {
  check(c);
  return analyze(c, arch_for(c.cc).smem_optin_per_block);
}

Report analyze(const Config& c, std::int64_t limit_bytes) {
  check(c);
  FP4MOE_CHECK(limit_bytes > 0, "shared memory limit " << limit_bytes << " is not positive");
  Report r;
  r.model = model(c);
  const Arch* a = find_arch_by_cc(c.cc);
  r.arch = a ? std::string(a->name) : "sm_" + std::to_string(c.cc);
  r.limit = limit_bytes;
  r.verdict = verdict_of(r.model, limit_bytes);
  r.fits = r.verdict == Verdict::fits;
  r.headroom = limit_bytes - r.model.kernel.total;
  r.explanation = explain(r.model, r.arch, limit_bytes, r.verdict);
  r.builder_terms = make_builder_terms(r.model);
  r.epilogue_terms = make_epilogue_terms(r.model);
  r.kernel_terms = make_kernel_terms(r.model);
  if (!r.fits) add_suggestions(r);
  return r;
}

std::vector<TileCandidate> trtllm_tile_candidates(int cc, Format f) {
  if (is_sm100(cc)) {
    // FlashInfer's sm_100 generator for e2m1 (generate_kernels.py): CTA_M 128, CTA_N 64/128/256, CTA_K 256,
    // clusters 1x1x1 and 2x1x1; the MMA tile's M is CTA_M x cluster M (L:245-246).
    FP4MOE_CHECK(f == Format::nvfp4, "TRT-LLM tile candidates for sm_100 are modelled for NVFP4; got " << to_string(f));
    std::vector<TileCandidate> v;
    for (int cm : {1, 2})
      for (int n : {64, 128, 256}) v.push_back({128 * cm, n, 256, cm == 1 ? "CtaShape128xNx256B 1x1x1" : "CtaShape128xNx256B 2x1x1", cm});
    return v;
  }
  FP4MOE_CHECK(is_sm120_family(cc), "TRT-LLM tile candidates are modelled for sm_100 and sm_120/sm_121; got sm_" << cc);
  // The enum's K is in bytes of the activation type (KtileBytes = K * 8 / bits(T)).
  if (f == Format::mxfp8_mxfp4) {
    return {{128, 128, 128, "CtaShape128x128x128B"},
            {128, 32, 128, "CtaShape128x32x128B"},
            {128, 64, 128, "CtaShape128x64x128B"}};
  }
  // NVFP4 (and, by extension, MXFP4, which TRT-LLM does not dispatch on sm_120).
  return {{128, 128, 256, "CtaShape128x128x128B"}, {128, 128, 128, "CtaShape128x128x64B"},
          {256, 128, 128, "CtaShape256x128x64B"},  {128, 256, 128, "CtaShape128x256x64B"},
          {128, 32, 256, "CtaShape128x32x128B"},   {128, 32, 128, "CtaShape128x32x64B"},
          {128, 64, 256, "CtaShape128x64x128B"},   {128, 64, 128, "CtaShape128x64x64B"}};
}

std::vector<Report> sweep(int cc, Format f, Version v) {
  std::vector<Report> out;
  for (const TileCandidate& t : trtllm_tile_candidates(cc, f)) {
    for (Epilogue e : {Epilogue::none, Epilogue::finalize}) {
      for (bool swap : {false, true}) {
        Config c;
        c.cc = cc;
        c.format = f;
        c.tile_m = t.m;
        c.tile_n = t.n;
        c.tile_k = t.k;
        c.cluster_m = t.cluster_m;
        c.epilogue = e;
        c.swap_ab = swap;
        c.version = v;
        out.push_back(analyze(c));
      }
    }
  }
  return out;
}

}  // namespace fp4moe::plan::cutlass
