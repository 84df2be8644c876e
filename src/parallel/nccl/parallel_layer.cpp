// ParallelMoeLayer: the single-GPU layer's stages (route, permute, GEMMs,
// finalize) around NCCL collectives. Partial sums are exchanged in fp32 and
// rounded to bf16 once, by the same finalize pass the single-GPU layer ends
// with, so one rank reproduces that layer bit for bit.
#include "fp4moe/parallel.hpp"

#include "fp4moe/error.hpp"
#include "parallel/nccl/nccl_check.hpp"
#include "parallel/partition.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/moe_layer_impl.hpp"

namespace fp4moe {

struct ParallelMoeLayer::Impl {
  ParallelMode mode;
  ncclComm_t comm = nullptr;
  int rank = 0, ranks = 1;
  int64_t max_tokens = 0;  // per rank
  std::unique_ptr<MoeLayer> layer;
  // expert allgather: this rank's rows padded to max_tokens, every rank's rows
  DeviceBuffer<__nv_bfloat16> hidden_send, hidden_all;
  DeviceBuffer<int32_t> ids_send, ids_all;
  DeviceBuffer<float> weights_send, weights_all;
  // fp32 partial sums: [G max_tokens, H] (allgather) or [max_tokens, H] (tensor), and the reduced rows
  DeviceBuffer<float> partial, reduced;
};

MoeLayer::Impl& ParallelMoeLayer::inner(MoeLayer& layer) { return *layer.impl_; }

ParallelMoeLayer::ParallelMoeLayer(const MoeConfig& cfg, const MoeWeights& weights, ParallelMode mode, ncclComm_t comm,
                                   const LayerOptions& opts)
    : impl_(new Impl) {
  Impl& p = *impl_;
  FP4MOE_CHECK(comm, "ParallelMoeLayer: the NCCL communicator is null");
  cfg.validate();
  p.mode = mode;
  p.comm = comm;
  FP4MOE_NCCL_CHECK(ncclCommCount(comm, &p.ranks));
  FP4MOE_NCCL_CHECK(ncclCommUserRank(comm, &p.rank));
  int comm_device = -1, device = -1;
  FP4MOE_NCCL_CHECK(ncclCommCuDevice(comm, &comm_device));
  if (opts.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(opts.device));
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CHECK(comm_device == device, "ParallelMoeLayer: rank " << p.rank << "'s communicator is on cuda:" << comm_device
                                                                 << ", the layer on cuda:" << device);
  FP4MOE_CHECK(opts.max_tokens >= 1, "LayerOptions::max_tokens = " << opts.max_tokens << " must be at least 1");
  p.max_tokens = opts.max_tokens;
  const int64_t G = p.ranks, T = opts.max_tokens, H = cfg.hidden, k = cfg.top_k;
  LayerOptions local = opts;
  local.finalize = FinalizeMode::split;  // the partial sums are the split finalize's fp32 sums
  local.device = device;
  if (mode == ParallelMode::expert_allgather) {
    const parallel::ExpertRange r = parallel::expert_range(cfg, p.rank, p.ranks);
    local.expert_begin = r.begin;
    local.expert_count = r.count;
    local.max_tokens = G * T;  // every rank's rows
    p.layer = std::make_unique<MoeLayer>(cfg, parallel::slice_experts(weights, r), local);
    p.hidden_send.resize(size_t(T * H));
    p.hidden_all.resize(size_t(G * T * H));
    p.ids_send.resize(size_t(T * k));
    p.ids_all.resize(size_t(G * T * k));
    p.weights_send.resize(size_t(T * k));
    p.weights_all.resize(size_t(G * T * k));
    p.partial.resize(size_t(G * T * H));
    p.reduced.resize(size_t(T * H));
  } else {
    p.layer = std::make_unique<MoeLayer>(parallel::tp_config(cfg, p.ranks),
                                         parallel::slice_intermediate(cfg, weights, p.rank, p.ranks), local);
    p.partial.resize(size_t(T * H));
  }
}

ParallelMoeLayer::~ParallelMoeLayer() = default;

int ParallelMoeLayer::rank() const { return impl_->rank; }
int ParallelMoeLayer::ranks() const { return impl_->ranks; }
ParallelMode ParallelMoeLayer::mode() const { return impl_->mode; }
MoeLayer& ParallelMoeLayer::local() { return *impl_->layer; }

void ParallelMoeLayer::forward(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits,
                               int64_t tokens, __nv_bfloat16* out) {
  FP4MOE_CHECK(tokens >= 0 && tokens <= impl_->max_tokens,
               "ParallelMoeLayer::forward: tokens = " << tokens << " is outside 0..max_tokens = " << impl_->max_tokens);
  FP4MOE_CHECK(hidden && router_logits && out, "ParallelMoeLayer::forward: a device pointer is null");
  if (impl_->mode == ParallelMode::expert_allgather) forward_expert_allgather(stream, hidden, router_logits, tokens, out);
  else forward_tensor(stream, hidden, router_logits, tokens, out);
}

// Finalize in its fp32-sums mode: out = bf16(sums + shared) over T rows.
static void round_sums(const float* sums, const __nv_bfloat16* shared, int64_t T, int64_t H, int k, __nv_bfloat16* out,
                       cudaStream_t s) {
  kernels::FinalizeArgs f;
  f.accumulated = sums;
  f.shared_out = shared;
  f.tokens = T;
  f.hidden = H;
  f.top_k = k;
  f.out = out;
  kernels::launch_finalize(f, s);
}

void ParallelMoeLayer::forward_expert_allgather(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits,
                                                int64_t T, __nv_bfloat16* out) {
  Impl& p = *impl_;
  MoeLayer::Impl& m = inner(*p.layer);
  const int64_t G = p.ranks, Tm = p.max_tokens, H = m.cfg.hidden, k = m.cfg.top_k;
  // 1. Route this rank's tokens straight into the send buffers; pad its rows to max_tokens (ids -1: no expert).
  if (T > 0) m.route(s, logits, T, p.ids_send.get(), p.weights_send.get());
  FP4MOE_CUDA_CHECK(cudaMemcpyAsync(p.hidden_send.get(), hidden, size_t(T * H) * 2, cudaMemcpyDeviceToDevice, s));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.ids_send.get() + T * k, 0xFF, size_t((Tm - T) * k) * 4, s));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.weights_send.get() + T * k, 0, size_t((Tm - T) * k) * 4, s));
  // 2. Every rank's rows and routing.
  FP4MOE_NCCL_CHECK(ncclGroupStart());
  FP4MOE_NCCL_CHECK(ncclAllGather(p.hidden_send.get(), p.hidden_all.get(), size_t(Tm * H), ncclBfloat16, p.comm, s));
  FP4MOE_NCCL_CHECK(ncclAllGather(p.ids_send.get(), p.ids_all.get(), size_t(Tm * k), ncclInt32, p.comm, s));
  FP4MOE_NCCL_CHECK(ncclAllGather(p.weights_send.get(), p.weights_all.get(), size_t(Tm * k), ncclFloat32, p.comm, s));
  FP4MOE_NCCL_CHECK(ncclGroupEnd());
  // 3. This rank's experts over every rank's rows (one rank: exactly the single-GPU launches).
  const int64_t rows = G == 1 ? T : G * Tm, P = rows * k;
  if (rows > 0) {
    m.permute(s, p.ids_all.get(), rows, T);  // the shared expert's offsets: this rank's T tokens
    const ForwardPlan& plan = m.forward_plan(G == 1 ? T : std::min(G * T, G * Tm));
    using kernels::DecodeEpilogue;
    m.launch_gemm(plan.gemm1, m.routed->w13, p.hidden_all.get(), m.permuted_token.get(), P, m.offsets.get(),
                  DecodeEpilogue::swiglu, m.a2.get(), s);
    m.launch_gemm(plan.gemm2, m.routed->w2, m.a2.get(), nullptr, P, m.offsets.get(), DecodeEpilogue::store, m.y2.get(), s);
    kernels::FinalizeArgs f;
    f.expert_out = m.y2.get();
    f.pair_pos = m.pair_pos.get();
    f.topk_weights = p.weights_all.get();
    f.tokens = rows;
    f.hidden = H;
    f.top_k = int(k);
    f.out_f32 = p.partial.get();
    kernels::launch_finalize(f, s);
  }
  if (G > 1 && rows < G * Tm)  // rows a rank left empty still take part in the reduce-scatter
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.partial.get() + rows * H, 0, size_t((G * Tm - rows) * H) * 4, s));
  // 4. Each rank's own rows, summed over the ranks.
  FP4MOE_NCCL_CHECK(ncclReduceScatter(p.partial.get(), p.reduced.get(), size_t(Tm * H), ncclFloat32, ncclSum, p.comm, s));
  if (T == 0) return;
  // 5. The shared expert on this rank's tokens, then out = bf16(sums + shared).
  const __nv_bfloat16* shared = nullptr;
  if (m.shared) {
    const ForwardPlan& own = m.forward_plan(T);
    m.launch_gemm(own.shared_gemm1, m.shared->w13, hidden, nullptr, T, m.dense_offsets.get(),
                  kernels::DecodeEpilogue::swiglu, m.shared_a2.get(), s);
    m.launch_gemm(own.shared_gemm2, m.shared->w2, m.shared_a2.get(), nullptr, T, m.dense_offsets.get(),
                  kernels::DecodeEpilogue::store, m.shared_y.get(), s);
    shared = m.shared_y.get();
  }
  round_sums(p.reduced.get(), shared, T, H, int(k), out, s);
}

