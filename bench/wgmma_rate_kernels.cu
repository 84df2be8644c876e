// What the decode K loop alone can reach on sm_90a, by token width N: wgmma
// m64 x N x k16 with the A fragment in registers and B (the tokens) from shared
// memory in the 128-byte-swizzled K-major layout the decode tiles stage, one
// 64-row block per consumer warpgroup, the fragments made (WgmmaRateCase::mode)
//   0  from the raw code words (no dequantization: the tensor-core share),
//   1  by dequant_fragment, as the decode tiles do (the K loop's math),
//   2  by dequant_fragment with no wgmma (the dequantization's share),
//   3  by the unpack alone, without the scale multiplies (HMUL2),
//   4  by the unpack and four integer operations where the HMUL2 were (the same
//      instruction count as 1, none of it on the half-precision pipe);
// with `depth` fragment buffers (wgmma groups in flight per warpgroup; the
// decode tiles keep two) and one or two accumulator sets (even and odd k16
// steps). No global loads, schedule or epilogue: against the full kernels'
// times this says how much of them the K loop's math explains. Modes 3 and 4
// compute nothing meaningful: they price instruction mixes.
// The rate counts the N columns multiplied (all of them: no padding here),
// against cuBLAS bf16 timed in the same run.
#include "bench/wgmma_rate_kernels.hpp"

#include <cstdint>

#include "format/gemm_pack.hpp"
#include "kernels/async_sm90.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/mma_sm80.cuh"
#include "kernels/wgmma_sm90.cuh"
#include "common/cuda_check.hpp"

namespace fp4moe::bench {
namespace {

using namespace fp4moe::kernels;

static_assert(kWgmmaRateStepsPerPass == 2 * 4, "a pass is two 64-k granules of four k16 steps");
constexpr int kTokenRows = 256;                // rows of the B tile in shared memory (the widest N)
constexpr int kBBytes = kTokenRows * 2 * 128;  // two 64-k atoms of 128-byte rows
constexpr int kWeightBytesPerWarp = 2 * pack::kWeightGranuleBytes;  // a pass's two granules
constexpr int kScaleBytesPerWarp = pack::kScaleGranuleBytes;

template <int N, int kDepth, int kMode, int kAccSets, int kWarpgroups>
__global__ void __launch_bounds__(kWarpgroups * 128, 1) wgmma_loop(int passes, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // B and each warp's weight and scale granules: small nonzero bf16 values and
  // fixed code bytes (the values do not change the instruction stream)
  for (int i = tid; i < kBBytes / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0x3C003C00u ^ (i & 0x00FF00FFu);
  uint8_t* wsm = smem + kBBytes + warp * (kWeightBytesPerWarp + kScaleBytesPerWarp);
  for (int i = lane; i < (kWeightBytesPerWarp + kScaleBytesPerWarp) / 4; i += 32)
    reinterpret_cast<uint32_t*>(wsm)[i] = 0x5A3C1E0Fu * uint32_t(i + 1);
  async::fence_proxy_async_shared();
  __syncthreads();
  constexpr uint32_t scale_add2 = pack::scale_add2(pack::scale_exponent_add(pack::kNvfp4ScaleBias));
  const uint64_t bdesc = wgmma::smem_desc_k_major_sw128(ptx::smem_addr(smem));
  float acc[kAccSets][N / 2] = {};
  uint32_t fold = 0;  // mode 2: every fragment is folded in, so none is dead code
  for (int pass = 0; pass < passes; ++pass) {
    uint32_t a[kDepth][4];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint4 wq = *reinterpret_cast<const uint4*>(wsm + kk * pack::kWeightGranuleBytes + lane * 16);
      const uint4 sq = *reinterpret_cast<const uint4*>(wsm + kWeightBytesPerWarp + (lane / 4) * 16);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int q = kk * 4 + t, buf = q % kDepth;
        const uint32_t word = t == 0 ? wq.x : t == 1 ? wq.y : t == 2 ? wq.z : wq.w;
        if constexpr (kMode == 0) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[buf][r] = word;
        } else if constexpr (kMode == 1 || kMode == 2) {
          uint4 w = wq;  // mode 2 varies the words by pass: with no wgmma fence, ptxas would hoist them
          if constexpr (kMode == 2) w.x ^= pass, w.y ^= pass, w.z ^= pass, w.w ^= pass;
          kernels::detail::dequant_fragment(w, sq, t, (kk % 2) * 4 + t, scale_add2, a[buf]);
        } else {
          pack::unpack_word(word, a[buf]);
          if constexpr (kMode == 4) {
            const uint32_t sword = t < 2 ? sq.x : sq.y;
#pragma unroll
            for (int r = 0; r < 4; ++r) a[buf][r] = (a[buf][r] ^ sword) + scale_add2;
          }
        }
        if constexpr (kMode == 2) {
          fold ^= a[buf][0] ^ a[buf][1] ^ a[buf][2] ^ a[buf][3];
          asm volatile("" ::: "memory");  // the next step reloads its words, as after a wgmma fence
        } else {
#pragma unroll
          for (int r = 0; r < 4; ++r) wgmma::fence_operand(a[buf][r]);
          wgmma::fence();
          wgmma::mma_rs<N>(acc[q % kAccSets], a[buf], wgmma::smem_desc_advance(bdesc, kk * (kTokenRows * 128) + t * 32));
          wgmma::commit_group();
          wgmma::wait_group<kDepth - 1>();
        }
      }
    }
  }
  wgmma::wait_group<0>();
  float s = __uint_as_float(fold & 0x3FFFFFFFu);
#pragma unroll
  for (int j = 0; j < kAccSets; ++j)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      wgmma::fence_operand(acc[j][i]);
      s += acc[j][i];
    }
  if (s == 12345.0f) sink[blockIdx.x * blockDim.x + tid] = s;  // (almost never stores: keeps the work live)
