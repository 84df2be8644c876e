// One CTA per (16-row group, expert), a thread per FP4 word of a k64 granule:
// each granule's 16 x 64 codes are decoded into shared memory, re-packed as
// the FP8 words of the same granule (the two layouts share the granules, so
// the words are rewritten in place once all of them are read), and each
// 16-wide step's "any nonzero code" kept. Then each row's largest nonzero
// block exponent gives its power of two, and every block scale becomes its
// fold code (format/prepare_fp8.cpp has the arithmetic on the host).
#include <climits>

#include "common/cuda_check.hpp"
#include "format/fp8_fragment.hpp"
#include "format/gemm_pack.hpp"
#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "kernels/prepare_fp8_weights.hpp"

namespace fp4moe::kernels {
namespace {

constexpr int kThreads = 128;  // 32 lanes x 4 words of a granule, and 32 lanes x 2 k32 steps x 2 row halves
static_assert(kThreads == pack::kLanes * 4);

__global__ void __launch_bounds__(kThreads) prepare_fp8_kernel(const PrepareFp8Args a) {
  extern __shared__ uint8_t nonzero[];  // [16 rows][K/16 steps]
  __shared__ uint8_t tile[16][64];      // one granule's codes, sign << 3 | magnitude
  __shared__ int row_hi[16];
  const int64_t rg = blockIdx.x, e = blockIdx.y, K = a.k, steps = K / 16;
  const bool rounded = a.format == Fp4Format::nvfp4;
  const int bias = prepared_scale_bias(a.format);
  const int block_steps = (rounded ? kNvfp4BlockSize : kMxfp4BlockSize) / 16;
  uint8_t* w = a.weights + e * (a.n * K / 2);
  uint8_t* sc = a.scales + e * pack::scale_bytes(a.n, K);
  const int i = threadIdx.x, lane = i / 4;
  for (int64_t kc = 0; kc < K / 64; ++kc) {
    {  // FP4 word t of the lane: reg (row + 8) + 2 (column + 8), halves columns c and c + 1
      const int t = i % 4;
      uint32_t regs[4];
      pack::unpack_word(*reinterpret_cast<const uint32_t*>(w + pack::word_offset(K, rg, kc, lane, t)), regs);
#pragma unroll
      for (int reg = 0; reg < 4; ++reg)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint32_t bits = regs[reg] >> (16 * half);  // bf16 pattern: sign at 15, magnitude at 8:6
          tile[lane / 4 + 8 * (reg % 2)][16 * t + 2 * (lane % 4) + half + 8 * (reg / 2)] =
              uint8_t(((bits >> 15) & 1u) << 3 | ((bits >> 6) & 7u));
        }
    }
    __syncthreads();
    if (i < 64) {  // (row, 16-wide step) of this granule
      const int r = i / 4, t = i % 4;
      uint8_t any = 0;
#pragma unroll
      for (int c = 0; c < 16; ++c) any |= tile[r][16 * t + c] & 7u;
      nonzero[r * steps + kc * 4 + t] = any != 0;
    }
    {  // FP8 word 2j + h of the lane: row lane/4 + 8h, k 32j + 4c.. and 32j + 16 + 4c..
      const int j = (i / 2) % 2, h = i % 2;
      const uint8_t* rc = &tile[lane / 4 + 8 * h][32 * j + 4 * (lane % 4)];
      uint32_t word = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) word = fp8::place_code(fp8::place_code(word, q, rc[q]), 4 + q, rc[16 + q]);
      *reinterpret_cast<uint32_t*>(w + ((rg * (K / 64) + kc) * pack::kLanes + lane) * 16 + 4 * (2 * j + h)) = word;
    }
    __syncthreads();
  }
  if (i < 16) {  // the row's power of two: its largest nonzero block less the table's top shift
    const int64_t row = rg * 16 + i;
    int hi = INT_MIN;
    for (int64_t s = 0; s < steps; ++s)
      if (nonzero[i * steps + s]) hi = max(hi, fp8::block_exponent(sc[pack::scale_offset(K, row, s * 16)], bias));
    row_hi[i] = hi;
    const float global = a.dequant_scale[e * a.scale_parts + (row / 16) % a.scale_parts] / pack::kAccumulatorFactor;
    a.row_scale[e * a.n + row] = ldexpf(global, fp8::row_exponent(hi, hi != INT_MIN, rounded));
  }
  __syncthreads();
  for (int64_t idx = i; idx < 16 * steps; idx += kThreads) {  // each block scale byte -> its fold code
    const int r = int(idx / steps);
    const int64_t s = idx % steps, row = rg * 16 + r;
    uint8_t& b = sc[pack::scale_offset(K, row, s * 16)];
    int u = 0;
    if (nonzero[idx]) {
      u = fp8::fold_code(fp8::block_exponent(b, bias), fp8::row_exponent(row_hi[r], true, rounded));
      if (u < 0) {
        if (s % block_steps == 0 || !nonzero[idx - 1]) {  // counted once per block, at its first nonzero step
          atomicAdd(&a.below[e], 1);
          atomicMin(&a.first_row[e], int(row));
        }
        u = 0;
      }
      u |= int(fp8::block_mantissa(b)) << 4;  // (NVFP4: the scale's mantissa picks the rounded table)
    }
    b = uint8_t(u);
  }
}

}  // namespace

void launch_prepare_fp8_weights(const PrepareFp8Args& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.weights && a.scales && a.dequant_scale && a.row_scale && a.below && a.first_row,
               "FP8 prepare: a null device pointer");
  FP4MOE_CHECK(a.experts > 0 && a.experts <= 65535, "FP8 prepare: " << a.experts << " experts (1 to 65535)");
  FP4MOE_CHECK(a.n > 0 && a.n % 16 == 0 && a.k > 0 && a.k % kPreparedKGranule == 0,
               "FP8 prepare: [" << a.n << ", " << a.k << "] is not prepared (N a multiple of 16, K of " << kPreparedKGranule
                                << ")");
  // (a byte per 16 of K per row in shared memory, beside 1088 static bytes, within the 48 KiB without opt-in)
  FP4MOE_CHECK(a.k <= 32768, "FP8 prepare: K = " << a.k << " is over 32768");
  FP4MOE_CHECK(a.scale_parts >= 1, "FP8 prepare: scale_parts = " << a.scale_parts);
  prepare_fp8_kernel<<<dim3(static_cast<unsigned>(a.n / 16), static_cast<unsigned>(a.experts)), kThreads,
                       static_cast<size_t>(a.k), stream>>>(a);
  FP4MOE_CHECK_LAUNCH("prepare_fp8_weights");
}

}  // namespace fp4moe::kernels
