// The FP4 grouped GEMM's tile configurations and shared-memory layout.
//
// This header is the one source of truth: both kernels (fp4_grouped_gemm.cu,
// fp4_grouped_gemm_ws_sm90.cu in src/kernels) allocate their dynamic shared
// memory from GemmSmemLayout, and the planner (src/plan/gemm_plan.cpp) reports
// the same terms. Host and device compile it. What the compiler and the
// measurements showed for each policy: docs/kernels.md, "Tile policies".
//
// The kernel computes Y^T = W * X^T ("swap AB"): weight rows fill the MMA's
// M dimension, the few tokens of an expert fill N. One CTA owns `bm` weight
// rows and `nt` tokens of one expert and walks K in steps of `bk`.
#pragma once
#include <cstdint>

namespace fp4moe::plan {

// The activations a tile multiplies: bf16 (W4A16), or e4m3 with an fp32 scale
// per row (W4A8: the FP4 weights become e4m3 in the K loop, docs/fp8.md).
enum class ActivationType : int { bf16 = 0, e4m3 = 1 };
constexpr const char* activation_type_name(ActivationType a) { return a == ActivationType::e4m3 ? "e4m3" : "bf16"; }

// An expert's token chunks (work items per N tile): 0 for no rows, else the
// fewest chunks of `chunk` rows whose last holds at most `max_rows` (>= chunk).
// Host and device (the kernels' schedulers) count with this one function.
constexpr int64_t token_chunks(int64_t rows, int chunk, int max_rows) {
  return rows <= 0 ? 0 : rows <= max_rows ? 1 : (rows - max_rows + chunk - 1) / chunk + 1;
}

// One tile configuration of the FP4 grouped GEMM, and every policy that
// differs per tile: the kernels, the planner, the tuner and the tests read
// them here. `name` is stable (tune caches and the CLI name tiles by it).
// The step in which the tiles that take tails (GemmTile::takes_tails) take N
// and K: a 16-row group's K granule of the prepared layout, and 64-row epilogue groups.
inline constexpr int64_t kTailGranule = 64;

struct GemmTile {
  const char* name;
  int bm;           // weight rows (output features) per CTA; 16 * warp_m_tiles per warp
  int nt;           // token columns per CTA (multiple of 8)
  int bk;           // K elements per pipeline stage (multiple of 128)
  int warp_m_tiles; // m16 tiles per warp (warp-specialized: m64 blocks per consumer warpgroup)
  int max_stages;
  int ctas_per_sm;  // occupancy target: the stage budget is the SM's share for this many CTAs
  bool wgmma = false;  // Hopper warpgroup MMA (sm_90a only): 4 warps x 16 rows = m64, tokens = n
  // Warp-specialized (sm_90a only): one producer warpgroup fills the stages with
  // tensor copies (rows in expert order) on mbarriers, consumer warpgroups
  // dequantize and multiply (src/kernels/fp4_grouped_gemm_ws_sm90.cu): with
  // wgmma (m64 x nt per warpgroup) or, without, mma.sync (m16 x n8 per warp).
  bool warp_specialized = false;
  // Rows of an expert's token chunks when below nt (0: nt). The expert's last
  // chunk may then hold up to nt rows: with chunks of 128 and nt = 144, an
  // expert of 129..144 rows is one item and of 257..272 two, where chunks of
  // 128 would add a third whose dequantization costs as much as a full one.
  int chunk_rows = 0;
  // CTAs per thread-block cluster (warp-specialized wgmma tiles): the CTAs of a
  // cluster take adjacent N tiles of the same token chunk, and each stage's
  // activations reach all of them by one TMA multicast per 64-k atom, each CTA
  // issuing its share: the activation bytes from L2 per CTA divide by this.
  // Needs the expert's N tiles in whole clusters (the planner checks).
  int cluster_n = 1;
  // Warp-specialized tiles: tokens staged per epilogue pass (0: epilogue_rows()'s
  // default). A smaller staging tile leaves room for more stages.
  int epilogue_token_rows = 0;
  // K-loop widths in steps of this many token columns (step, 2 step, .., nt),
  // where not 0: an item's wgmma then follows its rows to within a step, so a
  // tile whose chunk holds a whole decode-sized expert (128 rows: its weights
  // dequantized once) multiplies no more columns than the expert has (rounded
  // up to the step). 0: the widths of k_loop_width's rule below.
  int k_loop_step = 0;
  // Where the biased instance computes GEMM1's SwiGLU: in its bias pass over
  // the staging tile (the write loop then only packs), or in the write loop.
  // Either spills some tile and not the other (docs/kernels.md).
  bool swiglu_in_bias_pass = true;
  // The activations' type (warp-specialized wgmma tiles only for e4m3): a tile
  // runs the GEMMs of its type; e4m3 tiles multiply by wgmma k32 and stage one
  // byte per activation.
  ActivationType activations = ActivationType::bf16;