#else
  (void)passes, (void)sink;
  __trap();
#endif
}

struct Case {
  WgmmaRateCase info;
  void (*kernel)(int, float*);
};

template <int N, int kDepth, int kMode, int kAccSets = 1, int kWarpgroups = 4>
Case make_case() {
  return {{N, kDepth, kMode, kWarpgroups, kAccSets}, &wgmma_loop<N, kDepth, kMode, kAccSets, kWarpgroups>};
}

// Four consumer warpgroups up to N = 64 (the decode tiles of 16..64 tokens per
// expert), two above (as the nt128 and nt144 tiles, for their registers), and
// six and eight at 16 and 32 (as three or two CTAs per SM would hold).
const Case kCases[] = {
    make_case<16, 2, 0>(),          make_case<16, 2, 1>(),          make_case<16, 2, 2>(),    make_case<16, 2, 3>(),
    make_case<16, 2, 0, 2>(),       make_case<16, 2, 1, 2>(),       make_case<16, 2, 1, 1, 6>(), make_case<16, 2, 1, 1, 8>(),
    make_case<32, 2, 0>(),          make_case<32, 2, 1>(),          make_case<32, 2, 3>(),    make_case<32, 2, 4>(),
    make_case<32, 4, 1>(),          make_case<32, 2, 0, 2>(),       make_case<32, 2, 1, 2>(),
    make_case<32, 2, 0, 1, 6>(),    make_case<32, 2, 1, 1, 6>(),    make_case<32, 2, 1, 1, 8>(),
    make_case<48, 2, 0>(),          make_case<48, 2, 1>(),          make_case<48, 2, 1, 2>(),
    make_case<64, 2, 0>(),          make_case<64, 2, 1>(),          make_case<64, 2, 3>(),    make_case<64, 2, 4>(),
    make_case<64, 2, 1, 2>(),       make_case<64, 2, 0, 1, 2>(),    make_case<64, 2, 1, 1, 2>(),
    make_case<80, 2, 0, 1, 2>(),    make_case<80, 2, 1, 1, 2>(),
    make_case<128, 2, 0, 1, 2>(),   make_case<128, 2, 1, 1, 2>(),
    make_case<144, 2, 0, 1, 2>(),   make_case<144, 2, 1, 1, 2>(),
};

}  // namespace

std::vector<WgmmaRateCase> wgmma_rate_cases() {
  std::vector<WgmmaRateCase> v;
  for (const Case& c : kCases) v.push_back(c.info);
  return v;
}

double wgmma_rate_flop_per_pass(const WgmmaRateCase& c) {
  return double(kWgmmaRateStepsPerPass) * c.warpgroups * 2.0 * 64 * c.n * 16;
}

void launch_wgmma_rate(size_t index, int ctas, int passes, float* sink, cudaStream_t stream) {
  const Case& c = kCases[index];
  const int smem_bytes = kBBytes + 32 * (kWeightBytesPerWarp + kScaleBytesPerWarp);  // up to 8 warpgroups
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(c.kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_bytes));
  c.kernel<<<ctas, c.info.warpgroups * 128, smem_bytes, stream>>>(passes, sink);
  FP4MOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp4moe::bench
