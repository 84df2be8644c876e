// Compares plan/cutlass_sm100_model.hpp with CUTLASS itself on sm_100: the
// types below are built the way TensorRT-LLM's MoE launcher builds them
// (moe_gemm_tma_ws_launcher.inl:215-567): MMA tile M = CTA_M x cluster M,
// elements tuple<e2m1, ue4m3>, C void, D bf16 (FINALIZE: void with the scatter
// fusion, finalize_scatter.hpp), epilogue PtrArrayTmaWarpSpecialized1Sm/2Sm with
// a 128x64 subtile at N = 256, mainloop KernelPtrArrayTmaWarpSpecialized{1,2}SmNvf4Sm100
// with StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>, kernel
// GemmUniversal<GroupProblemShape>. Every sizeof the model predicts, at the
// version of the headers compiled against, is a static_assert.
#include <gtest/gtest.h>

#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/version.h"
#include "finalize_scatter.hpp"
#include "plan/cutlass_blockscaled_model.hpp"

namespace fp4moe_cutlass_test {

namespace model = fp4moe::plan::cutlass;
inline constexpr model::Version kHeaders{CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH};

using bf16 = cutlass::bfloat16_t;
using e2m1 = cutlass::float_e2m1_t;
using ue4m3 = cutlass::float_ue4m3_t;

// The builder's capacity after its kernel carveout: renamed between versions.
template <class B, class = void>
struct ReducedCapacity {
  static constexpr int value = B::Sm100ReducedSmemCapacityBytes;
};
template <class B>
struct ReducedCapacity<B, cute::void_t<decltype(B::ReducedSmemCapacityBytes)>> {
  static constexpr int value = B::ReducedSmemCapacityBytes;
};

template <int M, int N, int K, int ClusterM, bool Finalize, bool SwapAB>
struct Sm100Grouped {
  static constexpr model::Config kConfig{100, model::Format::nvfp4, M, N, K,
                                         Finalize ? model::Epilogue::finalize : model::Epilogue::none,
                                         SwapAB, model::OutputType::bf16, kHeaders, 0, ClusterM};
  static_assert(model::validate(kConfig).ok(), "the model rejects this tile");
  static constexpr model::Model kModel = model::model(kConfig);

  using Tile = cute::Shape<cute::Int<M>, cute::Int<N>, cute::Int<K>>;  // L:245-246 (M = CTA_M x cluster M)
  using Cluster = cute::Shape<cute::Int<ClusterM>, cute::_1, cute::_1>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutCD = cute::conditional_t<SwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using EpilogueSchedule = cute::conditional_t<ClusterM == 2, cutlass::epilogue::PtrArrayTmaWarpSpecialized2Sm,
                                               cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm>;  // L:401-406
  using EpilogueTile = cute::conditional_t<N == 256, cute::Shape<cute::_128, cute::_64>,
                                           cutlass::epilogue::collective::EpilogueTileAuto>;  // L:426-428
  static constexpr int kAlignC = 128 / 4, kAlignD = 128 / 16;                                // L:368-381
  struct NoneBuilder {
    using CollectiveOp = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, Tile, Cluster, EpilogueTile, float, float,
        void, LayoutCD*, kAlignC, bf16, LayoutCD*, kAlignD, EpilogueSchedule>::CollectiveOp;
  };
  struct FinalizeBuilder {
    using CollectiveOp = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, Tile, Cluster, EpilogueTile, float, float,
        void, LayoutCD*, kAlignC, void, LayoutCD*, kAlignD, EpilogueSchedule,
        FinalizeScatter<LayoutCD, bf16, float, bf16, float, SwapAB>>::CollectiveOp;
  };
  using Epilogue = typename cute::conditional_t<Finalize, FinalizeBuilder, NoneBuilder>::CollectiveOp;

  using Element = cute::tuple<e2m1, ue4m3>;  // L:338-350
  using Schedule = cute::conditional_t<ClusterM == 2, cutlass::gemm::KernelPtrArrayTmaWarpSpecialized2SmNvf4Sm100,
                                       cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100>;  // L:508-523
  using Builder = cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, Element, LayoutA*, 32, Element, LayoutB*, 32,
      float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Schedule>;
  using Mainloop = typename Builder::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cutlass::gemm::GroupProblemShape<cute::Shape<int64_t, int64_t, int64_t>>, Mainloop, Epilogue, void, void>;
  using KernelStorage = typename Kernel::SharedStorage;

