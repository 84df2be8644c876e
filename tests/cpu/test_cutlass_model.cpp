// The model of CUTLASS's block-scaled grouped GEMM (plan/cutlass_blockscaled_model.hpp).
//
// Where the expectations come from:
//  [pin]  sizeof of CUTLASS's own types, built like TensorRT-LLM's launcher does
//         (tests/cutlass/test_cutlass_sizeof.cu), compiled against CUTLASS 4.5.0 as
//         vendored by FlashInfer 0.7.2 (flashinfer/data/cutlass/include) with nvcc 13.0.
//  [4.2]  the same, compiled against the installed CUTLASS 4.2.0 headers.
//  [issue] the five failing cases users report (FlashInfer's pin, sm_120, NVFP4, bf16 output).
//  [src]  arithmetic read off the CUTLASS source, cited inline.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "fp4moe/error.hpp"
#include "plan/cutlass_blockscaled_model.hpp"
#include "test_util.hpp"

namespace fp4moe::plan::cutlass {
namespace {

Config cfg(int m, int n, int k, Epilogue e, bool swap = false, Format f = Format::nvfp4, Version v = kFlashInferPin) {
  Config c;
  c.cc = 120;
  c.format = f;
  c.tile_m = m;
  c.tile_n = n;
  c.tile_k = k;
  c.epilogue = e;
  c.swap_ab = swap;
  c.version = v;
  return c;
}

constexpr Epilogue kNone = Epilogue::none;
constexpr Epilogue kFin = Epilogue::finalize;

// The model is usable at compile time: the field incident, checked by the compiler.
static_assert(model(Config{120, Format::nvfp4, 128, 256, 128, Epilogue::finalize, false, OutputType::bf16,
                           kFlashInferPin, 0})
                  .builder.stages == 3);
static_assert(model(Config{120, Format::nvfp4, 128, 256, 128, Epilogue::finalize, false, OutputType::bf16,
                           kFlashInferPin, 0})
                  .kernel.total == 102400);
static_assert(!validate(Config{120, Format::nvfp4, 64, 128, 128, Epilogue::none, false, OutputType::bf16,
                               kFlashInferPin, 0})
                   .ok());

// ---- the five failing cases users report [issue], each also [pin] ---------------------------

TEST(CutlassModel, Finalize128x256x128NoSwapDoesNotFit) {
  const Report r = analyze(cfg(128, 256, 128, kFin));
  EXPECT_EQ(r.model.builder.stages, 3);
  EXPECT_EQ(r.model.kernel.total, 102400);
  EXPECT_EQ(r.limit, 101376);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.verdict, Verdict::exceeds_limit);
  EXPECT_EQ(r.headroom, -1024);
  EXPECT_NE(r.explanation.find("the builder chose 3 stages; the kernel needs 102400 bytes; the limit is 101376"),
            std::string::npos)
      << r.explanation;
  EXPECT_NE(r.explanation.find("initialization fails"), std::string::npos) << r.explanation;
}

TEST(CutlassModel, Finalize256x128x128NoSwapDoesNotFit) {
  const Report r = analyze(cfg(256, 128, 128, kFin));
  EXPECT_EQ(r.model.builder.stages, 3);
  EXPECT_EQ(r.model.kernel.total, 102400);
  EXPECT_FALSE(r.fits);
}

TEST(CutlassModel, Finalize128x128x128NoSwapFits) {
  const Report r = analyze(cfg(128, 128, 128, kFin));
  EXPECT_EQ(r.model.builder.stages, 4);
  EXPECT_EQ(r.model.kernel.total, 93184);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.headroom, 101376 - 93184);
  EXPECT_TRUE(r.suggestions.empty());
}

TEST(CutlassModel, None128x32x128NoSwapFitsExactly) {
  const Report r = analyze(cfg(128, 32, 128, kNone));
  EXPECT_EQ(r.model.builder.stages, 7);
  EXPECT_EQ(r.model.kernel.total, 101376);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.headroom, 0);
}

