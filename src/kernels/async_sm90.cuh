// Hopper asynchronous-copy primitives (sm_90+): mbarriers with transaction
// counts, 2D and 3D tensor (TMA) copies into shared memory, and
// named barriers. Written once as inline PTX; off sm_90 they compile to a trap
// (the planner only accepts the tiles that use them on sm_90).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "kernels/mma_sm80.cuh"

namespace fp4moe::kernels::async {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FP4MOE_SM90_ASYNC 1
#endif

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ptx::smem_addr(bar)), "r"(count));
#else
  (void)bar, (void)count;
  __trap();
#endif
}

// Makes the barrier initializations visible to the async proxy (the copy engine).
__device__ __forceinline__ void fence_barrier_init() {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Orders this thread's shared-memory accesses through the generic proxy (ld/st.shared,
// ldmatrix, cp.async) with later ones through the async proxy (tensor copies, wgmma)
// in both directions: writes before become visible to the async proxy, and reads
// before are done before an async-proxy write (a tensor copy refilling the slot) lands.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(ptx::smem_addr(bar)) : "memory");
#endif
}

// One arrival that also expects `bytes` more to land through complete_tx.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
                   ptx::smem_addr(bar)), "r"(bytes)
               : "memory");
#endif
}


// Blocks until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(ptx::smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

// One box of a 2D tensor map at element coordinates (c0 innermost, c1).
__device__ __forceinline__ void tensor_copy_2d(void* smem, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(ptx::smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(ptx::smem_addr(bar))
      : "memory");
#else
  (void)smem, (void)map, (void)c0, (void)c1, (void)bar;
  __trap();
#endif
}

// One box of a 3D tensor map at element coordinates (c0 innermost, c1, c2).
__device__ __forceinline__ void tensor_copy_3d(void* smem, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                               uint64_t* bar) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(ptx::smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(ptx::smem_addr(bar))
      : "memory");
#else
  (void)smem, (void)map, (void)c0, (void)c1, (void)c2, (void)bar;
  __trap();
#endif
}

// One box of a 4-dimensional tensor map (coordinates innermost first).
__device__ __forceinline__ void tensor_copy_4d(void* smem, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                               int32_t c3, uint64_t* bar) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::
          "r"(ptx::smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(ptx::smem_addr(bar))
      : "memory");
#else
  (void)smem, (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)bar;
  __trap();
#endif
}

// --- thread-block clusters (sm_90) ---

// Every thread of the cluster that has not exited meets here; what each wrote
// before (shared memory, mbarrier initializations) is visible to all after.
__device__ __forceinline__ void cluster_sync() {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The shared::cluster address of the variable at `local`'s offset in the
// cluster's CTA `cta_rank` (this CTA's own included).
__device__ __forceinline__ uint32_t cluster_smem_addr(const void* local, uint32_t cta_rank) {
  uint32_t remote = 0;
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(ptx::smem_addr(local)), "r"(cta_rank));
#else
  (void)local, (void)cta_rank;
  __trap();
#endif
  return remote;
}

// One arrival on the mbarrier at shared::cluster address `bar` (cluster_smem_addr).
// CTA-scope release, as the in-CTA arrival: it orders no global memory (a
// cluster-scope release would wait for the epilogue's stores to drain).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

// One box of a 2D tensor map into the same shared-memory offset of every CTA in
// `cta_mask`; each destination's mbarrier at `bar`'s offset receives the bytes.
__device__ __forceinline__ void tensor_copy_2d_multicast(void* smem, const CUtensorMap* map, int32_t c0, int32_t c1,
                                                         uint64_t* bar, uint16_t cta_mask) {
#ifdef FP4MOE_SM90_ASYNC
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(ptx::smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(ptx::smem_addr(bar)), "h"(cta_mask)
      : "memory");
#else
  (void)smem, (void)map, (void)c0, (void)c1, (void)bar, (void)cta_mask;
  __trap();
#endif
}

// Warpgroup register reallocation (sm_90a): a producer gives registers back,
// consumers take them. Every thread of the warpgroup executes it.
template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
#endif
}
template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
#endif
}

// Barrier `id` (1..15) among `threads` threads of the CTA (0 is __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fp4moe::kernels::async
