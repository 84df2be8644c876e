// The tensor maps (TMA descriptors) of the warp-specialized tiles' operands:
// the activation rows in the 128-byte-swizzled layout wgmma reads, and the
// prepared weights and block scales as plain bytes (plan/tma_geometry.hpp).
#include <cuda.h>
#include <cuda_runtime.h>

#include "fp4moe/error.hpp"
#include "kernels/grouped_gemm_kernels.hpp"
#include "plan/tma_geometry.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

// A driver function through the runtime's driver entry point (no -lcuda).
template <typename Fn>
Fn driver_function(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  FP4MOE_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  FP4MOE_CHECK(found == cudaDriverEntryPointSuccess && fn, "the driver has no " << name << " (CUDA 12.0+ needed)");
  return reinterpret_cast<Fn>(fn);
}

CUtensorMap encode_tiled(CUtensorMapDataType type, cuuint32_t rank, const void* base, const cuuint64_t* dims,
                         const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle, const char* what) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = driver_function<Encode>("cuTensorMapEncodeTiled");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, what << ": the base address is not 16-byte aligned");
  CUtensorMap map;
  const cuuint32_t elem_strides[plan::TmaGeometry::kMaxRank] = {1, 1, 1, 1};
  const CUresult r = encode(&map, type, rank, const_cast<void*>(base), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP4MOE_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult " << int(r) << ") for " << what);
  return map;
}

}  // namespace

void replace_tensor_map_address(CUtensorMap& map, const void* base) {
  using Replace = CUresult (*)(CUtensorMap*, void*);
  static const Replace replace = driver_function<Replace>("cuTensorMapReplaceAddress");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "tensor map: the new base address is not 16-byte aligned");
  const CUresult r = replace(&map, const_cast<void*>(base));
  FP4MOE_CHECK(r == CUDA_SUCCESS, "cuTensorMapReplaceAddress failed (CUresult " << int(r) << ")");
}

CUtensorMap activation_tensor_map(const void* x, int64_t rows, int64_t k, int nt, plan::ActivationType type) {
  const bool e4m3 = type == plan::ActivationType::e4m3;
  const int64_t atom_k = e4m3 ? 128 : 64;  // one 128-byte swizzle row
  // (K in the tail granule's steps: an e4m3 box may lie half past K, zero-filled)
  FP4MOE_CHECK(k % plan::kTailGranule == 0 && rows > 0, "activation tensor map: x [" << rows << ", " << k << "] of "
                                                           << plan::activation_type_name(type) << " needs K a multiple of "
                                                           << plan::kTailGranule << " and at least one row");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * (e4m3 ? 1 : 2)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(atom_k), static_cast<cuuint32_t>(nt)};
  return encode_tiled(e4m3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, x, dims, strides, box,
                      CU_TENSOR_MAP_SWIZZLE_128B, "activations x");
}

namespace {

CUtensorMap encode_prepared_bytes(const uint8_t* base, const plan::TmaGeometry& g, const char* what, int64_t n, int64_t k,
                                  const plan::GemmTile& t) {
  FP4MOE_CHECK(g.valid(), what << " tensor map: N = " << n << ", K = " << k << " with a " << t.bm << " x " << t.bk
                               << " tile gives a box the tensor memory accelerator cannot copy");
  cuuint64_t dims[plan::TmaGeometry::kMaxRank], strides[plan::TmaGeometry::kMaxRank - 1];
  cuuint32_t box[plan::TmaGeometry::kMaxRank];
  for (int i = 0; i < g.rank; ++i) dims[i] = cuuint64_t(g.dims[i]), box[i] = cuuint32_t(g.box[i]);
  for (int i = 0; i + 1 < g.rank; ++i) strides[i] = cuuint64_t(g.strides[i]);
  return encode_tiled(CU_TENSOR_MAP_DATA_TYPE_UINT8, cuuint32_t(g.rank), base, dims, strides, box,
                      CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

}  // namespace

CUtensorMap weight_tensor_map(const uint8_t* weights, int64_t num_experts, int64_t n, int64_t k, const plan::GemmTile& t) {
  return encode_prepared_bytes(weights, plan::weight_tma_geometry(num_experts, n, k, t), "prepared weights", n, k, t);
}

CUtensorMap scale_tensor_map(const uint8_t* scales, int64_t num_experts, int64_t n, int64_t k, const plan::GemmTile& t) {
  return encode_prepared_bytes(scales, plan::scale_tma_geometry(num_experts, n, k, t), "prepared block scales", n, k, t);
}

}  // namespace fp4moe::kernels