TEST(CutlassModel, Finalize128x256x128SwapFits) {
  const Report r = analyze(cfg(128, 256, 128, kFin, true));
  EXPECT_EQ(r.model.builder.stages, 2);
  EXPECT_EQ(r.model.kernel.total, 74752);
  EXPECT_TRUE(r.fits);
}

// ---- every term of the headline case [pin], worked by hand in docs/planner.md ----

TEST(CutlassModel, HeadlineTermsMatchCutlassTypes) {
  const Model m = model(cfg(128, 256, 128, kFin));
  // per stage: sm100_blockscaled_umma_builder.inl:76-85
  EXPECT_EQ(m.stage.a, 128 * 128 / 2);
  EXPECT_EQ(m.stage.b, 256 * 128 / 2);
  EXPECT_EQ(m.stage.sfa, 128 * 128 / 16);
  EXPECT_EQ(m.stage.sfb, 256 * 128 / 16);
  EXPECT_EQ(m.stage.barrier, 128);
  EXPECT_EQ(m.stage.total(), 27776);
  // builder: 101376 - 432 - 17408 = 83536; 83536 / 27776 = 3
  EXPECT_EQ(m.builder.capacity, 101376);
  EXPECT_EQ(m.builder.capacity_reduction, 432);
  EXPECT_EQ(m.builder.carveout, 17408);
  // epilogue: sizeof(CollectiveEpilogue::SharedStorage) and its parts
  EXPECT_EQ(m.epilogue.subtiles, 16);
  EXPECT_EQ(m.epilogue.stages_c, 2);
  EXPECT_EQ(m.epilogue.stages_d, 2);
  EXPECT_FALSE(m.epilogue.reuse_smem_c);
  EXPECT_EQ(m.epilogue.smem_c, 8192);
  EXPECT_EQ(m.epilogue.smem_d, 8192);
  EXPECT_EQ(m.epilogue.fusion, 512);  // bias row broadcast, 256 bf16
  EXPECT_EQ(m.epilogue.alignment, 512);
  EXPECT_EQ(m.epilogue.tensors, 16896);
  EXPECT_EQ(m.epilogue.tensormaps, 384);
  EXPECT_EQ(m.epilogue.pipeline, 32);
  EXPECT_EQ(m.epilogue.total, 17408);
  // kernel: sizeof(GemmKernel::SharedStorage) and its parts
  EXPECT_EQ(m.kernel.mainloop_tensors, 82944);
  EXPECT_EQ(m.kernel.mainloop_padding, 0);
  EXPECT_EQ(m.kernel.tensors, 100352);
  EXPECT_EQ(m.kernel.tensors_padding, 512);
  EXPECT_EQ(m.kernel.pipelines, 224);
  EXPECT_EQ(m.kernel.scheduler_response, 128);
  EXPECT_EQ(m.kernel.tensormaps, 896);
  EXPECT_EQ(m.kernel.tail_padding, 800);
  EXPECT_EQ(m.kernel.total, 102400);
}

// ---- more configurations, each compiled against CUTLASS [pin] ---------------------------

TEST(CutlassModel, MoreNvfp4TilesAtThePin) {
  struct Case {
    int m, n, k;
    Epilogue e;
    bool swap;
    int stages;
    std::int64_t epilogue, kernel;
  };
  const Case cases[] = {
      {128, 128, 128, kNone, false, 4, 13312, 89088},  {128, 128, 256, kFin, false, 2, 17408, 93184},
      {128, 128, 256, kNone, false, 2, 13312, 89088},  {128, 256, 128, kNone, false, 3, 13312, 98304},
      {128, 256, 128, kNone, true, 3, 14336, 98304},   {128, 32, 128, kNone, false, 7, 13312, 101376},
  };
  for (const Case& c : cases) {
    const Model m = model(cfg(c.m, c.n, c.k, c.e, c.swap));
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    EXPECT_EQ(m.builder.stages, c.stages);
    EXPECT_EQ(m.epilogue.total, c.epilogue);
    EXPECT_EQ(m.kernel.total, c.kernel);
  }
}

