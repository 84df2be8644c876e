// The small-batch path's down projection and weighted sum (decode_down.hpp).
// Per CTA, one 16-row group of H at a time:
//   sources   the experts with rows (and the shared expert), read from the
//             expert offsets into shared memory once;
//   units     each source's K split into S parts, S = 64 / sources (at least
//             1), so that the 8 warps get near-equal work at any token count;
//             a warp multiplies its unit's 16 x K/S weights (dequantized in
//             registers, dequant_fragment.cuh) by the source's rows of a2
//             (at most 8: one mma.sync n8 tile) and leaves the 16 x 8 partial
//             sums in shared memory;
//   sum       each (token, row) of the group sums its slots in order, each
//             slot's parts in order, times its expert's dequantization scale,
//             plus its bias, times its weight; then the shared expert: a fixed
//             order, so the result is the same bits run to run, no atomics.
#include "common/cuda_check.hpp"
#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "kernels/decode_down.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/dequant_fragment.cuh"
#include "kernels/mma_sm80.cuh"
#include "kernels/routing_kernels.hpp"

namespace fp4moe::kernels {
namespace {

using detail::dequant_fragment;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kMaxPairs = static_cast<int>(kDecodeDownMaxPairs);
constexpr int kMaxSources = kMaxPairs + 1;       // and the shared expert
constexpr int kTargetUnits = 64;                 // units a group is split into (8 a warp)
constexpr int kPartial = 16 * 8;                 // a unit's 16 rows x 8 columns

// A source: an expert's permuted rows, at most 8 of them (one n8 tile; an
// engine's routing may repeat an expert for a token, so longer runs are cut),
// or the shared expert's (its rows the tokens, T <= 8).
struct Sources {
  int count, parts;             // sources (routed, then the shared expert), K parts each
  int expert[kMaxSources];      // held expert, -1: the shared expert
  int row0[kMaxSources], rows[kMaxSources];
  int source_of_row[kMaxPairs];  // permuted row -> its source
};

// The experts with rows, from the offsets in expert order (warp 0, 32 experts
// at a time); the shared expert last.
__device__ void find_sources(const DecodeDownArgs& a, Sources& s) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int n = 0;
    for (int base = 0; base < a.experts; base += 32) {
      const int e = base + lane;
      const int r0 = e < a.experts ? a.expert_offsets[e] : 0, r1 = e < a.experts ? a.expert_offsets[e + 1] : 0;
      const int chunks = r1 > r0 ? (r1 - r0 + 7) / 8 : 0;
      int before = chunks;  // inclusive scan of the chunks over the lanes
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, before, o);
        if (lane >= o) before += v;
      }
      for (int c = 0; c < chunks; ++c) {
        const int slot = n + before - chunks + c, c0 = r0 + 8 * c, rows = min(8, r1 - c0);
        if (slot >= kMaxPairs) break;  // (offsets past T k rows: not this layer's)
        s.expert[slot] = e, s.row0[slot] = c0, s.rows[slot] = rows;
        for (int r = c0; r < c0 + rows && r < kMaxPairs; ++r) s.source_of_row[r] = slot;
      }
      n += __shfl_sync(0xffffffffu, before, 31);
    }
    if (lane == 0) {
      n = min(n, kMaxPairs);
      if (a.shared.weights) s.expert[n] = -1, s.row0[n] = 0, s.rows[n] = static_cast<int>(a.tokens), ++n;
      s.count = n;
      s.parts = n > 0 ? max(1, kTargetUnits / n) : 1;
    }
  }
  __syncthreads();
}

// Unit u of row group g (source u / parts, K part u % parts): 16 x 8 partial
// sums, fp32, into partial (row-major 16 x 8).
__device__ void multiply_unit(const DecodeDownArgs& a, const Sources& s, int u, int64_t g, uint32_t add2,
                              float* partial) {
  const int lane = threadIdx.x % 32;
  const int src = u / s.parts, part = u % s.parts;
  const int e = s.expert[src];
  const DecodeWeights& w = e >= 0 ? a.routed : a.shared;
  const int64_t K = w.k, granules = K / 64, scale_granules = pack::scale_granules(K), groups = a.hidden / 16;
  const int64_t kk0 = granules * part / s.parts, kk1 = granules * (part + 1) / s.parts;
  // B: a2 rows of the source (column n = lane / 4 of the n8 tile); past its rows, zeros
  const int n = lane / 4;
  const bool has_row = n < s.rows[src];
  const __nv_bfloat16* brow = (e >= 0 ? a.a2 + int64_t(s.row0[src]) * K : a.shared_a2) + (has_row ? n : 0) * K +
                              2 * (lane % 4);
  const int64_t expert_group = int64_t(e >= 0 ? e : 0) * groups + g;
  const uint8_t* wbase = w.weights + expert_group * granules * pack::kWeightGranuleBytes + lane * 16;
  const uint8_t* sbase = w.scales + expert_group * scale_granules * pack::kScaleGranuleBytes + (lane / 4) * 16;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
  for (int64_t kk = kk0; kk < kk1; ++kk) {
    const uint4 wq = __ldg(reinterpret_cast<const uint4*>(wbase + kk * pack::kWeightGranuleBytes));
    const uint4 sq = __ldg(reinterpret_cast<const uint4*>(sbase + (kk / 2) * pack::kScaleGranuleBytes));
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      uint32_t af[4], bf[2] = {0u, 0u};
      dequant_fragment(wq, sq, t, int(kk % 2) * 4 + t, add2, af);
      const int64_t k = kk * 64 + t * 16;
      if (has_row) {
        bf[0] = *reinterpret_cast<const uint32_t*>(brow + k);
        bf[1] = *reinterpret_cast<const uint32_t*>(brow + k + 8);
      }
      ptx::mma_bf16_16816(d, af, bf);
    }
  }
  // accumulator layout: rows lane / 4 and + 8, columns 2 (lane % 4) and + 1
  const int r = lane / 4, c = 2 * (lane % 4);
  partial[r * 8 + c] = d[0], partial[r * 8 + c + 1] = d[1];
  partial[(r + 8) * 8 + c] = d[2], partial[(r + 8) * 8 + c + 1] = d[3];
}

