// What the two grouped-GEMM kernels share, each piece in its own header:
//   dequant_fragment.cuh     FP4 weights to bf16 MMA operands
//   gemm_scheduler.cuh       token chunks per expert and the work items
//   gemm_epilogue.cuh        the staging tile and its store, SwiGLU or scatter-add
// and here the table of each tile's kernel.
//   fp4_grouped_gemm.cu           every thread loads and multiplies (sm_80, sm_90a, sm_120a)
//   fp4_grouped_gemm_ws_sm90.cu   a producer warpgroup loads, consumer warpgroups multiply (sm_90a)
#pragma once
#include <array>
#include <utility>

#include "kernels/dequant_fragment.cuh"
#include "kernels/gemm_epilogue.cuh"
#include "kernels/gemm_scheduler.cuh"
#include "kernels/grouped_gemm_params.hpp"
#include "plan/gemm_layout.hpp"

namespace fp4moe::kernels::detail {

// One entry per tile of plan::kGemmTiles: Pick<I>::fn is tile I's kernel in
// this file, or null where the other kernel file instantiates it.
template <template <int> class Pick, int... I>
constexpr std::array<KernelFn, sizeof...(I)> tile_kernel_table(std::integer_sequence<int, I...>) {
  return {Pick<I>::fn...};
}
template <template <int> class Pick>
constexpr auto tile_kernel_table() {
  return tile_kernel_table<Pick>(std::make_integer_sequence<int, plan::kNumGemmTiles>{});
}

}  // namespace fp4moe::kernels::detail
