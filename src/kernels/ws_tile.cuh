// The tile as the warp-specialized kernel's pieces see it, said once: its
// description (plan::GemmTile), its shared-memory layout and the counts that
// follow from them. The schedule, producer, mainloop and epilogue derive
// from it and read these instead of deriving their own.
#pragma once
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

template <int TileIndex>
struct WsTile {
  static constexpr plan::GemmTile T = plan::kGemmTiles[TileIndex];
  static constexpr plan::GemmSmemLayout L{T};
  static constexpr int kMB = T.warp_m_tiles;  // m64 blocks per consumer warpgroup (mma.sync: m16 tiles per warp)
  static constexpr int kCluster = T.cluster_n;
  static constexpr int kProducerThreads = plan::GemmTile::kProducerThreads;
  static constexpr int kConsumerThreads = T.consumer_warpgroups() * 128;
};

}  // namespace fp4moe::kernels::detail
