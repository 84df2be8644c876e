// ParallelMoeLayer: the single-GPU layer's stages (route, permute, GEMMs,
// finalize) around NCCL collectives. Partial sums are exchanged in fp32 and
// rounded to bf16 once, by the same finalize pass the single-GPU layer ends
// with, so one rank reproduces that layer bit for bit.
#include "fp4moe/parallel.hpp"

#include "fp4moe/error.hpp"
#include "kernels/expert_dispatch.hpp"
#include "parallel/nccl/nccl_check.hpp"
#include "parallel/partition.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/layer_core.hpp"

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
  // expert alltoall: [G, C] rows bound for each rank, and received from each (ids/weights/hidden_*
  // above hold them), the slot of each own token at each rank, the partial rows back
  int64_t capacity = 0;
  // this forward's rows per rank (expert allgather) or per peer block (expert alltoall)
  int64_t step_rows = 0;
  DeviceBuffer<int32_t> slot_of;
  DeviceBuffer<float> returned;
  // fp32 partial sums: [G rows, H] (expert modes) or [max_tokens, H] (tensor), and the reduced rows (allgather)
  DeviceBuffer<float> partial, reduced;

  LayerCore& core() { return layer->core(); }
  void set_step_rows(int64_t tokens, int64_t rows_per_rank);
  void forward_expert_allgather(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits, int64_t T,
                                __nv_bfloat16* out);
  void forward_expert_alltoall(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits, int64_t T,
                               __nv_bfloat16* out);
  void forward_tensor(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits, int64_t T, __nv_bfloat16* out);
  void exchange_blocks(cudaStream_t s, bool partial_rows);
  void allgather_exchange(cudaStream_t s, bool partial_rows);
  void allreduce_sums(cudaStream_t s, int64_t T);
  void experts_over_rows(cudaStream_t s, const __nv_bfloat16* rows_hidden, const int32_t* rows_ids,
                         const float* rows_weights, int64_t rows, int64_t plan_tokens, int64_t own_tokens, float* sums);
  const __nv_bfloat16* shared_expert(cudaStream_t s, const __nv_bfloat16* hidden, int64_t T);
};

ParallelMoeLayer::ParallelMoeLayer(const MoeConfig& cfg, const MoeWeights& weights, ParallelMode mode, ncclComm_t comm,
                                   const LayerOptions& opts, const ParallelOptions& popts)
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
  // the shared expert runs over the rank's own tokens, the routed experts over every rank's rows
  local.shared_expert_in_routed_gemms = false;
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
  } else if (mode == ParallelMode::expert_alltoall) {
    const parallel::ExpertRange r = parallel::expert_range(cfg, p.rank, p.ranks);
    const int64_t C = popts.alltoall_capacity < 0 ? T : popts.alltoall_capacity;
    FP4MOE_CHECK(C >= 1, "ParallelOptions::alltoall_capacity = " << popts.alltoall_capacity
                                                                 << " must be at least 1 row per peer (or -1: max_tokens)");
    p.capacity = C;
    local.expert_begin = r.begin;
    local.expert_count = r.count;
    local.max_tokens = std::max(G * C, T);  // every peer's block; the shared expert's own tokens
    p.layer = std::make_unique<MoeLayer>(cfg, parallel::slice_experts(weights, r), local);
    if (G > 1) {
      p.hidden_send.resize(size_t(G * C * H));
      p.ids_send.resize(size_t(G * C * k));
      p.weights_send.resize(size_t(G * C * k));
      p.returned.resize(size_t(G * C * H));
    }
    p.hidden_all.resize(size_t(G * C * H));
    p.ids_all.resize(size_t(G * C * k));
    p.weights_all.resize(size_t(G * C * k));
    p.slot_of.resize(size_t(T * G));
    p.partial.resize(size_t(G * C * H));
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
int64_t ParallelMoeLayer::alltoall_capacity() const { return impl_->capacity; }

void ParallelMoeLayer::Impl::set_step_rows(int64_t tokens, int64_t rows_per_rank) {
  Impl& p = *this;
  FP4MOE_CHECK(tokens >= 0 && tokens <= p.max_tokens,
               "ParallelMoeLayer::forward: tokens = " << tokens << " is outside 0..max_tokens = " << p.max_tokens);
  const int64_t R = rows_per_rank < 0 ? p.max_tokens : rows_per_rank;
  FP4MOE_CHECK(R >= tokens && R <= p.max_tokens, "ParallelMoeLayer::forward: rows_per_rank = "
                                                     << rows_per_rank << " must lie in tokens = " << tokens
                                                     << " .. max_tokens = " << p.max_tokens << " (or be -1)");
  p.step_rows = p.mode == ParallelMode::expert_alltoall ? std::min(R, p.capacity) : R;
}

void ParallelMoeLayer::forward(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits,
                               int64_t tokens, __nv_bfloat16* out, int64_t rows_per_rank) {
  Impl& p = *impl_;
  p.set_step_rows(tokens, rows_per_rank);
  FP4MOE_CHECK(hidden && router_logits && out, "ParallelMoeLayer::forward: a device pointer is null");
  switch (p.mode) {
    case ParallelMode::expert_allgather: return p.forward_expert_allgather(stream, hidden, router_logits, tokens, out);
    case ParallelMode::expert_alltoall: return p.forward_expert_alltoall(stream, hidden, router_logits, tokens, out);
    case ParallelMode::tensor: return p.forward_tensor(stream, hidden, router_logits, tokens, out);
  }
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

void ParallelMoeLayer::Impl::forward_expert_allgather(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits,
                                                int64_t T, __nv_bfloat16* out) {
  Impl& p = *this;
  LayerCore& m = core();
  const int64_t G = p.ranks, Tm = p.step_rows, H = m.config().hidden, k = m.config().top_k;
  // 1. Route this rank's tokens straight into the send buffers; pad its rows to the step's (ids -1: no expert).
  if (T > 0) m.route(*m.plan(T), logits, p.ids_send.get(), p.weights_send.get(), s);
  FP4MOE_CUDA_CHECK(cudaMemcpyAsync(p.hidden_send.get(), hidden, size_t(T * H) * 2, cudaMemcpyDeviceToDevice, s));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.ids_send.get() + T * k, 0xFF, size_t((Tm - T) * k) * 4, s));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.weights_send.get() + T * k, 0, size_t((Tm - T) * k) * 4, s));
  // 2. Every rank's rows and routing.
  allgather_exchange(s, false);
  // 3. This rank's experts over every rank's rows (one rank: exactly the single-GPU launches).
  const int64_t rows = G == 1 ? T : G * Tm;
  experts_over_rows(s, p.hidden_all.get(), p.ids_all.get(), p.weights_all.get(), rows,
                    G == 1 ? T : std::min(G * T, G * Tm), T, p.partial.get());
  // 4. Each rank's own rows, summed over the ranks.
  allgather_exchange(s, true);
  // 5. The shared expert on this rank's tokens, then out = bf16(sums + shared).
  if (T == 0) return;
  round_sums(p.reduced.get(), shared_expert(s, hidden, T), T, H, int(k), out, s);
}