TEST(CutlassModel, Mxfp8ActivationsTakeOneBytePerFp4Element) {
  // [pin] MMA.MXF8F6F4 holds both operands as uint8_t in smem (sm120_blockscaled_mma_builder.inl:144-145),
  // so the FP4 weights cost as much as the FP8 activations; ue8m0 scales per 32.
  const Model m = model(cfg(128, 128, 128, kFin, false, Format::mxfp8_mxfp4));
  EXPECT_EQ(m.stage.a, 128 * 128);
  EXPECT_EQ(m.stage.b, 128 * 128);
  EXPECT_EQ(m.stage.sfa, 128 * 128 / 32);
  EXPECT_EQ(m.stage.sfb, 128 * 128 / 32);
  EXPECT_EQ(m.stage.total(), 33920);
  EXPECT_EQ(m.builder.stages, 2);
  EXPECT_EQ(m.kernel.total, 87040);
}

TEST(CutlassModel, Mxfp4KeepsFourBitsInSharedMemory) {
  // [pin] mx_float4_t x mx_float4_t, K-major both: MMA.MXF4 (sm1xx_common.inl:778-782), 4-bit smem.
  const Model m = model(cfg(128, 128, 256, kNone, true, Format::mxfp4));
  EXPECT_EQ(m.stage.a, 128 * 256 / 2);
  EXPECT_EQ(m.stage.sfa, 128 * 256 / 32);
  EXPECT_EQ(m.builder.stages, 2);
  EXPECT_EQ(m.epilogue.total, 14336);  // column-major C/D with swap_ab: SW128, 1024-byte alignment
  EXPECT_EQ(m.kernel.total, 84992);
}

TEST(CutlassModel, TooFewStagesIsACompileError) {
  // [pin] and [4.2]: these fail to compile with "Specialization requires Stages set to value 2 or
  // more." (sm120_blockscaled_mma_array_tma.hpp:225): 50816- and 67712-byte stages leave room for one.
  for (const Config& c : {cfg(128, 256, 128, kNone, false, Format::mxfp8_mxfp4),
                          cfg(256, 128, 128, kNone, true, Format::mxfp8_mxfp4),
                          cfg(128, 128, 256, kNone, false, Format::mxfp8_mxfp4)}) {
    const Report r = analyze(c);
    EXPECT_EQ(r.model.builder.stages, 1);
    EXPECT_EQ(r.verdict, Verdict::too_few_stages);
    EXPECT_FALSE(r.fits);
    EXPECT_NE(r.explanation.find("does not compile"), std::string::npos) << r.explanation;
  }
}

// ---- CUTLASS versions -------------------------------------------------------------------

TEST(CutlassModel, InstalledHeadersMatchTheirOwnTypes) {
  // [4.2] Before 4.4.0: no SFB padding (N/128 blocks), an unrounded 16-byte stage barrier, no
  // grouped capacity reduction; an empty SFB array still occupies a byte.
  const Model m = model(cfg(128, 32, 128, kNone, false, Format::nvfp4, kInstalledHeaders));
  EXPECT_EQ(m.stage.sfb, 0);
  EXPECT_EQ(m.stage.barrier, 16);
  EXPECT_EQ(m.builder.capacity_reduction, 0);
  EXPECT_EQ(m.builder.stages, 7);
  EXPECT_EQ(m.kernel.total, 95232);
  // [4.2] the headline case is the same at 4.2.0.
  const Model h = model(cfg(128, 256, 128, kFin, false, Format::nvfp4, kInstalledHeaders));
  EXPECT_EQ(h.builder.stages, 3);
  EXPECT_EQ(h.kernel.total, 102400);
  // [4.2]
  EXPECT_EQ(model(cfg(128, 128, 128, kFin, false, Format::mxfp8_mxfp4, kInstalledHeaders)).kernel.total, 87040);
  EXPECT_EQ(model(cfg(128, 256, 128, kFin, true, Format::nvfp4, kInstalledHeaders)).kernel.total, 74752);
}