  // The carveout and its parts.
  static_assert(sizeof(typename Epilogue::SharedStorage) == kModel.epilogue.total, "epilogue SharedStorage");
  static_assert(sizeof(typename Epilogue::TensorStorage) == kModel.epilogue.tensors, "epilogue TensorStorage");
  static_assert(alignof(typename Epilogue::TensorStorage) == kModel.epilogue.alignment, "epilogue alignment");
  static_assert(sizeof(typename Epilogue::TensorMapStorage) == kModel.epilogue.tensormaps, "epilogue tensor maps");
  static_assert(sizeof(typename Epilogue::PipelineStorage) == kModel.epilogue.pipeline, "epilogue load pipeline");
  // What the builder decided.
  static_assert(Builder::KernelSmemCarveout == kModel.builder.capacity_reduction, "KernelSmemCarveout");
  static_assert(ReducedCapacity<Builder>::value == kModel.builder.capacity - kModel.builder.capacity_reduction,
                "builder capacity");
  static_assert(Mainloop::DispatchPolicy::Stages == kModel.builder.stages, "builder stage count");
  // What the kernel then needs.
  static_assert(sizeof(typename Mainloop::TensorStorage) == kModel.kernel.mainloop_tensors, "mainloop TensorStorage");
  static_assert(sizeof(typename Mainloop::PipelineStorage) == kModel.kernel.mainloop_pipeline, "mainloop pipeline");
  static_assert(sizeof(typename KernelStorage::PipelineStorage) == kModel.kernel.pipelines, "kernel PipelineStorage");
  static_assert(sizeof(KernelStorage) == kModel.kernel.total, "kernel SharedStorage");
  static_assert(Kernel::SharedStorageSize == kModel.kernel.total, "GemmKernel::SharedStorageSize");

  static void report(const char* name) {
    std::printf("[cutlass %d.%d.%d] sm_100 %-34s stages %d (model %d)  epilogue %6zu (model %6lld)  kernel %6zu (model %6lld)\n",
                CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, name, Mainloop::DispatchPolicy::Stages,
                kModel.builder.stages, sizeof(typename Epilogue::SharedStorage),
                static_cast<long long>(kModel.epilogue.total), sizeof(KernelStorage),
                static_cast<long long>(kModel.kernel.total));
    EXPECT_EQ(Mainloop::DispatchPolicy::Stages, kModel.builder.stages);
    EXPECT_EQ(static_cast<long long>(sizeof(KernelStorage)), static_cast<long long>(kModel.kernel.total));
  }
};

// The configurations the issue pins, and the other N of FlashInfer's generator.
TEST(CutlassSm100Sizeof, Nvfp4_128x128x256_Cluster1_None) {
  Sm100Grouped<128, 128, 256, 1, false, false>::report("128x128x256 1x1x1 none");
}
TEST(CutlassSm100Sizeof, Nvfp4_128x128x256_Cluster1_None_SwapAB) {
  Sm100Grouped<128, 128, 256, 1, false, true>::report("128x128x256 1x1x1 none swap");
}
TEST(CutlassSm100Sizeof, Nvfp4_256x128x256_Cluster2_Finalize) {
  Sm100Grouped<256, 128, 256, 2, true, false>::report("256x128x256 2x1x1 finalize");
}
TEST(CutlassSm100Sizeof, Nvfp4_256x256x256_Cluster2_Finalize_SwapAB) {
  Sm100Grouped<256, 256, 256, 2, true, true>::report("256x256x256 2x1x1 finalize swap");
}
TEST(CutlassSm100Sizeof, Nvfp4_128x64x256_Cluster1_Finalize) {
  Sm100Grouped<128, 64, 256, 1, true, false>::report("128x64x256 1x1x1 finalize");
}

}  // namespace fp4moe_cutlass_test
