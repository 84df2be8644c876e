// Our FINALIZE fusion for the sizeof tests: TensorRT-LLM's scatter epilogue
// (cutlass_extensions/epilogue/fusion/sm90_visitor_scatter.hpp) is not part of
// CUTLASS. This epilogue visitor tree has the same nodes that own shared memory
// (a Sm90RowBroadcast of the bias, or of the router scales with swap_ab; the
// other vector a Sm90ColBroadcast, which has none) and a scatter-store root with
// empty SharedStorage, so its sizeof equals TensorRT-LLM's. On sm_100 CUTLASS
// forwards the fusion callbacks to the sm_90 ones and constructs them, hence
// the constructors. Built only to be measured, never run.
#pragma once
#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"

namespace fp4moe_cutlass_test {

// ---- our finalize fusion: the shared-memory shape of TRT-LLM's scatter epilogue ----

// Root of the tree: stores (red.add) rows into the final output through the
// scatter index; it stages nothing in shared memory.
struct ScatterStoreNode {
  struct SharedStorage {};
  struct Arguments {
    void* out = nullptr;
  };
  using Params = Arguments;
  CUTLASS_HOST_DEVICE ScatterStoreNode() {}
  CUTLASS_HOST_DEVICE ScatterStoreNode(Params const&, SharedStorage const&) {}
};

template <class LayoutOut_, class Output_, class Compute_, class Bias_, class Scale_, bool ScaleAlongN_>
struct FinalizeScatter : cutlass::epilogue::fusion::FusionOperation {
  using ElementOutput = Output_;
  using ElementCompute = Compute_;
  using ElementBias = Bias_;
  using ElementScalar = Scale_;
  using ElementAux = Output_;  // the epilogue stages the output tile as its "aux" tile
  using GmemLayoutTagAux = LayoutOut_;
  static constexpr int AlignmentAux = 128 / cute::sizeof_bits_v<Output_>;
  static constexpr bool IsAuxOutSupported = true;
};

}  // namespace fp4moe_cutlass_test

namespace fp4moe_cutlass_test {

// scale * (alpha * acc + bias), then scatter. Without swap_ab the router scale
// varies along M (column vector) and the bias along N (row vector, staged in
// smem); with swap_ab it is the other way round.
template <class Compute, class Bias, class Scale, bool ScaleAlongN, class CtaTile>
using FinalizeScatterTree = cutlass::epilogue::fusion::Sm90EVT<
    ScatterStoreNode,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, Compute, Compute, cutlass::FloatRoundStyle::round_to_nearest>,
        cute::conditional_t<ScaleAlongN,
                            cutlass::epilogue::fusion::Sm90RowBroadcast<0, CtaTile, Scale*, Compute, cute::Stride<cute::_0, cute::_1, int64_t>, 1>,
                            cutlass::epilogue::fusion::Sm90ColBroadcast<0, CtaTile, Scale*, Compute, cute::Stride<cute::_1, cute::_0, int64_t>, 1>>,
        cutlass::epilogue::fusion::Sm90EVT<
            cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Compute, Compute,
                                                   cutlass::FloatRoundStyle::round_to_nearest>,
            cutlass::epilogue::fusion::Sm90ScalarBroadcastPtrArray<Scale, cute::Stride<cute::_0, cute::_0, int64_t>>,
            cutlass::epilogue::fusion::Sm90AccFetch,
            cute::conditional_t<ScaleAlongN,
                                cutlass::epilogue::fusion::Sm90ColBroadcast<0, CtaTile, Bias*, Compute, cute::Stride<cute::_1, cute::_0, int64_t>>,
                                cutlass::epilogue::fusion::Sm90RowBroadcast<0, CtaTile, Bias*, Compute, cute::Stride<cute::_0, cute::_1, int64_t>>>>>>;

}  // namespace fp4moe_cutlass_test

namespace cutlass::epilogue::fusion {

template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore, int NumEpilogueWarpGroups,
          class LayoutOut, class Output, class Compute, class Bias, class Scale, bool ScaleAlongN, class CtaTile,
          class EpilogueTile, class SmemLayoutAtom, class CopyOpR2S>
struct FusionCallbacks<
    epilogue::Sm90PtrArrayTmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore,
                                             NumEpilogueWarpGroups>,
    fp4moe_cutlass_test::FinalizeScatter<LayoutOut, Output, Compute, Bias, Scale, ScaleAlongN>, CtaTile, EpilogueTile,
    SmemLayoutAtom, CopyOpR2S> : fp4moe_cutlass_test::FinalizeScatterTree<Compute, Bias, Scale, ScaleAlongN, CtaTile> {
  using Base = fp4moe_cutlass_test::FinalizeScatterTree<Compute, Bias, Scale, ScaleAlongN, CtaTile>;
  using Base::Base;
  using Operation = fp4moe_cutlass_test::FinalizeScatter<LayoutOut, Output, Compute, Bias, Scale, ScaleAlongN>;
};

}  // namespace cutlass::epilogue::fusion