TEST(CutlassModel, GroupedCapacityReductionFrom442) {
  // [src] sm120_blockscaled_mma_builder.inl:233-254 (4.4.2 on): 101376 - PipelineAsync<8> storage (128)
  // - 2 TmaDescriptor (256) - PipelineAsync<3> storage (48).
  EXPECT_EQ(model(cfg(128, 128, 128, kNone, false, Format::nvfp4, Version{4, 4, 1})).builder.capacity_reduction, 0);
  EXPECT_EQ(model(cfg(128, 128, 128, kNone, false, Format::nvfp4, Version{4, 4, 2})).builder.capacity_reduction, 432);
  // [src] Where the 432 bytes cost a stage and so save the kernel: 128x256x64 FINALIZE. At 4.4.1
  // (SFB padding and the rounded barrier already in) the builder takes 6 stages of 13952 bytes
  // (101376 - 17408 = 83968 -> 6) and the kernel needs 102400; at 4.4.2 it takes 5 and needs 89088
  // ([pin] at 4.5.0: 5 stages, 89088).
  const Model a = model(cfg(128, 256, 64, kFin, false, Format::nvfp4, Version{4, 4, 1}));
  const Model b = model(cfg(128, 256, 64, kFin, false, Format::nvfp4, Version{4, 4, 2}));
  EXPECT_EQ(a.stage.total(), 13952);
  EXPECT_EQ(b.stage.total(), 13952);
  EXPECT_EQ(a.builder.stages, 6);
  EXPECT_EQ(a.kernel.total, 102400);
  EXPECT_EQ(b.builder.stages, 5);
  EXPECT_EQ(b.kernel.total, 89088);
  // 128x256x128 FINALIZE still fails after the 4.4.2 change (cutlass#3144, TRT-LLM PR 12899: the
  // CtaShape128x256x64B tactic still needs 102400 bytes on sm_121).
  EXPECT_EQ(model(cfg(128, 256, 128, kFin, false, Format::nvfp4, Version{4, 4, 2})).kernel.total, 102400);
}

TEST(CutlassModel, VersionRulesThresholds) {
  EXPECT_FALSE(rules_for(Version{4, 3, 5}).sfb_padded_to_128);
  EXPECT_TRUE(rules_for(Version{4, 4, 0}).sfb_padded_to_128);
  EXPECT_TRUE(rules_for(Version{4, 2, 2}).stage_barrier_rounded);  // 4.2.2 release note backport
  EXPECT_FALSE(rules_for(Version{4, 2, 1}).stage_barrier_rounded);
  EXPECT_FALSE(rules_for(Version{4, 4, 1}).grouped_capacity_carve);
  EXPECT_TRUE(rules_for(Version{4, 5, 0}).grouped_capacity_carve);
}

// ---- suggestions --------------------------------------------------------------------------

TEST(CutlassModel, SuggestionsForTheHeadlineCarryNumbers) {
  const Report r = analyze(cfg(128, 256, 128, kFin));
  std::set<std::string> kinds;
  for (const Suggestion& s : r.suggestions) kinds.insert(s.kind);
  EXPECT_EQ(kinds, (std::set<std::string>{"stages", "split_finalize", "swap_ab", "smaller_k"}));
  for (const Suggestion& s : r.suggestions) {
    SCOPED_TRACE(s.text);
    EXPECT_FALSE(s.text.empty());
    if (s.kind == "stages") {
      EXPECT_EQ(s.stages, 2);
      EXPECT_EQ(s.smem_bytes, 74752);  // StageCount<2>
      EXPECT_TRUE(s.fits);
    } else if (s.kind == "split_finalize") {
      EXPECT_EQ(s.config.epilogue, kNone);
      EXPECT_EQ(s.stages, 3);
      EXPECT_EQ(s.smem_bytes, 98304);  // [pin] 128x256x128 NONE
      EXPECT_TRUE(s.fits);
      EXPECT_NE(s.text.find("frees 4096"), std::string::npos);  // 17408 -> 13312
    } else if (s.kind == "swap_ab") {
      EXPECT_EQ(s.smem_bytes, 74752);
      EXPECT_TRUE(s.fits);
    } else if (s.kind == "smaller_k") {
      EXPECT_EQ(s.config.tile_k, 64);
      EXPECT_EQ(s.smem_bytes, kernel_bytes_at(s.config, s.stages));
    }
  }
}

