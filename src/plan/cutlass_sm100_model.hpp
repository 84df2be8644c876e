// The sm_100 (B200) side of the CUTLASS block-scaled grouped GEMM model: the
// 1-SM and 2-SM NVFP4 kernels TensorRT-LLM's MoE launcher builds (FlashInfer's
// sm_100 generator: CTA_M 128, CTA_N 64/128/256, CTA_K 256, clusters 1x1x1 and
// 2x1x1). Included by cutlass_blockscaled_model.hpp; the same Model, terms
// with their sources. docs/planner.md works the configurations through.
//
// Sources (lines of CUTLASS 4.5.0 as FlashInfer pins it, commit b46b16d; the
// 4.2.0 lines where they differ are in docs/planner.md):
//   MB cutlass/gemm/collective/builders/sm100_blockscaled_umma_builder.inl
//   PC cutlass/gemm/collective/builders/sm100_pipeline_carveout.inl
//   SC cutlass/gemm/collective/builders/sm100_common.inl
//   BL cutlass/detail/sm100_blockscaled_layout.hpp
//   ML cutlass/gemm/collective/sm100_blockscaled_mma_array_warpspecialized.hpp
//   EB cutlass/epilogue/collective/builders/sm100_builder.inl
//   EC cutlass/epilogue/collective/sm100_epilogue_array_tma_warpspecialized.hpp
//   K  cutlass/gemm/kernel/sm100_gemm_array_tma_warpspecialized.hpp
//   L  TensorRT-LLM cutlass_kernels/moe_gemm/launchers/moe_gemm_tma_ws_launcher.inl (FlashInfer 0.7.4's copy)
//   F  TensorRT-LLM cutlass_extensions/epilogue/fusion/sm90_visitor_scatter.hpp
#pragma once

