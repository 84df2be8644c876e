// The warp-specialized kernel's pipeline: a ring of shared-memory stages
// between the producer and the consumers. Per slot a "full" mbarrier (the
// producer's expect-tx arrival; its tensor copies' bytes complete the phase)
// and an "empty" one (every consumer thread of the cluster arrives once its
// reads are done), and a cursor (slot, phase) that each side advances.
#pragma once
#include <cstdint>

#include "kernels/async_sm90.cuh"

namespace fp4moe::kernels::detail {

struct RingCursor {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++slot == stages) slot = 0, phase ^= 1;
  }
};

// Cluster: CTAs whose consumers all read every slot (the producers multicast
// the activations), so a slot is free once the consumers of each have arrived.
template <int Cluster>
struct StageRing {
  static_assert(Cluster == 1 || Cluster == 2, "release arrives on this CTA's and one peer's barriers");
  uint64_t* full;
  uint64_t* empty;
  int stages;

  // One thread; the barriers are visible to the cluster after a cluster sync.
  __device__ void init(int consumer_threads) const {
    for (int s = 0; s < stages; ++s) {
      async::mbarrier_init(&full[s], 1);                            // the producer's expect_tx arrival
      async::mbarrier_init(&empty[s], consumer_threads * Cluster);  // every consumer thread of the cluster
    }
    async::fence_barrier_init();
  }
  __device__ __forceinline__ void wait_full(const RingCursor& c) const { async::mbarrier_wait(&full[c.slot], c.phase); }
  __device__ __forceinline__ void wait_empty(const RingCursor& c) const { async::mbarrier_wait(&empty[c.slot], c.phase ^ 1); }
  // Every consumer thread arrives (its own reads are done): a lane-0 branch
  // would make ptxas serialize the wgmma pipeline (C7513). In a cluster each
  // also arrives on the peer CTA's barrier (predicating that on one thread per
  // warpgroup serialized the pipeline too).
  // (Clusters run along x: the peer of CTA x is x ^ 1.)
  __device__ __forceinline__ void release(int slot) const {
    if constexpr (Cluster > 1)
      async::mbarrier_arrive_cluster(async::cluster_smem_addr(&empty[slot], uint32_t((int(blockIdx.x) % Cluster) ^ 1)));
    async::mbarrier_arrive(&empty[slot]);
  }
};

}  // namespace fp4moe::kernels::detail
