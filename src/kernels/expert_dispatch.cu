// Expert-parallel all-to-all, device side. The slot assignment is one block:
// slots follow token order, so each rank's count is a prefix sum over tokens,
// taken a block of tokens at a time with a warp ballot per destination rank.
// The rows themselves are copied by a second kernel, a block per token.
#include "kernels/expert_dispatch.hpp"

#include "fp4moe/error.hpp"
#include "kernels/routing_kernels.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::kernels {
namespace {

constexpr int kSlotThreads = 1024;
constexpr int kWarps = kSlotThreads / 32;

__device__ __forceinline__ bool goes_to(const ExpertDispatchArgs& a, int64_t t, int d) {
  for (int j = 0; j < a.top_k; ++j) {
    const int32_t id = a.topk_ids[t * a.top_k + j];
    if (id >= 0 && id / a.experts_per_rank == d) return true;
  }
  return false;
}

// Block d of the buffers bound for rank d; this rank's own block is its receive block.
template <class T>
__device__ __forceinline__ T* block_of(T* send, T* recv, const ExpertDispatchArgs& a, int d, int64_t width) {
  return (d == a.self ? recv : send) + int64_t(d) * a.capacity * width;
}

__global__ void __launch_bounds__(kSlotThreads) assign_slots_kernel(const ExpertDispatchArgs a) {
  extern __shared__ int32_t smem[];
  int32_t* warp_total = smem;               // [G][kWarps]: rows bound for d in each warp's tokens
  int32_t* base = smem + a.ranks * kWarps;  // [G]: slots taken so far
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int d = threadIdx.x; d < a.ranks; d += blockDim.x) base[d] = 0;
  __syncthreads();
  for (int64_t t0 = 0; t0 < a.tokens; t0 += kSlotThreads) {
    const int64_t t = t0 + threadIdx.x;
    const bool live = t < a.tokens;
    for (int d = 0; d < a.ranks; ++d) {
      const unsigned ballot = __ballot_sync(~0u, live && goes_to(a, t, d));
      if (lane == 0) warp_total[d * kWarps + warp] = __popc(ballot);
    }
    __syncthreads();
    for (int d = 0; d < a.ranks; ++d) {
      const bool bit = live && goes_to(a, t, d);
      const unsigned ballot = __ballot_sync(~0u, bit);
      if (!live) continue;
      int64_t slot = base[d] + __popc(ballot & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) slot += warp_total[d * kWarps + w];
      if (bit && slot >= a.capacity) atomicOr(a.status, kStatusCapacityOverflow);
      const bool placed = bit && slot < a.capacity;
      a.slot_of[t * a.ranks + d] = placed ? int32_t(slot) : -1;
      if (!placed) continue;
      int32_t* ids = block_of(a.send_ids, a.recv_ids, a, d, a.top_k) + slot * a.top_k;
      float* weights = block_of(a.send_weights, a.recv_weights, a, d, a.top_k) + slot * a.top_k;
      for (int j = 0; j < a.top_k; ++j) {
        const int32_t id = a.topk_ids[t * a.top_k + j];
        const bool here = id >= 0 && id / a.experts_per_rank == d;
        ids[j] = here ? id : -1;
        weights[j] = here ? a.topk_weights[t * a.top_k + j] : 0.f;
      }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < a.ranks; d += blockDim.x)
      for (int w = 0; w < kWarps; ++w) base[d] += warp_total[d * kWarps + w];
    __syncthreads();
  }
  // Empty slots carry no pair: the receiving rank's permutation drops them.
  for (int d = 0; d < a.ranks; ++d) {
    const int64_t used = base[d] < a.capacity ? base[d] : a.capacity;
    int32_t* ids = block_of(a.send_ids, a.recv_ids, a, d, a.top_k);
    float* weights = block_of(a.send_weights, a.recv_weights, a, d, a.top_k);
    for (int64_t i = used * a.top_k + threadIdx.x; i < a.capacity * a.top_k; i += kSlotThreads) ids[i] = -1, weights[i] = 0.f;
    if (threadIdx.x == 0 && a.send_count) a.send_count[d] = int32_t(used);
  }
}

__global__ void __launch_bounds__(256) copy_rows_kernel(const ExpertDispatchArgs a) {
  const int64_t t = blockIdx.x, pieces = a.hidden_size / 8;  // 16 bytes a piece
  const uint4* src = reinterpret_cast<const uint4*>(a.hidden + t * a.hidden_size);
  for (int d = 0; d < a.ranks; ++d) {
    const int32_t slot = a.slot_of[t * a.ranks + d];
    if (slot < 0) continue;
    uint4* dst = reinterpret_cast<uint4*>(block_of(a.send_hidden, a.recv_hidden, a, d, a.hidden_size) +
                                          int64_t(slot) * a.hidden_size);
    for (int64_t c = threadIdx.x; c < pieces; c += blockDim.x) dst[c] = src[c];
  }
}