// Source src's value at (row r of the group, column c): its parts in order, times its dequantization scale.
__device__ __forceinline__ float source_value(const DecodeDownArgs& a, const Sources& s, const float* partials, int src,
                                              int64_t row, int r, int c) {
  float z = 0.f;
  for (int p = 0; p < s.parts; ++p) z += partials[(src * s.parts + p) * kPartial + r * 8 + c];
  const int e = s.expert[src];
  const DecodeWeights& w = e >= 0 ? a.routed : a.shared;
  return z * w.dequant_scale[int64_t(e >= 0 ? e : 0) * w.scale_parts + (row / 16) % w.scale_parts];
}

// The group's outputs: per (token, row), the slots in order, then the shared expert.
__device__ void sum_group(const DecodeDownArgs& a, const Sources& s, const float* partials, int64_t g) {
  for (int i = threadIdx.x; i < a.tokens * 16; i += kThreads) {
    const int64_t t = i / 16, row = g * 16 + i % 16;
    const int r = i % 16;
    float acc = 0.f;
    for (int j = 0; j < a.top_k; ++j) {
      const int64_t q = t * a.top_k + j;
      const int pos = a.pair_pos[q];
      if (pos < 0) continue;  // another rank's expert, or a bad id
      const int src = s.source_of_row[pos];
      float z = source_value(a, s, partials, src, row, r, pos - s.row0[src]);
      if (a.bias) z += a.bias[int64_t(s.expert[src]) * a.hidden + row];
      acc += a.topk_weights[q] * z;
    }
    if (a.shared.weights) acc += source_value(a, s, partials, s.count - 1, row, r, static_cast<int>(t));
    if (a.status && !isfinite(acc)) {  // a NaN/Inf stays in its token's row; it is reported
      atomicOr(a.status, kStatusNonFiniteOutput);
      atomicMax(a.status + 1, INT32_MAX - static_cast<int32_t>(t));
    }
    a.out[t * a.hidden + row] = __float2bfloat16_rn(acc);
  }
}

__global__ void __launch_bounds__(kThreads) decode_down_kernel(const DecodeDownArgs a, uint32_t add2) {
  __shared__ Sources sources;
  __shared__ float partials[kMaxSources * kPartial];
  wait_for_prior_grid();
  allow_dependent_grids();
  find_sources(a, sources);
  const int warp = threadIdx.x / 32, units = sources.count * sources.parts;
  for (int64_t g = blockIdx.x; g < a.hidden / 16; g += gridDim.x) {
    for (int u = warp; u < units; u += kWarps) multiply_unit(a, sources, u, g, add2, partials + u * kPartial);
    __syncthreads();
    sum_group(a, sources, partials, g);
    __syncthreads();  // the next group's units overwrite the partials
  }
}

}  // namespace

void launch_decode_down(const DecodeDownArgs& a, int sm_count, cudaStream_t stream) {
  FP4MOE_CHECK(a.tokens >= 1 && a.tokens <= kDecodeDownMaxTokens,
               "decode down: " << a.tokens << " tokens (1.." << kDecodeDownMaxTokens << ")");
  FP4MOE_CHECK(a.top_k >= 1 && a.tokens * a.top_k <= kMaxPairs,
               "decode down: " << a.tokens << " tokens x top_k " << a.top_k << " pairs (at most " << kMaxPairs << ")");
  FP4MOE_CHECK(a.experts >= 1 && a.hidden > 0 && a.hidden % 16 == 0,
               "decode down: E = " << a.experts << ", H = " << a.hidden << " (H a multiple of 16)");
  FP4MOE_CHECK(a.routed.weights && a.routed.scales && a.routed.dequant_scale && a.routed.k > 0 &&
                   a.routed.k % kPreparedKGranule == 0,
               "decode down: the routed weights are null or K = " << a.routed.k << " is not a multiple of "
                                                                   << kPreparedKGranule);
  FP4MOE_CHECK(!a.shared.weights || (a.shared.scales && a.shared.dequant_scale && a.shared_a2 && a.shared.k > 0 &&
                                     a.shared.k % kPreparedKGranule == 0),
               "decode down: the shared expert's weights, scales, dequant_scale or a2 is null, or K = "
                   << a.shared.k << " is not a multiple of " << kPreparedKGranule);
  FP4MOE_CHECK(a.expert_offsets && a.pair_pos && a.topk_weights && a.a2 && a.out, "decode down: a device pointer is null");
  FP4MOE_CHECK(sm_count >= 1, "decode down: sm_count = " << sm_count);
  const int64_t groups = a.hidden / 16;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(groups, sm_count));
  launch_dependent(decode_down_kernel, grid, kThreads, 0, stream, a, pack::scale_add2(prepared_scale_exponent_add(a.format)));
  FP4MOE_CHECK_LAUNCH("decode_down_kernel");
}

}  // namespace fp4moe::kernels