TEST(CutlassModel, ExplicitStagesMatchForcedModel) {
  const Config c = cfg(128, 256, 128, kFin);
  for (int s = 2; s <= 4; ++s) {
    Config f = c;
    f.forced_stages = s;
    const Model m = model(f);
    EXPECT_TRUE(m.builder.forced);
    EXPECT_EQ(m.builder.stages, s);
    EXPECT_EQ(m.kernel.total, kernel_bytes_at(c, s));
  }
  EXPECT_EQ(kernel_bytes_at(c, 3), 102400);
}

TEST(CutlassModel, TermsAddUpToTheTotals) {
  for (const Report& r : sweep(120, Format::nvfp4)) {
    SCOPED_TRACE(r.explanation);
    std::int64_t kernel_sum = 0;
    for (std::size_t i = 0; i + 1 < r.kernel_terms.size(); ++i) kernel_sum += r.kernel_terms[i].bytes;
    EXPECT_EQ(kernel_sum, r.model.kernel.total);
    EXPECT_EQ(r.kernel_terms.back().bytes, r.model.kernel.total);
    const auto& e = r.epilogue_terms;
    // tensors + tensor maps + pipeline + rounding = total
    std::int64_t epi = 0;
    for (const Term& t : e)
      if (t.name == "epilogue TensorStorage" || t.name.rfind("epilogue tensor maps", 0) == 0 ||
          t.name == "epilogue load pipeline" || t.name == "rounding to alignment")
        epi += t.bytes;
    EXPECT_EQ(epi, r.model.epilogue.total);
    for (const Term& t : r.kernel_terms) EXPECT_FALSE(t.source.empty()) << t.name;
  }
}

// ---- the sweep over TRT-LLM's candidates --------------------------------------------

TEST(CutlassModel, SweepCoversEveryCandidateEpilogueAndSwap) {
  const auto nv = sweep(120, Format::nvfp4);
  EXPECT_EQ(nv.size(), trtllm_tile_candidates(120, Format::nvfp4).size() * 4);
  EXPECT_EQ(trtllm_tile_candidates(120, Format::nvfp4).size(), 8u);
  const auto mx = sweep(121, Format::mxfp8_mxfp4);
  EXPECT_EQ(mx.size(), 3u * 4u);
  int not_fitting = 0;
  for (const Report& r : nv) {
    if (!r.fits) {
      ++not_fitting;
      EXPECT_FALSE(r.suggestions.empty());
    }
  }
  EXPECT_GE(not_fitting, 2);  // at least 128x256x128 and 256x128x128 with FINALIZE, no swap
}

// ---- impossible requests are errors naming the value -----------------------------------