void ParallelMoeLayer::Impl::forward_expert_alltoall(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits,
                                               int64_t T, __nv_bfloat16* out) {
  Impl& p = *this;
  LayerCore& m = core();
  const int64_t G = p.ranks, C = p.step_rows, H = m.config().hidden, k = m.config().top_k;
  // 1. Route this rank's tokens; give each the next slot of every rank one of its pairs goes to.
  if (T > 0) m.route(*m.plan(T), logits, nullptr, nullptr, s);
  kernels::ExpertDispatchArgs d;
  d.hidden = hidden;
  d.topk_ids = m.topk_ids();
  d.topk_weights = m.topk_weights();
  d.tokens = T;
  d.hidden_size = H;
  d.top_k = int(k);
  d.ranks = int(G);
  d.self = p.rank;
  d.experts_per_rank = int(m.config().num_experts / G);
  d.capacity = C;
  d.send_hidden = p.hidden_send.get();
  d.send_ids = p.ids_send.get();
  d.send_weights = p.weights_send.get();
  d.recv_hidden = p.hidden_all.get();
  d.recv_ids = p.ids_all.get();
  d.recv_weights = p.weights_all.get();
  d.slot_of = p.slot_of.get();
  d.status = m.status();
  kernels::launch_expert_dispatch(d, s);
  // 2. Block d to rank d, a fixed C rows each way (the counts stay on the device).
  exchange_blocks(s, false);
  // 3. This rank's experts over the received rows (one rank: slot t is token t, up to C of them;
  //    several: every peer's block).
  const int64_t rows = G == 1 ? std::min(T, C) : G * C;
  experts_over_rows(s, p.hidden_all.get(), p.ids_all.get(), p.weights_all.get(), rows,
                    G == 1 ? rows : std::min(G * T, G * C), T, p.partial.get());
  // 4. Each block's partial rows back to the rank that sent it.
  exchange_blocks(s, true);
  // 5. The sums over the ranks in rank order, the shared expert on this rank's tokens, rounded once.
  kernels::ExpertCombineArgs c;
  c.returned = p.returned.get();
  c.own = p.partial.get() + p.rank * C * H;
  c.slot_of = p.slot_of.get();
  c.shared = T > 0 ? shared_expert(s, hidden, T) : nullptr;
  c.tokens = T;
  c.hidden_size = H;
  c.capacity = C;
  c.ranks = int(G);
  c.self = p.rank;
  c.out = out;
  kernels::launch_expert_combine(c, s);
}

