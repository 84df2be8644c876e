// A model of the shared memory of CUTLASS's block-scaled grouped GEMM as
// TensorRT-LLM's MoE launcher (and FlashInfer, which vendors it) builds it:
// what CUTLASS's collective builder decides (StageCountAutoCarveout) and what
// the kernel's SharedStorage then really needs, term by term.
//
// The arithmetic is constexpr so that the runtime planner and compile-time
// checks (tests/cutlass compares it with sizeof of CUTLASS's own types) use the
// same code. Every term names the CUTLASS / TensorRT-LLM source it comes from;
// docs/planner.md works one configuration through by hand.
//
// Sources (line numbers are those of CUTLASS 4.5.0 as vendored by FlashInfer
// 0.7.2, its current pin, unless stated):
//   B  cutlass/gemm/collective/builders/sm120_blockscaled_mma_builder.inl
//   S  cutlass/gemm/collective/builders/sm100_blockscaled_umma_builder.inl:60-88
//      (sm100_compute_stage_count_or_override_blockscaled, used by the sm120 builder)
//   C  cutlass/gemm/collective/sm120_blockscaled_mma_array_tma.hpp:268-286 (mainloop SharedStorage)
//   E  cutlass/epilogue/collective/builders/sm120_builder.inl:78-114, 145-217
//   EC cutlass/epilogue/collective/sm90_epilogue_array_tma_warpspecialized.hpp:150-250
//   K  cutlass/gemm/kernel/sm90_gemm_array_tma_warpspecialized_cooperative.hpp:194-228
//   L  TensorRT-LLM cutlass_kernels/moe_gemm/launchers/moe_gemm_tma_ws_launcher.inl:245-566
//   F  TensorRT-LLM cutlass_extensions/epilogue/fusion/sm90_visitor_scatter.hpp:430-510
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4moe::plan::cutlass {

// ---- inputs --------------------------------------------------------------------

enum class Format : std::uint8_t {
  nvfp4,        // e2m1 x e2m1, ue4m3 scale per 16 (nv_float4_t)
  mxfp8_mxfp4,  // e4m3 activations x e2m1 weights, ue8m0 per 32; MMA.MXF8F6F4, both held as 1 byte/element in smem
  mxfp4,        // e2m1 x e2m1, ue8m0 per 32 (mx_float4_t), MMA.MXF4
};

enum class Epilogue : std::uint8_t {
  none,      // LinearCombination, D = bf16 (L:437-448)
  finalize,  // TRT-LLM scatter fusion: router scale and bias broadcast, red.add into the final output (L:451-467, F)
};

enum class OutputType : std::uint8_t { bf16 };

struct Version {
  int major = 0;
  int minor = 0;
  int patch = 0;
  constexpr auto operator<=>(const Version&) const = default;
};

// FlashInfer 0.7.2 (PyPI, current) vendors CUTLASS 4.5.0 (flashinfer/data/cutlass/include/cutlass/version.h).
inline constexpr Version kFlashInferPin{4, 5, 0};
// The headers this project installs (nvidia-cutlass 4.2.0.0, cmake/Dependencies.cmake).
inline constexpr Version kInstalledHeaders{4, 2, 0};

struct Config {
  int cc = 120;  // 120 or 121 (sm_120 family), or 100 (sm_100, cutlass_sm100_model.hpp); 103 is not modelled
  Format format = Format::nvfp4;
  int tile_m = 128;  // CUTLASS MMA tile, after swap_ab: M runs over the A operand
  int tile_n = 128;
  int tile_k = 128;  // in elements
  Epilogue epilogue = Epilogue::none;
  bool swap_ab = false;  // A = weights, B = activations, C/D column-major (L:430-436, 545-548)
  OutputType output = OutputType::bf16;
  Version version = kFlashInferPin;
  int forced_stages = 0;  // 0: StageCountAutoCarveout (what TRT-LLM uses); n > 0: StageCount<n>
  // sm_100: the cluster's M (1: the 1-SM MMA; 2: the 2-SM MMA over a 2x1x1
  // cluster). tile_m is the MMA tile handed to the builder, 128 x cluster_m
  // (the launcher doubles CTA_M for 2-SM, L:242-246). sm_120: 1 only.
  int cluster_m = 1;
};

// What changed between CUTLASS versions, as far as shared memory goes. Verified
// against the 4.2.0 headers (installed) and the 4.5.0 headers (FlashInfer's pin);
// the thresholds in between come from CUTLASS's changelog (see docs).
struct VersionRules {
  bool sfb_padded_to_128 = false;   // B:202 sSFBTileShape_N = max(N, 128) (4.4.0: "missing SMEM alignment in SM120 scale factors")
  bool sf_alignas16 = false;        // C:273-274 alignas(16) smem_SFA / smem_SFB (same change)
  bool stage_barrier_rounded = false;  // S:76 round_up(sizeof(PipelineTmaUmmaAsync<1>::SharedStorage), 128) (4.4.0; 4.2.2 backport)
  bool grouped_capacity_carve = false;  // B:233-254 subtract scheduler pipeline, 2 tensormaps, tensormap-ready pipeline (4.4.2)
  // sm_100 kernels update tensor maps asynchronously from 4.3.0: 5 tensor-map
  // copies, 2 scheduler response arrays, a tensor-map-ready pipeline.
  bool async_tensormap_update = false;
};

constexpr VersionRules rules_for(Version v) {
  VersionRules r;
  const bool ge440 = v >= Version{4, 4, 0};
  r.sfb_padded_to_128 = ge440;
  r.sf_alignas16 = ge440;
  r.stage_barrier_rounded = ge440 || (v.major == 4 && v.minor == 2 && v.patch >= 2);
  r.grouped_capacity_carve = v >= Version{4, 4, 2};
  r.async_tensormap_update = v >= Version{4, 3, 0};
  return r;
}

// ---- validity -------------------------------------------------------------------

enum class Problem : std::uint8_t {
  ok,
  arch,             // not an sm_120-family target
  tile_m,           // M must be a positive multiple of 128
  tile_n,           // N must be 32, 64 or a multiple of 128
  tile_k_mma,       // K must be a multiple of the MMA permutation K (64, or 32 for MXF8F6F4)
  tile_k_scale,     // K must be a multiple of 4 scale blocks (Blk_SF = 4): 64 for NVFP4, 128 for MX
  forced_stages,    // StageCount<n> with n < 2
  version,          // a CUTLASS version without the sm_120 grouped block-scaled kernel (< 3.9)
  cluster,          // sm_100: cluster M must be 1 or 2; sm_120: 1
  format,           // sm_100: only NVFP4 is modelled
};

struct Validation {
  Problem problem = Problem::ok;
  int value = 0;     // the offending value
  int multiple = 0;  // what it must be a multiple of (or the minimum)
  constexpr bool ok() const { return problem == Problem::ok; }
};

struct FormatTraits {
  int a_bits;        // bits per element of A in shared memory (B:144 SmemAllocTypeA)
  int b_bits;
  int sf_vector;     // elements per scale factor
  int mma_k;         // B:112 PermTileK
  bool mxf8f6f4;     // B:109 UseMxf8f6f4
};

constexpr FormatTraits traits(Format f) {
  switch (f) {
    case Format::nvfp4: return {4, 4, 16, 64, false};
    case Format::mxfp8_mxfp4: return {8, 8, 32, 32, true};  // uint8_t smem for both operands (B:144-145)
    case Format::mxfp4: return {4, 4, 32, 64, false};
  }
  return {4, 4, 16, 64, false};
}

constexpr bool is_sm120_family(int cc) { return cc == 120 || cc == 121; }
constexpr bool is_sm100(int cc) { return cc == 100; }

constexpr Validation validate_sm100(const Config& c);  // cutlass_sm100_model.hpp

constexpr Validation validate(const Config& c) {
  if (is_sm100(c.cc)) return validate_sm100(c);
  if (!is_sm120_family(c.cc)) return {Problem::arch, c.cc, 0};
  if (c.cluster_m != 1) return {Problem::cluster, c.cluster_m, 1};
  if (c.version < Version{3, 9, 0}) return {Problem::version, c.version.major * 100 + c.version.minor * 10 + c.version.patch, 0};
  const FormatTraits t = traits(c.format);
  // K (kernel:442) requires M >= 128 for the cooperative kernel; B:110/192 tile M by 128.
  if (c.tile_m <= 0 || c.tile_m % 128 != 0) return {Problem::tile_m, c.tile_m, 128};
  // B:101 static_assert(N >= 32); B:111 PermTileN spans 32; E:194 epilogue tile N = 32; and the
  // SFB smem layout is built from whole 128-column blocks (B:202-207): N must divide 128 or be a
  // multiple of it (N = 96 gives a 2056-byte SFB layout, N = 160 fails "Shape Divisibility Condition").
  if (c.tile_n < 32 || !(c.tile_n == 32 || c.tile_n == 64 || c.tile_n % 128 == 0)) return {Problem::tile_n, c.tile_n, 32};
  if (c.tile_k <= 0 || c.tile_k % t.mma_k != 0) return {Problem::tile_k_mma, c.tile_k, t.mma_k};
  // B:195 sSF_shapeK = K / SFVectorSize / Blk_SF, Blk_SF = 4 (sm100_blockscaled_layout.hpp)
  if (c.tile_k % (4 * t.sf_vector) != 0) return {Problem::tile_k_scale, c.tile_k, 4 * t.sf_vector};
  if (c.forced_stages < 0 || c.forced_stages == 1) return {Problem::forced_stages, c.forced_stages, 2};
  return {};
}

// ---- outputs --------------------------------------------------------------------

constexpr std::int64_t round_up(std::int64_t x, std::int64_t a) { return (x + a - 1) / a * a; }

// One pipeline stage as CUTLASS's builder counts it (S:70-88).
struct StageTerms {
  std::int64_t a = 0;        // bits_to_bytes(a_bits * M * K)
  std::int64_t b = 0;        // bits_to_bytes(b_bits * N * K)
  std::int64_t sfa = 0;      // size(filter_zeros(SmemLayoutAtomSFA)) = M * K / vec
  std::int64_t sfb = 0;      // N padded to 128 from 4.4.0: max(N,128) * K / vec
  std::int64_t barrier = 0;  // PipelineTmaUmmaAsync<1>::SharedStorage: 16, rounded to 128 from 4.4.0
  constexpr std::int64_t total() const { return a + b + sfa + sfb + barrier; }
};

// sizeof(CollectiveEpilogue::SharedStorage) and its parts (EC:201-250).
struct EpilogueTerms {
  int tile_m = 64, tile_n = 32;  // E:194 EpilogueTileAuto on sm_120
  int subtiles = 0;              // (M/64) * (N/32)
  int stages_c = 0, stages_d = 0;
  bool reuse_smem_c = false;  // C and D share one buffer (union)
  std::int64_t smem_c = 0;     // bf16 C tiles (TRT-LLM passes C = bf16 on sm_120, L:411)
  std::int64_t smem_d = 0;     // bf16 D tiles (the aux/scatter staging tile for finalize)
  std::int64_t collective = 0; // struct {C; D} or union {C, D}
  std::int64_t fusion = 0;     // FusionCallbacks::SharedStorage: row-broadcast vector, or 1 byte for an empty tree
  std::int64_t alignment = 0;  // alignment_for_swizzle of the C/D smem layout: 512 (SW64) or 1024 (SW128)
  std::int64_t tensors = 0;    // sizeof(TensorStorage) = round_up(collective + fusion, alignment)
  std::int64_t tensormaps = 0; // C + NumEpilogueWarpGroups(2) D TMA descriptors, 128 B each
  std::int64_t pipeline = 0;   // PipelineTransactionAsync<StagesC>: 16 B per stage
  std::int64_t total = 0;      // sizeof(SharedStorage) = round_up(tensors + tensormaps + pipeline, alignment)
};

struct BuilderTerms {
  std::int64_t capacity = 0;            // cutlass::arch::sm120_smem_capacity_bytes = 101376
  std::int64_t capacity_reduction = 0;  // 432 for grouped kernels from 4.4.2 (128 + 2*128 + 48)
  std::int64_t carveout = 0;            // StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>
  std::int64_t per_stage = 0;
  int stages = 0;                       // (capacity - reduction - carveout) / per_stage, or StageCount<n>
  bool forced = false;
  constexpr std::int64_t available() const { return capacity - capacity_reduction - carveout; }
  // StageCount<forced>, or StageCountAutoCarveout: what is available over the bytes per stage.
  constexpr void decide(int forced_stages) {
    forced = forced_stages > 0;
    const std::int64_t avail = available();
    stages = forced ? forced_stages : avail > 0 ? static_cast<int>(avail / per_stage) : 0;
  }
  // What the builder believes the kernel uses: carveout + stages * per_stage (+ its reduction).
  constexpr std::int64_t believed_bytes() const { return capacity_reduction + carveout + stages * per_stage; }
};

// sizeof(GemmKernel::SharedStorage) and its parts (K:197-228, C:268-286).
struct KernelTerms {
  int stages = 0;
  std::int64_t a = 0, b = 0, sfa = 0, sfb = 0;  // stages * per-stage operand bytes
  std::int64_t mainloop_tensors = 0;    // sizeof(CollectiveMainloop::TensorStorage): alignas(1024) A, B; rounded to 1024
  std::int64_t mainloop_padding = 0;    // mainloop_tensors - (a + b + sfa + sfb)
  std::int64_t epilogue_tensors = 0;    // sizeof(CollectiveEpilogue::TensorStorage)
  std::int64_t tensors = 0;             // sizeof(SharedStorage::TensorStorage), rounded to 1024
  std::int64_t tensors_padding = 0;     // tensors - mainloop_tensors - epilogue_tensors
  std::int64_t scheduler_pipeline = 0;  // GroupScheduler PipelineAsync<8>: 128
  std::int64_t mainloop_pipeline = 0;   // PipelineTmaAsync<Stages>: 16 per stage
  std::int64_t epilogue_pipeline = 0;   // PipelineTransactionAsync<StagesC>: 16 per stage
  std::int64_t load_order = 0;          // OrderedSequenceBarrier<1,2>: 16
  std::int64_t pipelines = 0;           // sizeof(SharedStorage::PipelineStorage)
  std::int64_t scheduler_response = 0;  // 8 x 16-byte responses
  std::int64_t mainloop_tensormaps = 0; // A, B, SFA, SFB descriptors: 4 x 128
  std::int64_t epilogue_tensormaps = 0; // C + 2 D descriptors: 3 x 128
  std::int64_t tensormaps = 0;
  std::int64_t tail_padding = 0;        // rounding of the whole struct to its 1024-byte alignment
  std::int64_t total = 0;
  // sm_100 only (cutlass_sm100_model.hpp)
  std::int64_t accumulator_pipeline = 0;  // PipelineUmmaAsync<1 or 2>: 16 per stage
  std::int64_t small_pipelines = 0;       // CLC throttle (PipelineEmpty) + TMEM dealloc barrier: 16 + 16
  std::int64_t tensormap_ready = 0;       // PipelineAsync<8>: 128 (from 4.3.0)
  std::int64_t tmem_base_ptr = 0;         // 4
  int tensormap_copies = 0;               // 1, or 5 from 4.3.0 (async update)
};

struct Model {
  Config config;
  VersionRules rules;
  StageTerms stage;
  EpilogueTerms epilogue;
  BuilderTerms builder;
  KernelTerms kernel;
};

// ---- the arithmetic ---------------------------------------------------------------

inline constexpr std::int64_t kSm120BuilderCapacity = 101376;  // cutlass/arch/arch.h:45
inline constexpr std::int64_t kTmaDescriptorBytes = 128;       // sizeof(cute::TmaDescriptor)
inline constexpr std::int64_t kBarrierPairBytes = 16;          // full + empty ClusterBarrier, 8 B each

constexpr StageTerms stage_terms(const Config& c, const VersionRules& r) {
  const FormatTraits t = traits(c.format);
  StageTerms s;
  const std::int64_t m = c.tile_m, n = c.tile_n, k = c.tile_k;
  s.a = (t.a_bits * m * k + 7) / 8;
  s.b = (t.b_bits * n * k + 7) / 8;
  // B:192 sSFA_shapeM = M / Blk_MN (128) blocks of 128 rows; filter_zeros drops the
  // stride-0 vector mode, leaving one byte per row per scale vector.
  s.sfa = (m / 128) * 128 * (k / t.sf_vector);
  const std::int64_t n_sf = r.sfb_padded_to_128 ? std::max<std::int64_t>(n, 128) : (n / 128) * 128;
  s.sfb = n_sf * (k / t.sf_vector);
  s.barrier = r.stage_barrier_rounded ? round_up(kBarrierPairBytes, 128) : kBarrierPairBytes;
  return s;
}

constexpr EpilogueTerms epilogue_terms(const Config& c) {
  EpilogueTerms e;
  e.tile_m = 64;
  e.tile_n = 32;
  e.subtiles = (c.tile_m / e.tile_m) * (c.tile_n / e.tile_n);
  const bool finalize = c.epilogue == Epilogue::finalize;
  // E:94 ReuseSmem = bits(C) == bits(D) && bits(D) > 8; finalize passes D = void (bits 0).
  const bool reuse = !finalize;
  e.stages_d = std::min(e.subtiles, 2);                                     // E:99
  e.stages_c = reuse ? std::max(std::min(e.subtiles, 2), e.stages_d + 1) : e.stages_d;  // E:102
  e.reuse_smem_c = reuse;  // EC:161 ReuseSmemC_ and is_destination_supported
  const std::int64_t tile_bytes = std::int64_t{e.tile_m} * e.tile_n * 2;  // bf16
  e.smem_c = tile_bytes * e.stages_c;
  e.smem_d = tile_bytes * (e.reuse_smem_c ? e.stages_c : e.stages_d);
  // C/D row-major (no swap): the contiguous extent is N = 32 bf16 = 64 B -> SW64 atom, 512-byte
  // alignment; column-major (swap_ab, L:430) : M = 64 bf16 = 128 B -> SW128, 1024 bytes.
  e.alignment = c.swap_ab ? 1024 : 512;
  e.collective = e.reuse_smem_c ? std::max(e.smem_c, e.smem_d) : e.smem_c + e.smem_d;
  if (finalize) {
    // F:430-510: no swap -> bias is a Sm90RowBroadcast<bf16> (CTA_N x 2 B in smem), the router
    // scale a Sm90ColBroadcast (no smem); swap -> the scale is a Sm90RowBroadcast<float>
    // (CTA_N x 4 B) and the bias a column broadcast. The scatter node has empty SharedStorage.
    e.fusion = std::int64_t{c.tile_n} * (c.swap_ab ? 4 : 2);
  } else {
    e.fusion = 1;  // Sm90LinearCombination: a tuple of empty structs, sizeof 1
  }
  e.tensors = round_up(e.collective + e.fusion, e.alignment);
  e.tensormaps = 3 * kTmaDescriptorBytes;
  e.pipeline = kBarrierPairBytes * e.stages_c;
  e.total = round_up(e.tensors + e.tensormaps + e.pipeline, e.alignment);
  return e;
}

constexpr KernelTerms kernel_terms(const StageTerms& s, const EpilogueTerms& e, int stages,
                                   const VersionRules& r) {
  KernelTerms k;
  k.stages = stages;
  k.a = s.a * stages;
  k.b = s.b * stages;
  k.sfa = s.sfa * stages;
  k.sfb = s.sfb * stages;
  const std::int64_t sf_align = r.sf_alignas16 ? 16 : 1;
  const std::int64_t off_b = round_up(k.a, 1024);
  const std::int64_t off_sfa = round_up(off_b + k.b, sf_align);
  const std::int64_t off_sfb = round_up(off_sfa + k.sfa, sf_align);
  // An empty smem array (SFB for N < 128 before 4.4.0) still occupies one byte.
  k.mainloop_tensors = round_up(off_sfb + std::max<std::int64_t>(k.sfb, 1), 1024);
  k.mainloop_padding = k.mainloop_tensors - (k.a + k.b + k.sfa + k.sfb);
  k.epilogue_tensors = e.tensors;
  k.tensors = round_up(k.mainloop_tensors + k.epilogue_tensors, 1024);
  k.tensors_padding = k.tensors - k.mainloop_tensors - k.epilogue_tensors;
  k.scheduler_pipeline = 8 * kBarrierPairBytes;
  k.mainloop_pipeline = stages * kBarrierPairBytes;
  k.epilogue_pipeline = e.stages_c * kBarrierPairBytes;
  k.load_order = kBarrierPairBytes;
  k.pipelines = round_up(k.scheduler_pipeline, 16) + round_up(k.mainloop_pipeline, 16) +
                round_up(k.epilogue_pipeline, 16) + round_up(k.load_order, 16);
  k.scheduler_response = 8 * 16;
  k.mainloop_tensormaps = 4 * kTmaDescriptorBytes;
  k.epilogue_tensormaps = e.tensormaps;
  k.tensormaps = round_up(k.mainloop_tensormaps, 128) + round_up(k.epilogue_tensormaps, 128);
  const std::int64_t off_resp = round_up(k.tensors + k.pipelines, 16);
  const std::int64_t off_tmaps = round_up(off_resp + k.scheduler_response, 128);
  k.total = round_up(off_tmaps + k.tensormaps, 1024);
  k.tail_padding = k.total - k.tensors - k.pipelines - k.scheduler_response - k.tensormaps;
  return k;
}

constexpr Model sm100_model(const Config& c);  // cutlass_sm100_model.hpp

// Precondition: validate(c).ok(). Throws nothing; evaluates at compile time.
constexpr Model model(const Config& c) {
  if (is_sm100(c.cc)) return sm100_model(c);
  Model m;
  m.config = c;
  m.rules = rules_for(c.version);
  m.stage = stage_terms(c, m.rules);
  m.epilogue = epilogue_terms(c);
  m.builder.capacity = kSm120BuilderCapacity;
  // B:233-254: PipelineAsyncSharedStorage<8> (128) + 2 TmaDescriptor (256) + PipelineAsync<3> (48)
  m.builder.capacity_reduction = m.rules.grouped_capacity_carve ? 128 + 2 * kTmaDescriptorBytes + 48 : 0;
  m.builder.carveout = m.epilogue.total;
  m.builder.per_stage = m.stage.total();
  m.builder.decide(c.forced_stages);
  m.kernel = kernel_terms(m.stage, m.epilogue, m.builder.stages, m.rules);
  return m;
}

// The kernel's SharedStorage at an explicit stage count (StageCount<stages>).
constexpr std::int64_t kernel_bytes_at(const Config& c, int stages) {
  Config f = c;
  f.forced_stages = stages;
  return model(f).kernel.total;
}

// The sm_120 collective static_asserts Stages >= 2 (C:225); the sm_100 builder only Stages > 0 (MB:264).
inline constexpr int kMinStages = 2;
constexpr int min_stages(const Config& c) { return is_sm100(c.cc) ? 1 : kMinStages; }

// ---- verdicts and reports (runtime, cutlass_blockscaled_model.cpp) ----------------------

enum class Verdict : std::uint8_t {
  fits,              // the kernel's SharedStorage fits the opt-in limit
  exceeds_limit,     // compiles, but GemmUniversalAdapter::initialize fails (cudaFuncSetAttribute)
  too_few_stages,    // the builder chose < 2 stages: the collective's static_assert fails to compile
};

struct Term {
  std::string name;
  std::int64_t bytes = 0;
  std::string source;  // file:line in CUTLASS / TensorRT-LLM
};

struct Suggestion {
  std::string kind;  // "stages", "split_finalize", "swap_ab", "smaller_k"
  std::string text;  // one line with the numbers
  Config config;     // the configuration it proposes
  int stages = 0;
  std::int64_t smem_bytes = 0;
  bool fits = false;
};

struct Report {
  Model model;
  std::string arch;             // "sm_120"
  std::int64_t limit = 0;       // opt-in shared memory per block of the target (plan/arch.hpp)
  Verdict verdict = Verdict::fits;
  bool fits = false;
  std::int64_t headroom = 0;    // limit - kernel bytes (negative when it does not fit)
  std::string explanation;
  std::vector<Term> builder_terms;  // per stage, capacity, carveout
  std::vector<Term> epilogue_terms; // the carveout's parts
  std::vector<Term> kernel_terms;   // sizeof(GemmKernel::SharedStorage)'s parts
  std::vector<Suggestion> suggestions;
};

// Throws fp4moe::Error naming the bad value when validate(c) fails.
void check(const Config& c);
// Limit = the opt-in shared memory per block of cc from plan/arch.hpp.
Report analyze(const Config& c);
Report analyze(const Config& c, std::int64_t limit_bytes);

struct TileCandidate {
  int m, n, k;                   // the MMA tile handed to the builder (sm_100 2-SM: M = 2 x CTA_M)
  std::string_view trtllm_name;  // CutlassTileConfigSM120 / SM100 enum name (sm_120: K in bytes of the activation)
  int cluster_m = 1;
};
// The tiles TensorRT-LLM/FlashInfer's heuristic offers for sm_120 grouped GEMM after its
// own pruning (cutlass_heuristic.cpp:642-673, dispatch moe_gemm_template_dispatch_tma_ws.h:522-529).
std::vector<TileCandidate> trtllm_tile_candidates(int cc, Format f);

// Every candidate tile x {none, finalize} x {no swap, swap}, analysed.
std::vector<Report> sweep(int cc, Format f, Version v = kFlashInferPin);

std::string_view to_string(Format f);
std::string_view to_string(Epilogue e);
std::string_view to_string(Verdict v);
std::string to_string(Version v);
Format parse_format(std::string_view s);      // "nvfp4", "mxfp8_mxfp4" / "mxfp8xmxfp4", "mxfp4"
Epilogue parse_epilogue(std::string_view s);  // "none", "finalize"
Version parse_version(std::string_view s);    // "4.4", "4.4.2"

}  // namespace fp4moe::plan::cutlass

#include "plan/cutlass_sm100_model.hpp"  // the sm_100 arithmetic, declared above