void expect_error_naming(const Config& c, const std::string& needle) {
  try {
    analyze(c);
    FAIL() << "accepted " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CutlassModel, InvalidTilesAreErrors) {
  expect_error_naming(cfg(64, 128, 128, kNone), "M = 64");
  expect_error_naming(cfg(192, 128, 128, kNone), "M = 192");
  expect_error_naming(cfg(128, 16, 128, kNone), "N = 16");
  expect_error_naming(cfg(128, 48, 128, kNone), "N = 48");
  expect_error_naming(cfg(128, 96, 128, kNone), "N = 96");    // [pin] SFB layout of 2056 bytes, not 2048
  expect_error_naming(cfg(128, 160, 64, kNone), "N = 160");   // [pin] "Shape Divisibility Condition"
  expect_error_naming(cfg(128, 128, 96, kNone), "K = 96");  // not a multiple of the MMA K (64)
  // K = 64 is a multiple of MXF8F6F4's MMA K (32) but not of 4 scale blocks of 32.
  expect_error_naming(cfg(128, 128, 64, kNone, false, Format::mxfp8_mxfp4), "K = 64");
  Config arch = cfg(128, 128, 128, kNone);
  arch.cc = 90;
  expect_error_naming(arch, "sm_90");
  Config st = cfg(128, 128, 128, kNone);
  st.forced_stages = 1;
  expect_error_naming(st, "stage count 1");
}

TEST(CutlassModel, ParsersAcceptTheCliSpellingsAndRejectTheRest) {
  EXPECT_EQ(parse_format("NVFP4"), Format::nvfp4);
  EXPECT_EQ(parse_format("mxfp8xmxfp4"), Format::mxfp8_mxfp4);
  EXPECT_EQ(parse_format("mxfp4"), Format::mxfp4);
  EXPECT_THROW(parse_format("fp8"), Error);
  EXPECT_EQ(parse_epilogue("finalize"), Epilogue::finalize);
  EXPECT_THROW(parse_epilogue("gelu"), Error);
  EXPECT_EQ(parse_version("4.4"), (Version{4, 4, 0}));
  EXPECT_EQ(parse_version("4.4.2"), (Version{4, 4, 2}));
  EXPECT_THROW(parse_version("4"), Error);
  EXPECT_THROW(parse_version("v4.4"), Error);
  EXPECT_EQ(to_string(Version{4, 5, 0}), "4.5.0");
}

}  // namespace
}  // namespace fp4moe::plan::cutlass

