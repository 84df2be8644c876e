// The package's parallel layer: fp4moe::ParallelMoeLayer as the tvm-ffi object
// "fp4moe.ParallelLayer", on the caller's NCCL communicator (a pointer, as
// engines hold one) or on one made here from a unique id the ranks share.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/object.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include "config_json.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/parallel.hpp"
#include "parallel/partition.hpp"
#include "common/cuda_check.hpp"
#include "tensor_args.hpp"

namespace fp4moe::python {
namespace {

using tvm::ffi::Bytes;
using tvm::ffi::String;

class ParallelLayerObj : public tvm::ffi::Object {
 public:
  std::unique_ptr<ParallelMoeLayer> layer;
  ncclComm_t owned_comm = nullptr;  // made here from a unique id; destroyed after the layer
  int64_t max_tokens = 0;
  int device = 0;

  ~ParallelLayerObj() {
    layer.reset();
    if (owned_comm) ncclCommDestroy(owned_comm);  // local: no other rank is waited for
  }
  static constexpr bool _type_mutable = true;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("fp4moe.ParallelLayer", ParallelLayerObj, tvm::ffi::Object);
};

class ParallelLayer : public tvm::ffi::ObjectRef {
 public:
  explicit ParallelLayer(tvm::ffi::ObjectPtr<ParallelLayerObj> p) : tvm::ffi::ObjectRef(std::move(p)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(ParallelLayer, tvm::ffi::ObjectRef, ParallelLayerObj);
};

Bytes unique_id() {
  return guarded([&] {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    FP4MOE_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: " << ncclGetErrorString(r));
    return Bytes(id.internal, sizeof(id.internal));
  });
}

// comm: an ncclComm_t as an integer (the caller's), or 0 to make one from
// unique_id (every rank the same bytes) as rank `rank` of `ranks`.
ParallelLayer make(const MoeConfig& cfg, const MoeWeights& w, const std::string& mode, int64_t comm, const Bytes& uid,
                   int64_t rank, int64_t ranks, const LayerOptions& o, int64_t capacity) {
  FP4MOE_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank " << rank << " of " << ranks << " ranks");
  FP4MOE_CHECK(comm || uid.size() == sizeof(ncclUniqueId),
               "unique_id: " << uid.size() << " bytes; an NCCL unique id has " << sizeof(ncclUniqueId));
  cfg.validate();
  // the partition's rules first: they need no GPU
  const ParallelMode m = parse_parallel_mode(mode);
  if (m == ParallelMode::tensor) parallel::tp_config(cfg, int(ranks));
  else parallel::expert_range(cfg, int(rank), int(ranks));
  auto obj = tvm::ffi::make_object<ParallelLayerObj>();
  if (o.device >= 0) FP4MOE_CUDA_CHECK(cudaSetDevice(o.device));
  FP4MOE_CUDA_CHECK(cudaGetDevice(&obj->device));
  ncclComm_t c = reinterpret_cast<ncclComm_t>(comm);
  if (!c) {
    ncclUniqueId id;
    std::memcpy(id.internal, uid.data(), sizeof(id.internal));
    c = obj->owned_comm = make_nccl_comm(id, int(rank), int(ranks), obj->device);
  }
  ParallelOptions po;
  po.alltoall_capacity = capacity;
  obj->layer = std::make_unique<ParallelMoeLayer>(cfg, w, m, c, o, po);
  FP4MOE_CHECK(obj->layer->rank() == rank && obj->layer->ranks() == ranks,
               "the communicator is rank " << obj->layer->rank() << " of " << obj->layer->ranks() << ", the group's rank "
                                           << rank << " of " << ranks);
  obj->max_tokens = o.max_tokens;
  return ParallelLayer(std::move(obj));
}

ParallelLayer from_modelopt(const String& path, int64_t layer_index, const String& mode, int64_t comm, Bytes uid,
                            int64_t rank, int64_t ranks, const String& options, int64_t capacity) {
  return guarded([&] {
    const MoeCheckpointLayer ck = load_moe_layer(path, layer_index);
    return make(ck.config, ck.weights, mode, comm, uid, rank, ranks, options_from_json(options), capacity);
  });
}

ParallelLayer from_random(const String& config, const String& format, int64_t seed, const String& mode, int64_t comm,
                          Bytes uid, int64_t rank, int64_t ranks, const String& options, int64_t capacity) {
  return guarded([&] {
    const MoeConfig c = config_from_json(config);
    const MoeWeights w = random_moe_weights(c, format_from_string(format), uint64_t(seed));
    return make(c, w, mode, comm, uid, rank, ranks, options_from_json(options), capacity);
  });
}

void forward(ParallelLayer layer, TensorView hidden, TensorView logits, TensorView out, int64_t rows_per_rank,
             int64_t stream) {
  guarded([&] {
    const ParallelLayerObj& l = *layer.get();
    const MoeConfig& c = l.layer->local().config();
    check(hidden, {"hidden_states", {Dt::bf16}, {kAny, c.hidden}, kDLCUDA, l.device});
    const int64_t T = hidden.shape()[0];
    FP4MOE_CHECK(T <= l.max_tokens, "hidden_states: " << T << " tokens is more than the layer's max_tokens = " << l.max_tokens);
    check(logits, {"router_logits", {Dt::f32}, {T, c.num_experts}, kDLCUDA, l.device});
    check(out, {"out", {Dt::bf16}, {T, c.hidden}, kDLCUDA, l.device});
    FP4MOE_CHECK(data<void>(out) != data<void>(hidden), "out: must not be hidden_states itself");
    const cudaStream_t s = stream >= 0 ? reinterpret_cast<cudaStream_t>(stream)
                                       : static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, l.device));
    l.layer->forward(s, data<__nv_bfloat16>(hidden), data<float>(logits), T, data<__nv_bfloat16>(out), rows_per_rank);
  });
}

String info(ParallelLayer layer) {
  return guarded([&] {
    const ParallelLayerObj& l = *layer.get();
    MoeLayer& local = l.layer->local();
    nlohmann::json j = {{"rank", l.layer->rank()},
                        {"ranks", l.layer->ranks()},
                        {"mode", to_string(l.layer->mode())},
                        {"max_tokens", l.max_tokens},
                        {"alltoall_capacity", l.layer->alltoall_capacity()},
                        {"device", l.device},
                        {"owns_communicator", l.owned_comm != nullptr},
                        {"config", config_to_json(local.config())},
                        {"local_experts", {local.expert_begin(), local.expert_count()}}};
    return String(j.dump());
  });
}

void check_status(ParallelLayer layer, int64_t stream) {
  guarded([&] {
    const ParallelLayerObj& l = *layer.get();
    l.layer->check_status(stream >= 0 ? reinterpret_cast<cudaStream_t>(stream)
                                      : static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, l.device)));
  });
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<ParallelLayerObj>();
  refl::GlobalDef()
      .def("fp4moe.nccl_unique_id", unique_id)
      .def("fp4moe.parallel_from_modelopt", from_modelopt)
      .def("fp4moe.parallel_from_random", from_random)
      .def("fp4moe.parallel_forward", forward)
      .def("fp4moe.parallel_info", info)
      .def("fp4moe.parallel_check_status", check_status);
}

}  // namespace fp4moe::python
