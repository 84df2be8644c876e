// GPU prepare: one thread per (expert, 16-row group, k64 granule, lane) builds
// the lane's four words; one thread per (expert, row, 16-column block) writes
// its prepared scale. A zero scale or a block of +-0 codes is stored as scale
// byte 0 with its codes cleared, as the host packer does (exact).
#include "format/prepare_gemm.hpp"
#include "format/gemm_pack.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "kernels/prepare_weights.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

// The checkpoint side of one expert (`a` with n_src, k_src set).
struct Source {
  const PrepareWeightsArgs& a;
  int64_t e;

  // The checkpoint row of a prepared row, -1 for a padding row.
  __device__ int64_t row(int64_t prepared_row) const {
    if (a.gated) return pack::gated_source_row(prepared_row, a.n_src / 2, a.order);
    return prepared_row < a.n_src ? prepared_row : -1;
  }
  __device__ const uint8_t* codes(int64_t src_row, int64_t col) const {
    return a.packed + (e * a.n_src + src_row) * (a.k_src / 2) + col / 2;
  }
  __device__ uint8_t scale_byte(int64_t src_row, int64_t col) const {
    const int64_t cols = a.k_src / a.block, kb = col / a.block;
    if (!a.swizzled_scales) return a.scales[(e * a.n_src + src_row) * cols + kb];
    return a.scales[e * pack::swizzled_bytes(a.n_src, cols) + pack::swizzled_offset(src_row, kb, cols)];
  }
  // The 16 codes of the block at col: padding, a zero scale, or every code +-0.
  __device__ bool zero_block(int64_t src_row, int64_t col) const {
    if (src_row < 0 || col >= a.k_src) return true;
    const uint2 c = *reinterpret_cast<const uint2*>(codes(src_row, col - col % 16));
    return a.prepared_scale[scale_byte(src_row, col)] == -2 || ((c.x | c.y) & 0x77777777u) == 0;
  }
};

// The two codes of one checkpoint byte (columns c, c + 1) into register kReg's halves.
template <int kReg>
__device__ __forceinline__ uint32_t place_pair(uint32_t word, uint8_t byte) {
  constexpr pack::CodeBits lo = pack::kCodeBits[kReg][0], hi = pack::kCodeBits[kReg][1];
  return pack::place_code_bits(pack::place_code_bits(word, lo, byte & 15), hi, uint8_t(byte >> 4));
}

__global__ void __launch_bounds__(256) prepare_codes_kernel(const PrepareWeightsArgs a) {
  const int64_t granules = a.n / 16 * (a.k / 64);
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.experts * granules * pack::kLanes) return;
  const int lane = int(idx % pack::kLanes);
  const int64_t g = idx / pack::kLanes, e = g / granules, rg = (g % granules) / (a.k / 64), kc = g % (a.k / 64);
  const Source src{a, e};
  const int64_t r0 = src.row(rg * 16 + lane / 4), r1 = src.row(rg * 16 + lane / 4 + 8);
  uint8_t* out = a.weights + e * (a.n * a.k / 2);
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int64_t c = kc * 64 + t * 16 + (lane % 4) * 2;
    const bool z0 = src.zero_block(r0, c), z1 = src.zero_block(r1, c);
    // reg = (row + 8) + 2 (column + 8): bytes at rows r0, r1 and columns c, c + 8
    uint32_t w = 0;
    w = place_pair<0>(w, z0 ? 0 : src.codes(r0, c)[0]);
    w = place_pair<1>(w, z1 ? 0 : src.codes(r1, c)[0]);
    w = place_pair<2>(w, z0 ? 0 : src.codes(r0, c)[4]);
    w = place_pair<3>(w, z1 ? 0 : src.codes(r1, c)[4]);
    *reinterpret_cast<uint32_t*>(out + pack::word_offset(a.k, rg, kc, lane, t)) = w;
  }
}

__global__ void __launch_bounds__(256) prepare_scales_kernel(const PrepareWeightsArgs a) {
  const int64_t blocks = a.k / 16;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.experts * a.n * blocks) return;
  const int64_t e = idx / (a.n * blocks), row = (idx / blocks) % a.n, col = (idx % blocks) * 16;
  const Source src{a, e};
  const int64_t r = src.row(row);
  int16_t p = 0;
  if (!src.zero_block(r, col)) {
    p = a.prepared_scale[src.scale_byte(r, col)];
    if (p < 0) atomicMin(a.first_bad, static_cast<unsigned long long>(idx)), p = 0;
  }
  a.prepared_scales[e * pack::scale_bytes(a.n, a.k) + pack::scale_offset(a.k, row, col)] = static_cast<uint8_t>(p);
}

}  // namespace

void launch_prepare_weights(const PrepareWeightsArgs& args, cudaStream_t stream) {
  PrepareWeightsArgs a = args;
  if (!a.n_src) a.n_src = a.n;
  if (!a.k_src) a.k_src = a.k;
  FP4MOE_CHECK(a.n > 0 && a.n % 16 == 0 && (!a.gated || a.n % 32 == 0),
               "prepare_weights: N = " << a.n << " is not a positive multiple of " << (a.gated ? 32 : 16));
  FP4MOE_CHECK(a.k > 0 && a.k % kPreparedKGranule == 0,
               "prepare_weights: K = " << a.k << " is not a positive multiple of " << kPreparedKGranule);
  FP4MOE_CHECK(a.n_src > 0 && a.n_src <= a.n && (!a.gated || a.n_src % 2 == 0),
               "prepare_weights: the checkpoint's N = " << a.n_src << " is not " << (a.gated ? "an even number " : "")
                                                        << "in 1.." << a.n);
  FP4MOE_CHECK(a.block == 16 || a.block == 32, "prepare_weights: block = " << a.block << " is not 16 or 32");
  FP4MOE_CHECK(a.k_src > 0 && a.k_src <= a.k && a.k_src % 16 == 0 && a.k_src % a.block == 0,
               "prepare_weights: the checkpoint's K = " << a.k_src << " is not a multiple of 16 and of the block "
                                                        << a.block << " in 1.." << a.k);
  FP4MOE_CHECK(a.experts > 0, "prepare_weights: experts = " << a.experts << " must be positive");
  FP4MOE_CHECK(a.packed && a.scales && a.weights && a.prepared_scales && a.first_bad,
               "prepare_weights: a device pointer is null");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(a.packed) % 8 == 0, "prepare_weights: the packed weights are not 8-byte aligned");
  const int64_t words = a.experts * (a.n / 16) * (a.k / 64) * pack::kLanes;
  prepare_codes_kernel<<<static_cast<unsigned>((words + 255) / 256), 256, 0, stream>>>(a);
  FP4MOE_CHECK_LAUNCH("prepare_codes_kernel");
  const int64_t scales = a.experts * a.n * (a.k / 16);
  prepare_scales_kernel<<<static_cast<unsigned>((scales + 255) / 256), 256, 0, stream>>>(a);
  FP4MOE_CHECK_LAUNCH("prepare_scales_kernel");
}

}  // namespace fp4moe::kernels
