// Hopper warpgroup MMA (sm_90a) with the A operand in registers: the
// dequantized FP4 weights, laid out exactly like mma.sync's m16n8k16 A
// fragment per warp (bf16, k16), or the weights as e4m3 (k32,
// format/fp8_fragment.hpp); B (the tokens' activations) from shared memory in
// the 128-byte-swizzled K-major layout. Off sm_90a these compile to a trap: the
// planner only accepts warpgroup tiles on sm_90.
#pragma once
#include <cstdint>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // the N = 24, 40, 48, 56, 80, 136 and 144 atoms

namespace fp4moe::kernels::wgmma {

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups
// 1024 bytes apart (leading byte offset unused by swizzled layouts: 1).
__device__ __forceinline__ uint64_t smem_desc_k_major_sw128(uint32_t smem_byte_addr) {
  uint64_t d = 0;
  d |= uint64_t((smem_byte_addr & 0x3FFFF) >> 4);
  d |= uint64_t(1) << 16;
  d |= uint64_t(1024 >> 4) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

// The descriptor of the same layout `bytes` further on (a multiple of 16): the
// start address is the low 14-bit field in 16-byte units, and shared-memory
// addresses stay below 2^18, so the sum never carries out of it. One add per
// wgmma instead of rebuilding the descriptor from the address.
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = uint32_t(desc) + (bytes >> 4);  // the low word alone: no carry to propagate
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit_group() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wait_group() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving register accesses across the async MMA.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// D[64 x N] += A[64 x K] (registers) * B[K x N] (shared memory), fp32
// accumulators, through CuTe's register-A atoms (one instantiation per N):
// bf16 x bf16 (K = 16) and e4m3 x e4m3 (K = 32).
template <int N, bool Fp8> struct RsAtom;
template <> struct RsAtom<8, false> { using type = cute::SM90::GMMA::MMA_64x8x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<16, false> { using type = cute::SM90::GMMA::MMA_64x16x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<24, false> { using type = cute::SM90::GMMA::MMA_64x24x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<32, false> { using type = cute::SM90::GMMA::MMA_64x32x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<40, false> { using type = cute::SM90::GMMA::MMA_64x40x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<48, false> { using type = cute::SM90::GMMA::MMA_64x48x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<56, false> { using type = cute::SM90::GMMA::MMA_64x56x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<80, false> { using type = cute::SM90::GMMA::MMA_64x80x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<64, false> { using type = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<96, false> { using type = cute::SM90::GMMA::MMA_64x96x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<112, false> { using type = cute::SM90::GMMA::MMA_64x112x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<136, false> { using type = cute::SM90::GMMA::MMA_64x136x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<144, false> { using type = cute::SM90::GMMA::MMA_64x144x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<128, false> { using type = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; };
template <> struct RsAtom<8, true> { using type = cute::SM90::GMMA::MMA_64x8x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<16, true> { using type = cute::SM90::GMMA::MMA_64x16x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<24, true> { using type = cute::SM90::GMMA::MMA_64x24x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<32, true> { using type = cute::SM90::GMMA::MMA_64x32x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<40, true> { using type = cute::SM90::GMMA::MMA_64x40x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<48, true> { using type = cute::SM90::GMMA::MMA_64x48x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<56, true> { using type = cute::SM90::GMMA::MMA_64x56x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<64, true> { using type = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<80, true> { using type = cute::SM90::GMMA::MMA_64x80x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<96, true> { using type = cute::SM90::GMMA::MMA_64x96x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<112, true> { using type = cute::SM90::GMMA::MMA_64x112x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<128, true> { using type = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<136, true> { using type = cute::SM90::GMMA::MMA_64x136x32_F32E4M3E4M3_RS_TN<>; };
template <> struct RsAtom<144, true> { using type = cute::SM90::GMMA::MMA_64x144x32_F32E4M3E4M3_RS_TN<>; };

// accumulate = false: D = A * B (the accumulators' old values are ignored).
template <int N, bool Fp8 = false>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate = true) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const auto scale_d = accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero;
  [&]<size_t... I>(std::index_sequence<I...>) {
    RsAtom<N, Fp8>::type::fma(a[0], a[1], a[2], a[3], desc_b, d[I]..., scale_d);
  }(std::make_index_sequence<N / 2>{});
#else
  (void)d, (void)a, (void)desc_b, (void)accumulate;
  __trap();  // the planner never launches warpgroup-MMA tiles off sm_90a
#endif
}

}  // namespace fp4moe::kernels::wgmma