  // ---- shape ----
  constexpr bool fp8() const { return activations == ActivationType::e4m3; }
  constexpr int activation_bytes() const { return fp8() ? 1 : 2; }
  // K of one 128-byte swizzle atom of an activation row (a TMA box's width, a wgmma descriptor's row)
  constexpr int activation_atom_k() const { return 128 / activation_bytes(); }
  // K of one MMA step: wgmma k16 (bf16) or k32 (e4m3)
  constexpr int mma_k() const { return fp8() ? 32 : 16; }
  constexpr int chunk() const { return chunk_rows > 0 ? chunk_rows : nt; }
  constexpr int64_t chunks_of(int64_t rows) const { return token_chunks(rows, chunk(), nt); }
  // K stages and N tiles of a GEMM: the last may be partial where the tile takes
  // tails (takes_tails()): the tensor copies fill what lies past K with zeros, and
  // the epilogue writes no row at or past N.
  constexpr int64_t k_steps(int64_t k) const { return (k + bk - 1) / bk; }
  constexpr int64_t n_tiles(int64_t n) const { return (n + bm - 1) / bm; }
  // fp32 accumulators per consumer thread (wgmma: nt / 2 per m64 block; mma.sync: 4 per m16 x n8)
  constexpr int accumulators_per_thread() const { return warp_m_tiles * nt / 2; }
  constexpr int warps() const { return bm / (16 * warp_m_tiles); }  // math warps
  constexpr int consumer_warpgroups() const { return warps() / 4; }
  constexpr int threads() const { return warps() * 32 + (warp_specialized ? kProducerThreads : 0); }
  constexpr int n8_tiles() const { return nt / 8; }
  static constexpr int kProducerThreads = 128;  // warp-specialized: one warpgroup loads