// The sum over ranks in rank order, starting from the first present term (so
// that one rank's sums pass through unchanged, signs of zero included), plus
// the shared expert, rounded once: the single-GPU finalize's last operations.
__global__ void combine_kernel(const ExpertCombineArgs a) {
  const int64_t groups = a.hidden_size / 4;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.tokens * groups) return;
  const int64_t t = idx / groups, h = (idx % groups) * 4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  bool first = true;
  for (int d = 0; d < a.ranks; ++d) {
    const int32_t slot = a.slot_of[t * a.ranks + d];
    if (slot < 0) continue;
    const float* row = d == a.self ? a.own + int64_t(slot) * a.hidden_size
                                   : a.returned + (int64_t(d) * a.capacity + slot) * a.hidden_size;
    const float4 v = *reinterpret_cast<const float4*>(row + h);
    if (first) acc = v, first = false;
    else acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
  }
  if (a.shared) {
    const uint2 raw = *reinterpret_cast<const uint2*>(a.shared + t * a.hidden_size + h);
    const float2 s01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 s23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    acc.x = __fmaf_rn(1.f, s01.x, acc.x), acc.y = __fmaf_rn(1.f, s01.y, acc.y);
    acc.z = __fmaf_rn(1.f, s23.x, acc.z), acc.w = __fmaf_rn(1.f, s23.y, acc.w);
  }
  __nv_bfloat162 o[2] = {__floats2bfloat162_rn(acc.x, acc.y), __floats2bfloat162_rn(acc.z, acc.w)};
  *reinterpret_cast<uint2*>(a.out + t * a.hidden_size + h) = *reinterpret_cast<const uint2*>(o);
}

}  // namespace

void launch_expert_dispatch(const ExpertDispatchArgs& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.ranks >= 1 && a.self >= 0 && a.self < a.ranks, "expert dispatch: rank " << a.self << " of " << a.ranks);
  FP4MOE_CHECK(a.experts_per_rank >= 1 && a.top_k >= 1, "expert dispatch: " << a.experts_per_rank
                                                                             << " experts per rank, top_k " << a.top_k);
  FP4MOE_CHECK(a.tokens >= 0 && a.capacity >= 1,
               "expert dispatch: tokens = " << a.tokens << ", capacity = " << a.capacity << " rows per peer");
  FP4MOE_CHECK(a.hidden_size > 0 && a.hidden_size % 8 == 0,
               "expert dispatch: hidden = " << a.hidden_size << " is not a positive multiple of 8");
  FP4MOE_CHECK(a.topk_ids && a.topk_weights && a.recv_ids && a.recv_weights && a.slot_of && a.status &&
                   (a.ranks == 1 || (a.send_ids && a.send_weights && a.send_hidden)) && a.recv_hidden &&
                   (a.tokens == 0 || a.hidden),
               "expert dispatch: a device pointer is null");
  const size_t smem = size_t(a.ranks) * (kWarps + 1) * sizeof(int32_t);
  FP4MOE_CHECK(smem <= 48 * 1024, "expert dispatch: " << a.ranks << " ranks need more shared memory than a block has");
  assign_slots_kernel<<<1, kSlotThreads, smem, stream>>>(a);
  FP4MOE_CHECK_LAUNCH("assign_slots_kernel");
  if (a.tokens == 0) return;
  copy_rows_kernel<<<static_cast<unsigned>(a.tokens), 256, 0, stream>>>(a);
  FP4MOE_CHECK_LAUNCH("copy_rows_kernel");
}

void launch_expert_combine(const ExpertCombineArgs& a, cudaStream_t stream) {
  FP4MOE_CHECK(a.hidden_size > 0 && a.hidden_size % 4 == 0,
               "expert combine: hidden = " << a.hidden_size << " is not a positive multiple of 4");
  FP4MOE_CHECK(a.own && a.slot_of && a.out && (a.ranks == 1 || a.returned), "expert combine: a device pointer is null");
  if (a.tokens == 0) return;
  const int64_t n = a.tokens * (a.hidden_size / 4);
  combine_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(a);
  FP4MOE_CHECK_LAUNCH("combine_kernel");
}

}  // namespace fp4moe::kernels