// ---- sm_100 (plan/cutlass_sm100_model.hpp) ----
// [pin] and [4.2] as above, from tests/cutlass/test_cutlass_sm100_sizeof.cu compiled
// against each version's headers (CUTLASS 4.5.0 as FlashInfer pins it, commit b46b16d).
namespace fp4moe::plan::cutlass {
namespace {

Config sm100(int m, int n, int k, int cluster, Epilogue e, bool swap = false, Version v = kFlashInferPin) {
  Config c = cfg(m, n, k, e, swap, Format::nvfp4, v);
  c.cc = 100;
  c.cluster_m = cluster;
  return c;
}

static_assert(model(Config{100, Format::nvfp4, 256, 128, 256, Epilogue::finalize, false, OutputType::bf16,
                           kFlashInferPin, 0, 2})
                  .kernel.total == 222720);

TEST(CutlassSm100, TheIssuesConfigurationsExactly) {
  const Report a = analyze(sm100(128, 128, 256, 1, kNone));
  EXPECT_EQ(a.model.builder.stages, 5);
  EXPECT_EQ(a.model.kernel.total, 206336);
  EXPECT_EQ(a.limit, 232448);
  EXPECT_TRUE(a.fits);
  EXPECT_EQ(analyze(sm100(128, 128, 256, 1, kNone, true)).model.kernel.total, 206848);
  const Report c = analyze(sm100(256, 128, 256, 2, kFin));
  EXPECT_EQ(c.model.builder.stages, 7);
  EXPECT_EQ(c.model.kernel.total, 222720);
  // the terms: per stage per CTA, the builder's carveout for the kernel, the epilogue
  EXPECT_EQ(c.model.stage.a, 128 * 256 / 2);
  EXPECT_EQ(c.model.stage.b, 64 * 256 / 2) << "the 2-SM MMA splits the B tile over the pair";
  EXPECT_EQ(c.model.stage.sfb, 128 * 256 / 16) << "the B scales cover the whole MMA N";
  EXPECT_EQ(c.model.builder.capacity_reduction, 3416);
  EXPECT_EQ(c.model.epilogue.total, 17408);
  EXPECT_EQ(c.model.epilogue.fusion, 256) << "the bias row broadcast, bf16 x N";
}

TEST(CutlassSm100, InstalledHeadersVersion) {
  // [4.2]: the same stages; a smaller bookkeeping head (one tensor-map copy, one response array)
  EXPECT_EQ(model(sm100(128, 128, 256, 1, kNone, false, kInstalledHeaders)).kernel.total, 202752);
  EXPECT_EQ(model(sm100(128, 128, 256, 1, kNone, true, kInstalledHeaders)).kernel.total, 203776);
  const Model m = model(sm100(256, 128, 256, 2, kFin, false, kInstalledHeaders));
  EXPECT_EQ(m.builder.stages, 7);
  EXPECT_EQ(m.kernel.total, 219136);
  EXPECT_EQ(m.builder.capacity_reduction, 984);
  // where the versions part: 2-SM N = 256 drops a stage at 4.5.0
  EXPECT_EQ(model(sm100(256, 256, 256, 2, kFin, true, kInstalledHeaders)).builder.stages, 5);
  EXPECT_EQ(model(sm100(256, 256, 256, 2, kFin, true)).builder.stages, 4);
}

TEST(CutlassSm100, WhatCutlassCannotBuildIsRefusedWithItsAssertion) {
  std::string e = test::error_of([] { analyze(sm100(256, 128, 256, 1, kNone)); });
  EXPECT_NE(e.find("\"Invalid TileShape_M.\""), std::string::npos) << e;
  EXPECT_NE(e.find("sm100_common.inl:833"), std::string::npos) << e;
  e = test::error_of([] { analyze(sm100(128, 128, 256, 2, kNone)); });
  EXPECT_NE(e.find("\"Invalid TileShape_M.\""), std::string::npos) << e;
  EXPECT_NE(e.find("2-SM block-scaled MMA takes M = 256"), std::string::npos) << e;
  e = test::error_of([] { analyze(sm100(128, 96, 256, 1, kNone)); });
  EXPECT_NE(e.find("\"Invalid TileShape_N.\""), std::string::npos) << e;
  e = test::error_of([] { analyze(sm100(128, 128, 96, 1, kNone)); });
  EXPECT_NE(e.find("tile K = 96"), std::string::npos) << e;
  e = test::error_of([] { analyze(sm100(128, 128, 256, 4, kNone)); });
  EXPECT_NE(e.find("cluster 4x1x1"), std::string::npos) << e;
  Config mx = sm100(128, 128, 256, 1, kNone);
  mx.format = Format::mxfp4;
  EXPECT_NE(test::error_of([&] { analyze(mx); }).find("not modelled"), std::string::npos);
  Config s103 = sm100(128, 128, 256, 1, kNone);
  s103.cc = 103;
  EXPECT_NE(test::error_of([&] { analyze(s103); }).find("sm_103"), std::string::npos);
  Config s120 = cfg(128, 128, 128, kNone);
  s120.cluster_m = 2;
  EXPECT_NE(test::error_of([&] { analyze(s120); }).find("1x1x1 only"), std::string::npos);
}

TEST(CutlassSm100, SweepCoversFlashInfersGenerator) {
  const std::vector<Report> all = sweep(100, Format::nvfp4);
  EXPECT_EQ(all.size(), 6u * 2 * 2);  // CTA_N 64/128/256 x clusters 1, 2; x epilogue x swap
  std::set<std::string> seen;
  for (const Report& r : all) {
    const Config& c = r.model.config;
    EXPECT_EQ(c.tile_m, 128 * c.cluster_m);
    EXPECT_EQ(c.tile_k, 256);
    EXPECT_TRUE(r.fits) << c.tile_m << "x" << c.tile_n << " cluster " << c.cluster_m;
    EXPECT_LE(r.model.kernel.total, 232448);
    EXPECT_GE(r.model.builder.stages, 1);
    EXPECT_FALSE(r.kernel_terms.empty());
    EXPECT_EQ(r.kernel_terms.back().bytes, r.model.kernel.total);
    seen.insert(std::to_string(c.tile_m) + "x" + std::to_string(c.tile_n));
  }
  EXPECT_EQ(seen.size(), 6u);
}

}  // namespace
}  // namespace fp4moe::plan::cutlass