  // ---- policies ----
  // Split-K (plan/split_k.hpp): warp-specialized tiles, but not warpgroup tiles
  // of more than 128 accumulators per thread, whose split sum would spill
  // registers, nor cluster tiles (both CTAs of a cluster walk the same items).
  // A K or N that the tile does not divide, in steps of 64 (the prepared
  // layout's K granule and the epilogue's row group): the warp-specialized
  // tiles, bf16 and e4m3, whose tensor copies zero-fill what lies past the end
  // (an e4m3 activation atom of 128 k half past K too); the all-warps tiles'
  // loaders do not.
  constexpr bool takes_tails() const { return warp_specialized; }
  constexpr bool splits_k() const {
    return warp_specialized && cluster_n == 1 && !(wgmma && accumulators_per_thread() > 128);
  }
  // The balanced split (plan/split_k.hpp: every CTA the same share of all
  // items' K stages): the splitting tiles of decode widths, up to 32
  // accumulators per thread on wgmma (at 64 the e4m3 bm128_nt128 tile
  // spilled) and 8 on mma.sync (at 16 bm256_nt32_bk256 spilled 12 bytes in
  // its biased instance: its 96 registers hold the fragments too).
  constexpr bool balances_k() const { return splits_k() && accumulators_per_thread() <= (wgmma ? 32 : 8); }
  // Activations in the 128-byte-swizzled K-major layout that wgmma descriptors
  // and TMA boxes use; ldmatrix reads it without bank conflicts too.
  constexpr bool swizzled_activations() const { return wgmma || warp_specialized; }
  // Registers per thread: the launch gives every thread the cap of
  // __launch_bounds__ (multiples of 8); warp-specialized tiles move registers
  // from the producer, which issues copies and needs few, to the consumers
  // (setmaxnreg): 72, or 40 or 24 where the consumers hold the most live
  // values per register they can get. The cluster tiles of more than 128
  // accumulators per thread take 24 (their consumers 240): their consumers
  // also keep the peer CTA's barriers, and at 232 the biased instance spilled.
  constexpr int register_cap() const { return (65536 / (threads() * ctas_per_sm)) / 8 * 8; }
  constexpr int producer_registers() const {
    if (register_cap() < 64 || (consumer_warpgroups() == 4 && (accumulators_per_thread() >= 64 || k_loop_step > 0))) return 24;
    if (cluster_n > 1 && accumulators_per_thread() > 128) return 24;
    return register_cap() < 128 || accumulators_per_thread() > 128 ? 40 : 72;
  }
  constexpr int consumer_registers() const {
    const int r = (threads() * register_cap() - kProducerThreads * producer_registers()) / (threads() - kProducerThreads) / 8 * 8;
    return r > 240 ? 240 : r;
  }
  // Who reallocates: the tiles whose consumers would not fit their live values
  // in the launch's even share (many accumulators per thread, four consumer
  // warpgroups of wgmma, three CTAs per SM).
  constexpr bool reallocates_registers() const {
    return warp_m_tiles * nt > (wgmma ? 128 : 64) || (wgmma && register_cap() < 128) || register_cap() < 64;
  }
  // e4m3 tiles of up to 64 accumulators per thread over their consumer
  // warpgroups (more spill) can keep their wgmma's partial sums in a second set and add it to the fp32 one every few stages
  // (GroupedGemmArgs::fp8_promotion_stages; docs/fp8.md, "Accumulation"): the
  // FP8 tensor cores keep fewer bits than fp32. Wider tiles have no registers
  // for a second set and accumulate in place.
  constexpr bool promotes_partial_sums() const {
    return fp8() && accumulators_per_thread() * consumer_warpgroups() <= 64;
  }
  // mma.sync with short chains (few token tiles) alternates two accumulator
  // sets so that consecutive mma.sync do not wait on each other; e4m3 tiles
  // that promote keep their partial sums in the second.
  constexpr int accumulator_sets() const {
    return promotes_partial_sums() || (!wgmma && warp_m_tiles * n8_tiles() < 4) ? 2 : 1;
  }
  // wgmma: A fragment buffers, one per wgmma step allowed in flight.
  static constexpr int kFragmentBuffers = 2;
  // Token columns of an item's K loop (warp-specialized): the smallest of these
  // that covers its rows. Short chunks are common under ragged routing and the
  // columns past the rows are never stored. Widths nt/4, nt/2, 3nt/4 and nt; on
  // two-block wgmma tiles three copies of the loop (nt/2, 5nt/8, nt), each a
  // copy of the pipeline's registers; where chunks are shorter than nt, chunk/2,
  // chunk and nt (the last chunk's extra rows); with a k_loop_step, every
  // multiple of it up to nt.
  // wgmma atoms exist for every N in 8s; mma.sync takes n8 tiles in pairs.
  static constexpr int kKLoopWidths = 8;  // k_loop_width(0 .. 7); the last is nt
  constexpr bool narrows_k_loop() const { return warp_specialized && (k_loop_step > 0 || (wgmma ? nt >= 64 : nt >= 32)); }
  constexpr int k_loop_width(int i) const {
    if (k_loop_step > 0) return (i + 1) * k_loop_step < nt ? (i + 1) * k_loop_step : nt;
    const bool two_block_wgmma = wgmma && warp_m_tiles > 1, chunked = chunk() < nt;
    const int w0 = chunked ? chunk() / 2 / 16 * 16 : two_block_wgmma ? nt / 2 : nt / 4;
    const int w1 = chunked ? chunk() : two_block_wgmma ? 5 * nt / 8 : nt / 2;
    const bool three_quarters = narrows_k_loop() && !two_block_wgmma && (3 * nt / 4) % (wgmma ? 16 : 8) == 0;
    const int w2 = three_quarters ? 3 * nt / 4 : nt;
    return !narrows_k_loop() ? nt : i == 0 ? w0 : i == 1 ? w1 : i == 2 ? w2 : nt;
  }
  // The K-loop width of an item of `rows` rows: the consumers multiply this many
  // token columns and the producer copies this many activation rows per stage
  // (the rest of the stage's nt rows would be read from L2 for nothing).
  constexpr int k_loop_columns(int rows) const {
    if (!narrows_k_loop()) return nt;
    for (int i = 0; i + 1 < kKLoopWidths; ++i)
      if (rows <= k_loop_width(i)) return k_loop_width(i);
    return nt;
  }
  // Tiles of 136+ accumulators per thread read the item, its split and the
  // item count again after the K loop (a binary search in shared memory)
  // rather than keep them live across it, where registers are scarcest.
  constexpr bool rereads_item_after_k_loop() const { return accumulators_per_thread() > 128; }
  // The first item's weights are asked for from the chunk prefix alone (no
  // expert offsets read first: one round trip to L2 fewer), except on cluster
  // tiles, whose registers it would not fit.
  constexpr bool first_tile_from_prefix() const { return cluster_n == 1; }
  // Tokens staged per epilogue pass: all of them, except on wide
  // warp-specialized tiles (bm x nt > 128 x 128), which stage 64 (48 where 64
  // does not divide nt: 144) at a time to leave room for three stages.
  constexpr int epilogue_rows() const {
    if (epilogue_token_rows > 0) return epilogue_token_rows;
    return warp_specialized && bm * nt > 128 * 128 ? (nt % 64 == 0 ? 64 : 48) : nt;
  }
};

// The one list of tile configurations: kernels are instantiated from it, the
// planner plans it, the tuner times it and the tests check it. Append to extend
// (docs/kernels.md has what each was measured to win). The kernels are bound by
// instruction issue (dequantization), not by bytes in flight, so most tiles
// trade pipeline depth for resident warps (ctas_per_sm).
inline constexpr GemmTile kGemmTiles[] = {
    // all warps load and multiply (sm_80+): 1..8, 9..16, 17..32, 33..64 tokens per expert
    {.name = "bm128_nt8_bk256_mt1_c3", .bm = 128, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 3},
    {.name = "bm128_nt16_bk256_mt1_c2", .bm = 128, .nt = 16, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 2},
    {.name = "bm128_nt32_bk256_mt1_c2", .bm = 128, .nt = 32, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 2},
    // two m16 tiles per warp halve the B-fragment traffic
    {.name = "bm128_nt64_bk256_mt2_c1", .bm = 128, .nt = 64, .bk = 256, .warp_m_tiles = 2, .max_stages = 4, .ctas_per_sm = 1},
    // few experts active: more CTAs per expert
    {.name = "bm64_nt8_bk256_mt1_c4", .bm = 64, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 4},
    // small-capacity targets (sm_86/89/120): shorter stages
    {.name = "bm128_nt64_bk128_mt2_c1", .bm = 128, .nt = 64, .bk = 128, .warp_m_tiles = 2, .max_stages = 8, .ctas_per_sm = 1},
    {.name = "bm128_nt16_bk256_mt2_c3", .bm = 128, .nt = 16, .bk = 256, .warp_m_tiles = 2, .max_stages = 4, .ctas_per_sm = 3},
    {.name = "bm128_nt32_bk256_mt2_c2", .bm = 128, .nt = 32, .bk = 256, .warp_m_tiles = 2, .max_stages = 4, .ctas_per_sm = 2},
    // one deep pipeline per SM
    {.name = "bm128_nt8_bk256_mt1_c1", .bm = 128, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 8, .ctas_per_sm = 1},
    // 99 KB targets (sm_86/89/120): two or three CTAs per SM
    {.name = "bm128_nt16_bk128_mt1_c2", .bm = 128, .nt = 16, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 2},
    {.name = "bm64_nt8_bk128_mt1_c3", .bm = 64, .nt = 8, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 3},
    // 64 tokens per expert: 8 warps, each dequantized fragment feeds 16 mma; or 8 warps of one m16 tile
    {.name = "bm256_nt64_bk128_mt2_c1", .bm = 256, .nt = 64, .bk = 128, .warp_m_tiles = 2, .max_stages = 4, .ctas_per_sm = 1},
    {.name = "bm128_nt64_bk256_mt1_c1", .bm = 128, .nt = 64, .bk = 256, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 1},
    // Hopper warpgroup MMA, all warps loading: two warpgroups of 64 weight rows,
    // 64 or 128 tokens per wgmma; dequantized weights are the register operand.
    {.name = "bm128_nt128_bk128_mt1_c1_wgmma", .bm = 128, .nt = 128, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 1, .wgmma = true},
    {.name = "bm128_nt64_bk128_mt1_c1_wgmma", .bm = 128, .nt = 64, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 1, .wgmma = true},
    // Warp-specialized warpgroup-MMA tiles (sm_90a): prefill sizes, then decode
    // sizes where four consumer warpgroups share one small activation stage.
    {.name = "bm128_nt128_bk128_mt1_c1_ws", .bm = 128, .nt = 128, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    // two m64 blocks per consumer warpgroup: half the activation reads from L2 per flop
    {.name = "bm256_nt128_bk128_mt2_c1_ws", .bm = 256, .nt = 128, .bk = 128, .warp_m_tiles = 2, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    {.name = "bm128_nt64_bk128_mt1_c1_ws", .bm = 128, .nt = 64, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    {.name = "bm256_nt64_bk128_mt1_c1_ws", .bm = 256, .nt = 64, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    {.name = "bm256_nt32_bk128_mt1_c1_ws", .bm = 256, .nt = 32, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    {.name = "bm256_nt16_bk128_mt1_c1_ws", .bm = 256, .nt = 16, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    {.name = "bm256_nt8_bk128_mt1_c1_ws", .bm = 256, .nt = 8, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true},
    {.name = "bm128_nt8_bk128_mt1_c2_ws", .bm = 128, .nt = 8, .bk = 128, .warp_m_tiles = 1, .max_stages = 8, .ctas_per_sm = 2, .wgmma = true, .warp_specialized = true},
    // Warp-specialized mma.sync tiles (sm_90a): the producer's tensor copies keep
    // the loads off the math warps' issue slots and no CTA barrier stops them;
    // each consumer warp runs on its own (1..64 tokens per expert).
    {.name = "bm256_nt8_bk256_mt1_c1_ws_sync", .bm = 256, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 5, .ctas_per_sm = 1, .warp_specialized = true},
    {.name = "bm128_nt8_bk256_mt1_c2_ws_sync", .bm = 128, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 2, .warp_specialized = true},
    {.name = "bm256_nt16_bk256_mt1_c1_ws_sync", .bm = 256, .nt = 16, .bk = 256, .warp_m_tiles = 1, .max_stages = 5, .ctas_per_sm = 1, .warp_specialized = true},
    {.name = "bm256_nt32_bk256_mt1_c1_ws_sync", .bm = 256, .nt = 32, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 1, .warp_specialized = true},
    {.name = "bm256_nt64_bk128_mt2_c1_ws_sync", .bm = 256, .nt = 64, .bk = 128, .warp_m_tiles = 2, .max_stages = 6, .ctas_per_sm = 1, .warp_specialized = true},
    // 64..128 tokens per expert: one chunk, the K loop narrowed to the rows
    {.name = "bm128_nt128_bk128_mt1_c1_ws_sync", .bm = 128, .nt = 128, .bk = 128, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 1, .warp_specialized = true},
    // Prefill (128+ tokens per expert): chunks of 128 (or 136) whose last takes up
    // to 144 rows, so ragged counts add fewer items.
    {.name = "bm256_nt144_bk128_mt2_c1_ws_ch128", .bm = 256, .nt = 144, .bk = 128, .warp_m_tiles = 2, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .chunk_rows = 128},
    {.name = "bm256_nt144_bk128_mt2_c1_ws_ch136", .bm = 256, .nt = 144, .bk = 128, .warp_m_tiles = 2, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .chunk_rows = 136},
    // 64 tokens with stages of 256 k: half the barrier waits per k; its epilogue
    // stages 16 tokens at a time so that three stages fit, and the ring does not
    // run dry behind each item's epilogue.
    {.name = "bm256_nt64_bk256_mt1_c1_ws_e16", .bm = 256, .nt = 64, .bk = 256, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .epilogue_token_rows = 16},
    // Prefill in clusters of two N tiles sharing the activations (multicast):
    // a third fewer bytes per stage from L2 per CTA.
    {.name = "bm256_nt144_bk128_mt2_c1_ws_ch136_cl2", .bm = 256, .nt = 144, .bk = 128, .warp_m_tiles = 2, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .chunk_rows = 136, .cluster_n = 2},
    // Three CTAs per SM: a GEMM of a few hundred single-token items runs in one round.
    {.name = "bm128_nt8_bk256_mt1_c3_ws_sync", .bm = 128, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 3, .warp_specialized = true},
    // Decode sizes, for the tuner: chunks of 128, so an expert of up to 128 rows is
    // one item (its weights dequantized once), the K loop as wide as its rows in
    // steps of 16 and its activation copies as narrow. Four consumer warpgroups
    // of 64 accumulators each: the producer keeps 24 registers so that they get 112.
    {.name = "bm256_nt128_bk128_mt1_c1_ws_w16", .bm = 256, .nt = 128, .bk = 128, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .k_loop_step = 16},
    // Decode sizes in clusters of two N tiles sharing the activations (multicast).
    {.name = "bm256_nt64_bk256_mt1_c1_ws_e16_cl2", .bm = 256, .nt = 64, .bk = 256, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .cluster_n = 2, .epilogue_token_rows = 16},
    {.name = "bm256_nt128_bk128_mt2_c1_ws_cl2", .bm = 256, .nt = 128, .bk = 128, .warp_m_tiles = 2, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .cluster_n = 2},
    // The 64-token cluster tile with the K loop as wide as the rows in steps of 8
    // (half the wasted columns of steps of 16), for the tuner: twice the K-loop
    // copies, which the ranking does not take.
    {.name = "bm256_nt64_bk256_mt1_c1_ws_e16_w8_cl2", .bm = 256, .nt = 64, .bk = 256, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .cluster_n = 2, .epilogue_token_rows = 16, .k_loop_step = 8},
    // e4m3 activations (W4A8, docs/fp8.md): the warp-specialized wgmma tiles
    // of each token width, k32 per wgmma; an activation stage takes half the
    // bytes of bf16's.
    {.name = "bm256_nt8_bk128_mt1_c1_ws_fp8", .bm = 256, .nt = 8, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    {.name = "bm256_nt16_bk128_mt1_c1_ws_fp8", .bm = 256, .nt = 16, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    {.name = "bm256_nt32_bk128_mt1_c1_ws_fp8", .bm = 256, .nt = 32, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    // the same with the K loop in widths of 8 columns: at 8 to 24 tokens per expert
    // the wgmma multiplies and the producer copies only the item's rows
    {.name = "bm256_nt32_bk128_mt1_c1_ws_w8_fp8", .bm = 256, .nt = 32, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .k_loop_step = 8, .activations = ActivationType::e4m3},
    {.name = "bm256_nt64_bk128_mt1_c1_ws_fp8", .bm = 256, .nt = 64, .bk = 128, .warp_m_tiles = 1, .max_stages = 5, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    // (K-loop widths 64 and 128: with the default four, or six stages, ptxas spills its plain instance)
    {.name = "bm128_nt128_bk128_mt1_c1_ws_fp8", .bm = 128, .nt = 128, .bk = 128, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .k_loop_step = 64, .swiglu_in_bias_pass = false, .activations = ActivationType::e4m3},
    // decode sizes: two CTAs of two consumer warpgroups per SM, twice the items of bm256 in a round
    {.name = "bm128_nt8_bk256_mt1_c2_ws_fp8", .bm = 128, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 4, .ctas_per_sm = 2, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    // three CTAs per SM (three stages each): more weight copies in flight where K is short
    {.name = "bm128_nt8_bk256_mt1_c3_ws_fp8", .bm = 128, .nt = 8, .bk = 256, .warp_m_tiles = 1, .max_stages = 3, .ctas_per_sm = 3, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    {.name = "bm128_nt16_bk128_mt1_c2_ws_fp8", .bm = 128, .nt = 16, .bk = 128, .warp_m_tiles = 1, .max_stages = 6, .ctas_per_sm = 2, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
    {.name = "bm256_nt128_bk128_mt2_c1_ws_fp8", .bm = 256, .nt = 128, .bk = 128, .warp_m_tiles = 2, .max_stages = 4, .ctas_per_sm = 1, .wgmma = true, .warp_specialized = true, .activations = ActivationType::e4m3},
};
inline constexpr int kNumGemmTiles = sizeof(kGemmTiles) / sizeof(kGemmTiles[0]);

constexpr bool same_name(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
// The index of the tile called `name`, or -1.
constexpr int gemm_tile_index(const char* name) {
  for (int i = 0; i < kNumGemmTiles; ++i)
    if (same_name(kGemmTiles[i].name, name)) return i;
  return -1;
}

// Prepared weight layout granules (see src/format/gemm_pack.hpp).
inline constexpr int kScaleGranuleK = 128;    // one 16-byte scale load per lane quad covers k128
inline constexpr int kSmemAlign = 128;

constexpr int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct GemmSmemLayout {
  GemmTile tile;

  // --- one pipeline stage ---
  constexpr int64_t weight_bytes_per_stage() const { return int64_t(tile.bm) * tile.bk / 2; }
  constexpr int64_t scale_bytes_per_stage() const { return int64_t(tile.bm) * tile.bk / 16; }
  // All-warps mma.sync tiles: activation rows padded by 16 bytes so ldmatrix's 8
  // row addresses hit 8 bank groups. Warpgroup and warp-specialized tiles: the
  // 128-byte-swizzled K-major layout ([bk/64][nt rows][128 bytes], 1024-byte aligned).
  constexpr int64_t act_row_stride() const {
    return int64_t(tile.bk) * tile.activation_bytes() + (tile.swizzled_activations() ? 0 : 16);
  }
  constexpr int64_t act_bytes_per_stage() const { return int64_t(tile.nt) * act_row_stride(); }
  constexpr int64_t act_padding_per_stage() const { return tile.swizzled_activations() ? 0 : int64_t(tile.nt) * 16; }
  constexpr int64_t stage_align() const { return tile.swizzled_activations() ? 1024 : kSmemAlign; }
  // Offsets inside a stage.
  constexpr int64_t weight_offset() const { return 0; }
  constexpr int64_t scale_offset() const { return weight_bytes_per_stage(); }
  constexpr int64_t act_offset() const { return align_up(weight_bytes_per_stage() + scale_bytes_per_stage(), stage_align()); }
  constexpr int64_t smem_bytes_per_stage() const { return align_up(act_offset() + act_bytes_per_stage(), stage_align()); }
  constexpr int64_t stage_alignment_padding() const {
    return smem_bytes_per_stage() - (weight_bytes_per_stage() + scale_bytes_per_stage() + act_bytes_per_stage());
  }

  // --- epilogue: the fp32 output tile [nt][bm] (+4 floats per row against bank
  // conflicts), staged so SwiGLU can pair gate and up rows and stores are whole rows.
  // Warp-specialized tiles stage per consumer warpgroup ([bm/64][nt][64 + 4]) so
  // each warpgroup finishes its item without waiting for the others. ---
  constexpr int64_t epilogue_group_rows() const { return tile.warp_specialized ? 64 : tile.bm; }
  constexpr int64_t epilogue_groups() const { return tile.bm / epilogue_group_rows(); }
  constexpr int64_t epilogue_row_stride() const { return (epilogue_group_rows() + 4) * 4; }
  constexpr int64_t epilogue_tokens() const { return tile.epilogue_rows(); }
  constexpr int64_t epilogue_group_bytes() const { return epilogue_tokens() * epilogue_row_stride(); }
  constexpr int64_t epilogue_bytes() const { return align_up(epilogue_groups() * epilogue_group_bytes(), kSmemAlign); }
  // --- fixed: the per-expert chunk prefix the persistent scheduler searches,
  // and the current work item's activation row indices (gathered once per item) ---
  static constexpr int64_t kMaxExperts = 1024;
  constexpr int64_t scheduler_prefix_bytes() const { return (kMaxExperts + 1) * 4; }
  // all-warps tiles: double-buffered (the loader runs ahead); warp-specialized tiles have none (rows come in expert order)
  constexpr int64_t row_index_bytes() const { return tile.warp_specialized ? 0 : 2 * int64_t(tile.nt) * 4; }
  // warp-specialized: a "full" and an "empty" mbarrier per stage (8 bytes each), for the most stages
  constexpr int64_t barrier_bytes() const { return tile.warp_specialized ? 2 * int64_t(tile.max_stages) * 8 : 0; }
  // warp-specialized: split-K's "this CTA arrived last" word, broadcast to the consumers
  // (plan/split_k.hpp), then the routed row count (expert_offsets[E]); 16 bytes
  constexpr int64_t split_flag_bytes() const { return tile.warp_specialized ? 16 : 0; }
  constexpr int64_t scheduler_bytes() const {
    return align_up(scheduler_prefix_bytes() + row_index_bytes() + barrier_bytes() + split_flag_bytes(), kSmemAlign);
  }

  constexpr int64_t epilogue_offset(int stages) const { return stages * smem_bytes_per_stage(); }
  constexpr int64_t scheduler_offset(int stages) const { return epilogue_offset(stages) + epilogue_bytes(); }
  constexpr int64_t total_bytes(int stages) const { return scheduler_offset(stages) + scheduler_bytes(); }
  // Inside the fixed region: barriers first (8-byte aligned), then the prefix, the row indices, the split flag.
  constexpr int64_t barriers_offset(int stages) const { return scheduler_offset(stages); }
  constexpr int64_t prefix_offset(int stages) const { return scheduler_offset(stages) + barrier_bytes(); }
  constexpr int64_t row_index_offset(int stages) const { return prefix_offset(stages) + scheduler_prefix_bytes(); }
  constexpr int64_t split_flag_offset(int stages) const { return row_index_offset(stages) + row_index_bytes(); }
  constexpr int64_t routed_rows_offset(int stages) const { return split_flag_offset(stages) + 4; }

  // The planner's rule (docs/planner.md): stages = floor((capacity - epilogue - fixed) / per_stage),
  // capped at the tile's maximum and at K/bk + 1 (the loader runs at most one item ahead).
  // `capacity` is the per-block budget at the tile's occupancy target.
  constexpr int stages_for(int64_t capacity, int64_t k) const {
    const int64_t room = capacity - epilogue_bytes() - scheduler_bytes();
    if (room < 0) return 0;
    int64_t s = room / smem_bytes_per_stage();
    if (s > tile.max_stages) s = tile.max_stages;
    if (s > tile.k_steps(k) + 1) s = tile.k_steps(k) + 1;
    return static_cast<int>(s);
  }
  static constexpr int kMinStages = 2;
};

constexpr GemmSmemLayout gemm_layout(int tile_index) { return GemmSmemLayout{kGemmTiles[tile_index]}; }

// Compile-time sanity of the list.
constexpr bool gemm_tiles_valid() {
  for (const GemmTile& t : kGemmTiles) {
    if (t.nt % 8 || t.bk % kScaleGranuleK || t.bm % (16 * t.warp_m_tiles) || t.warps() < 1 || t.warps() > 16) return false;
    if (t.nt % (2 * 8) && t.nt != 8) return false;  // ldmatrix.x4 covers two n8 tiles
    // chunks below nt: warp-specialized wgmma tiles, whose narrowed K loops run chunk / 2 (in 16s) and chunk columns
    if (t.chunk() > t.nt || (t.chunk() < t.nt && (!t.wgmma || !t.warp_specialized || t.chunk() % 8 || t.chunk() < 64)))
      return false;
    if (t.ctas_per_sm < 1 || t.max_stages < GemmSmemLayout::kMinStages || t.max_stages > 8) return false;
    // clusters: warp-specialized wgmma tiles (they do not split K: splits_k), whose
    // stage's 64-k activation atoms divide among the cluster's CTAs
    if (t.cluster_n < 1 || t.cluster_n > 2) return false;
    if (t.epilogue_token_rows < 0 || (t.epilogue_token_rows > 0 && (!t.warp_specialized || t.epilogue_token_rows % 8)))
      return false;
    if (t.cluster_n > 1 && (!t.warp_specialized || !t.wgmma || (t.bk / t.activation_atom_k()) % t.cluster_n)) return false;
    // e4m3 activations: warp-specialized wgmma tiles, whole 128-k atoms per stage, no clusters yet
    if (t.fp8() && (!t.wgmma || !t.warp_specialized || t.bk % t.activation_atom_k() || t.cluster_n != 1)) return false;
    if (t.wgmma && !t.warp_specialized &&
        (t.warp_m_tiles != 1 || t.warps() % 4 || (t.nt != 64 && t.nt != 128) || t.bk % 64))
      return false;
    // widths in steps: wgmma atoms of N in 8s (wgmma_sm90.cuh has those up to 64 and the 16s above), at most
    // kKLoopWidths of them
    if (t.k_loop_step < 0 || (t.k_loop_step > 0 && (!t.wgmma || !t.warp_specialized || t.k_loop_step % (t.nt <= 64 ? 8 : 16) ||
                                                     t.nt % t.k_loop_step || t.nt / t.k_loop_step > GemmTile::kKLoopWidths)))
      return false;
    if (t.warp_specialized) {
      // wgmma n = nt (the CuTe register-A atoms 8..128); 64 rows per m64 block, warp_m_tiles blocks per
      // consumer warpgroup (mma.sync consumers: warp_m_tiles m16 tiles per warp, the same rows)
      if (t.warp_m_tiles < 1 || t.warp_m_tiles > 2 || t.bm % (64 * t.warp_m_tiles) || t.bk % 64) return false;
      if (t.consumer_warpgroups() < 1 || t.consumer_warpgroups() > 4) return false;
      if (t.nt != 8 && t.nt != 16 && t.nt != 32 && t.nt != 64 && t.nt != 128 && !(t.wgmma && t.nt == 144)) return false;
      if (t.nt % GemmSmemLayout{t}.epilogue_tokens()) return false;  // the epilogue's passes cover nt exactly
      if (!t.wgmma && t.warp_m_tiles * t.nt > 128) return false;  // mma.sync accumulators: at most 64 per thread
    }
  }
  return true;
}
static_assert(gemm_tiles_valid(), "kGemmTiles holds a tile the kernel cannot run");

constexpr bool gemm_tile_names_unique() {
  for (int i = 0; i < kNumGemmTiles; ++i)
    if (gemm_tile_index(kGemmTiles[i].name) != i) return false;
  return true;
}
static_assert(gemm_tile_names_unique(), "two tiles of kGemmTiles share a name");

}  // namespace fp4moe::plan