// All-to-all of fixed blocks of C rows: the dispatched rows, ids and weights
// out, or the fp32 partial rows back.
void ParallelMoeLayer::Impl::exchange_blocks(cudaStream_t s, bool partial_rows) {
  Impl& p = *this;
  const int64_t G = p.ranks, C = p.step_rows, H = p.layer->config().hidden, k = p.layer->config().top_k;
  if (G == 1) return;
  const auto exchange = [&](auto* send, auto* recv, int64_t width, ncclDataType_t type) {
    for (int peer = 0; peer < G; ++peer) {
      if (peer == p.rank) continue;
      FP4MOE_NCCL_CHECK(ncclSend(send + peer * C * width, size_t(C * width), type, peer, p.comm, s));
      FP4MOE_NCCL_CHECK(ncclRecv(recv + peer * C * width, size_t(C * width), type, peer, p.comm, s));
    }
  };
  FP4MOE_NCCL_CHECK(ncclGroupStart());
  if (partial_rows) {
    exchange(p.partial.get(), p.returned.get(), H, ncclFloat32);
  } else {
    exchange(p.hidden_send.get(), p.hidden_all.get(), H, ncclBfloat16);
    exchange(p.ids_send.get(), p.ids_all.get(), k, ncclInt32);
    exchange(p.weights_send.get(), p.weights_all.get(), k, ncclFloat32);
  }
  FP4MOE_NCCL_CHECK(ncclGroupEnd());
}

// Allgather of the step's rows per rank (hidden states, ids, weights) into
// every rank's block, or the reduce-scatter of the fp32 partial rows back.
void ParallelMoeLayer::Impl::allgather_exchange(cudaStream_t s, bool partial_rows) {
  Impl& p = *this;
  const int64_t Tm = p.step_rows, H = p.layer->config().hidden, k = p.layer->config().top_k;
  if (partial_rows) {
    FP4MOE_NCCL_CHECK(ncclReduceScatter(p.partial.get(), p.reduced.get(), size_t(Tm * H), ncclFloat32, ncclSum, p.comm, s));
    return;
  }
  FP4MOE_NCCL_CHECK(ncclGroupStart());
  FP4MOE_NCCL_CHECK(ncclAllGather(p.hidden_send.get(), p.hidden_all.get(), size_t(Tm * H), ncclBfloat16, p.comm, s));
  FP4MOE_NCCL_CHECK(ncclAllGather(p.ids_send.get(), p.ids_all.get(), size_t(Tm * k), ncclInt32, p.comm, s));
  FP4MOE_NCCL_CHECK(ncclAllGather(p.weights_send.get(), p.weights_all.get(), size_t(Tm * k), ncclFloat32, p.comm, s));
  FP4MOE_NCCL_CHECK(ncclGroupEnd());
}

// The tensor mode's sum of the ranks' fp32 partial outputs, in place.
void ParallelMoeLayer::Impl::allreduce_sums(cudaStream_t s, int64_t T) {
  Impl& p = *this;
  const int64_t H = p.layer->config().hidden;
  FP4MOE_NCCL_CHECK(ncclAllReduce(p.partial.get(), p.partial.get(), size_t(T * H), ncclFloat32, ncclSum, p.comm, s));
}

void ParallelMoeLayer::communicate(cudaStream_t s, int64_t T, int64_t rows_per_rank) {
  Impl& p = *impl_;
  p.set_step_rows(T, rows_per_rank);
  switch (p.mode) {
    case ParallelMode::expert_allgather: return p.allgather_exchange(s, false), p.allgather_exchange(s, true);
    case ParallelMode::expert_alltoall: return p.exchange_blocks(s, false), p.exchange_blocks(s, true);
    case ParallelMode::tensor: return p.allreduce_sums(s, T);
  }
}

// The rank's experts over `rows` rows (hidden, ids, weights), each row's pairs
// summed in slot order into fp32 `sums` (the split finalize). The tiles are
// those of `plan_tokens` tokens; the shared expert's offsets cover own_tokens.
void ParallelMoeLayer::Impl::experts_over_rows(cudaStream_t s, const __nv_bfloat16* rows_hidden, const int32_t* rows_ids,
                                               const float* rows_weights, int64_t rows, int64_t plan_tokens,
                                               int64_t own_tokens, float* sums) {
  if (rows == 0) return;
  LayerCore& m = core();
  m.routed_experts(*m.plan(PlanShape{rows, plan_tokens, own_tokens}), rows_hidden, rows_ids, rows_weights, sums, s);
}

// The shared expert over this rank's T tokens (T > 0), or null without one.
const __nv_bfloat16* ParallelMoeLayer::Impl::shared_expert(cudaStream_t s, const __nv_bfloat16* hidden, int64_t T) {
  LayerCore& m = core();
  return m.shared_expert(*m.plan(T), hidden, s);
}

void ParallelMoeLayer::Impl::forward_tensor(cudaStream_t s, const __nv_bfloat16* hidden, const float* logits, int64_t T,
                                      __nv_bfloat16* out) {
  Impl& p = *this;
  LayerCore& m = core();
  const int64_t H = m.config().hidden, k = m.config().top_k;
  // Every rank holds the same tokens and routes them alike; its slice's share of
  // the layer (shared expert included) is summed over the ranks in fp32.
  if (T > 0) m.forward(*m.plan(T), {.hidden = hidden, .router_logits = logits, .sums = p.partial.get()}, s);
  allreduce_sums(s, T);
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