void ParallelMoeLayer::forward_tensor(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits, int64_t T,
                                      __nv_bfloat16* out) {
  Impl& p = *impl_;
  MoeLayer::Impl& m = inner(*p.layer);
  const int64_t H = m.cfg.hidden, k = m.cfg.top_k;
  // Every rank holds the same tokens and routes them alike; its slice's share of
  // the layer (shared expert included) is summed over the ranks in fp32.
  if (T > 0) p.layer->run(s, hidden, logits, nullptr, T, nullptr, p.partial.get(), nullptr);
  FP4MOE_NCCL_CHECK(ncclAllReduce(p.partial.get(), p.partial.get(), size_t(T * H), ncclFloat32, ncclSum, p.comm, s));
  if (T > 0) round_sums(p.partial.get(), nullptr, T, H, int(k), out, s);
}

ncclComm_t make_nccl_comm(const ncclUniqueId& id, int rank, int ranks, int device) {
  FP4MOE_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "make_nccl_comm: rank " << rank << " of " << ranks);
  FP4MOE_CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t c = nullptr;
  FP4MOE_NCCL_CHECK(ncclCommInitRank(&c, ranks, id, rank));
  return c;
}

std::vector<ncclComm_t> make_local_nccl_comms(const std::vector<int>& devices) {
  FP4MOE_CHECK(!devices.empty(), "make_local_nccl_comms: no devices given");
  std::vector<ncclComm_t> comms(devices.size());
  FP4MOE_NCCL_CHECK(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
  return comms;
}

void destroy_nccl_comm(ncclComm_t comm) {
  if (!comm) return;
  FP4MOE_NCCL_CHECK(ncclCommFinalize(comm));
  FP4MOE_NCCL_CHECK(ncclCommDestroy(comm));
}

}  // namespace fp4moe