namespace fp4moe::plan::cutlass {

inline constexpr std::int64_t kSm100Capacity = 232448;  // cutlass/arch/arch.h:44, SC:69

constexpr Validation validate_sm100(const Config& c) {
  if (c.version < Version{3, 9, 0}) return {Problem::version, c.version.major * 100 + c.version.minor * 10 + c.version.patch, 0};
  if (c.format != Format::nvfp4) return {Problem::format, static_cast<int>(c.format), 0};
  if (c.cluster_m != 1 && c.cluster_m != 2) return {Problem::cluster, c.cluster_m, 2};
  // SC:833 (1-SM: M == 128) and SC:893 (2-SM: M == 256): "Invalid TileShape_M."
  if (c.tile_m != 128 * c.cluster_m) return {Problem::tile_m, c.tile_m, 128 * c.cluster_m};
  // SC:837, 897 "Invalid TileShape_N."; ML:129-131 "Cta N should be one of 64/128/192/256"
  if (!(c.tile_n == 64 || c.tile_n == 128 || c.tile_n == 192 || c.tile_n == 256)) return {Problem::tile_n, c.tile_n, 64};
  // The MXF4NVF4 MMA's K is 64 (4 scale blocks of 16): ML:126 "TileShape should be evenly divided by TiledMma"
  if (c.tile_k <= 0 || c.tile_k % 64 != 0) return {Problem::tile_k_mma, c.tile_k, 64};
  if (c.forced_stages < 0) return {Problem::forced_stages, c.forced_stages, 1};
  return {};
}

// Per CTA: the 2-SM MMA splits M and the B tile over the pair (MB:203, 219);
// the B scales cover the whole MMA N, padded to 128 columns (BL:180).
constexpr StageTerms sm100_stage_terms(const Config& c, const VersionRules& r) {
  const std::int64_t mc = c.tile_m / c.cluster_m, nb = c.tile_n / c.cluster_m, k = c.tile_k;
  StageTerms s;
  s.a = mc * k / 2;
  s.b = nb * k / 2;
  s.sfa = mc * (k / 16);                      // BL:142
  s.sfb = round_up(c.tile_n, 128) * (k / 16);  // BL:180
  s.barrier = r.stage_barrier_rounded ? round_up(kBarrierPairBytes, 128) : kBarrierPairBytes;  // MB:76
  return s;
}

// sizeof(CollectiveEpilogue::SharedStorage): C is void (DisableSource), D bf16.
constexpr EpilogueTerms sm100_epilogue_terms(const Config& c) {
  EpilogueTerms e;
  e.tile_m = 128;                        // EB:1007 min(CTA M, 32 x 4 warps)
  e.tile_n = c.tile_n == 256 ? 64 : 32;  // L:426-428 passes 128x64 for N = 256; else EB:1018-1046 gives 32
  e.subtiles = c.tile_n / e.tile_n;      // EB:1233 (CTA M = 128)
  e.stages_d = std::min(e.subtiles, 2);  // EB:1113
  e.stages_c = std::min(e.subtiles, 4);  // EB:1114
  e.reuse_smem_c = false;                // EB:1109: bits(C) > 8 is false for void C
  e.smem_c = 0;
  e.smem_d = std::int64_t{e.stages_d} * e.tile_m * e.tile_n * 2;  // EC:161-167
  e.collective = e.smem_d;                                          // EC:189-192
  // F:449-461, 481: the bias (bf16, no swap) or the router scales (float, swap) as a row broadcast
  e.fusion = c.epilogue == Epilogue::finalize ? std::int64_t{c.tile_n} * (c.swap_ab ? 4 : 2) : 1;
  // EC:175 alignment_for_swizzle: a 32-wide bf16 row is SW64 (512); column-major or 64-wide is SW128 (1024)
  e.alignment = (c.swap_ab || e.tile_n == 64) ? 1024 : 512;
  e.tensors = round_up(e.collective + e.fusion, e.alignment);  // EC:212-220
  e.tensormaps = 2 * kTmaDescriptorBytes;                      // EC:222-225: C and D
  e.pipeline = kBarrierPairBytes * e.stages_c;                 // EC:201, 228 (allocated though C is void)
  e.total = round_up(e.tensors + e.tensormaps + e.pipeline, e.alignment);
  return e;
}

// KernelSmemCarveout (MB:255 -> PC:73-82): what the builder sets aside for the kernel's bookkeeping.
constexpr std::int64_t sm100_builder_reduction(const Config& c, const VersionRules& r) {
  const std::int64_t acc = c.tile_n == 256 ? 1 : 2;  // MB:241 AccumulatorPipelineStageCount
  const std::int64_t responses = r.async_tensormap_update ? 2 : 1;
  return 16 * acc                                    // PC:47 PipelineUmmaAsync
         + 128 * responses                           // PC:50-51 PipelineCLCFetchAsync<8>
         + 16                                        // PC:53 OrderedSequenceBarrier
         + 8 * 16 * responses                        // PC:55 CLC responses
         + 128                                       // PC:57 CLC throttle PipelineAsync<8>
         + 8                                         // PC:59 TMEM dealloc barrier
         + 8 * 4                                     // PC:61 TMEM base pointers
         + 4 * kTmaDescriptorBytes * (r.async_tensormap_update ? 5 : 1)  // PC:63-65
         + (r.async_tensormap_update ? 128 : 0);     // PC:68-70 tensor-map-ready pipeline
}

// sizeof(GemmKernel::SharedStorage) (K:228-296): the bookkeeping head, then the
// epilogue's and the mainloop's tensors at the epilogue's alignment.
constexpr KernelTerms sm100_kernel_terms(const Config& c, const StageTerms& s, const EpilogueTerms& e, int stages,
                                         const VersionRules& r) {
  KernelTerms k;
  k.stages = stages;
  k.a = s.a * stages;  // ML:287-290
  k.b = s.b * stages;
  k.sfa = s.sfa * stages;
  k.sfb = s.sfb * stages;
  k.mainloop_tensors = k.a + k.b + k.sfa + k.sfb;  // aligned_struct<128>, no padding in practice
  k.epilogue_tensors = e.tensors;
  k.tensors = k.mainloop_tensors + k.epilogue_tensors;  // K:287-293
  k.mainloop_pipeline = kBarrierPairBytes * stages;     // ML:301 PipelineTmaUmmaAsync<Stages>
  k.epilogue_pipeline = kBarrierPairBytes * e.stages_c;
  k.load_order = kBarrierPairBytes;
  k.scheduler_pipeline = 128;                               // K:196-198 PipelineAsync<8> (group scheduler)
  k.accumulator_pipeline = 16 * (c.tile_n == 256 ? 1 : 2);  // K:193
  k.small_pipelines = 16 + 16;                              // K:205-207, tmem dealloc
  k.tensormap_ready = r.async_tensormap_update ? 128 : 0;   // K:270
  k.pipelines = k.mainloop_pipeline + k.epilogue_pipeline + k.load_order + k.scheduler_pipeline +
                k.accumulator_pipeline + k.small_pipelines + k.tensormap_ready;  // K:235-273, members alignas(16)
  // K:210-221, 277: WorkTileInfo[8] (16 B), or [2][8] of 20 B with the tensor-map update info
  k.scheduler_response = r.async_tensormap_update ? 2 * 8 * 20 : 8 * 16;
  k.tmem_base_ptr = 4;  // K:278
  k.tensormap_copies = r.async_tensormap_update ? 5 : 1;
  k.mainloop_tensormaps = 4 * kTmaDescriptorBytes * k.tensormap_copies;  // K:280-285: 768 per copy
  k.epilogue_tensormaps = e.tensormaps * k.tensormap_copies;
  k.tensormaps = k.mainloop_tensormaps + k.epilogue_tensormaps;
  const std::int64_t head = round_up(round_up(k.pipelines + k.scheduler_response + k.tmem_base_ptr, 128) + k.tensormaps,
                                     e.alignment);
  k.total = round_up(head + k.tensors, e.alignment);  // K:296 SharedStorageSize
  k.tail_padding = k.total - k.pipelines - k.scheduler_response - k.tmem_base_ptr - k.tensormaps - k.tensors;
  return k;
}

constexpr Model sm100_model(const Config& c) {
  Model m;
  m.config = c;
  m.rules = rules_for(c.version);
  m.stage = sm100_stage_terms(c, m.rules);
  m.epilogue = sm100_epilogue_terms(c);
  m.builder.capacity = kSm100Capacity;
  m.builder.capacity_reduction = sm100_builder_reduction(c, m.rules);
  m.builder.carveout = m.epilogue.total;  // L:500-502 StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>
  m.builder.per_stage = m.stage.total();
  m.builder.decide(c.forced_stages);  // MB:87
  m.kernel = sm100_kernel_terms(c, m.stage, m.epilogue, m.builder.stages, m.rules);
  return m;
}

}  // namespace fp4moe::plan::cutlass
