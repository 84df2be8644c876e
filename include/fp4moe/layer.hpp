// The MoE layer on the GPU: routing, permutation, GEMM1 + SwiGLU, GEMM2,
// finalize (+ the shared expert), built once from FP4 weights.
//
// Errors are exceptions (fp4moe::Error) whose message names the bad argument.
// forward() is CUDA-graph capture safe: it allocates nothing, never
// synchronises and reads nothing back; its workspace is sized at construction
// for LayerOptions::max_tokens. A bad router logit does not stop a forward: the
// token is routed with zero weights and check_status() reports it afterwards;
// a NaN or Inf hidden state stays in its token's output row, which
// check_status() names.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fp4moe/format.hpp"
#include "fp4moe/model.hpp"
#include "fp4moe/version.hpp"
#include "fp4moe/weights.hpp"

namespace fp4moe {

class LayerCore;
class StageMarks;
struct ForwardArgs;

enum class FinalizeMode {
  automatic,  // split: measured faster than fused from 128 tokens on (docs/kernels.md), no memset, bitwise stable
  fused,      // GEMM2's epilogue adds each row, weighted, into an fp32 sum (order varies run to run)
  split,      // GEMM2 writes its rows; a separate pass sums each token's k rows in slot order (bitwise stable)
};


struct LayerOptions {
  int64_t max_tokens = 1024;
  // Tiles come from the tune cache when it has them (fp4moe tune), else from
  // the planner's ranking. Path: this, else $FP4MOE_CACHE, else the user's cache dir.
  std::string tune_cache;
  bool use_tune_cache = true;
  bool deterministic = false;  // forces FinalizeMode::split
  FinalizeMode finalize = FinalizeMode::automatic;
  int device = -1;             // -1: the current device
  // The planner may split the K loop of a GEMM with few work items (the shared
  // expert at a few tokens) across CTAs; the parts are summed in a fixed order.
  // The layer then holds a 16 MiB split-K workspace (sm_90).
  bool split_k = true;
  // With split_k: the planner may also give a GEMM whose items leave CTAs idle
  // in their last round the balanced split, every CTA the same share of all
  // items' K stages (plan/split_k.hpp; GemmTile::balances_k). Off by
  // default: measured slower where the planner takes it (docs/kernels.md,
  // "The balanced split").
  bool balanced_split = false;
  // H and I that are not multiples of 128 (gpt-oss's 2880): 0 (the default)
  // on sm_90 runs them as the model has them, padded with zero weights only
  // to the next multiple of 64 (the warp-specialized tiles, bf16 and fp8,
  // take a partial last K stage and N tile); elsewhere pads to a multiple of
  // 256, which every tile divides. 64 (sm_90 only), 128 or 256 choose: 128
  // pads 2880 to 2944 and leaves the tiles of 128 rows and 128 k.
  int64_t feature_granule = 0;
  // Host weights holding a range of the model's experts (expert parallelism):
  // weights.experts are the model's [expert_begin, expert_begin + expert_count);
  // expert_count -1: all E. DeviceMoeWeights says its range itself.
  int64_t expert_begin = 0, expert_count = -1;
  // The routed experts' activations: bf16, or fp8 (W4A8: each GEMM's input
  // rows quantized to e4m3 with a per-row scale, the FP4 weights folded into
  // e4m3, FP8 tensor cores; sm_90; MXFP4 weights, or NVFP4 with
  // fp8_rounds_nvfp4 below; docs/fp8.md). The shared
  // expert stays bf16.
  ActivationFormat activations = ActivationFormat::bf16;
  // fp8 activations with NVFP4 weights: their block scales carry a mantissa,
  // so each folded weight is rounded to e4m3 (to nearest even; docs/fp8.md,
  // "NVFP4" states the error). Refused unless this is set.
  bool fp8_rounds_nvfp4 = false;
  // The shared expert runs as one more expert of the routed GEMMs (every token
  // one row, weight 1), so that its weights stream on every SM in the routed
  // launches instead of in two launches of their own. Taken where it can be:
  // its width equals the routed experts' (unpadded), no expert biases, the
  // plain SwiGLU, bf16 activations and the split finalize. Off by default
  // (docs/planner.md, "The shared expert as one more routed expert").
  bool shared_expert_in_routed_gemms = false;
  // Forward plans the layer keeps (one per token count it has run; about 7 KB
  // each): beyond this many the least recently used is dropped and made again
  // when next needed (its tile ranking and tensor maps, on the host, in that
  // forward). 0 keeps every one, up to max_tokens of them.
  int64_t max_plans = 256;
};

// FP4 expert weights already on the GPU, in the layout a serving engine holds
// them (ModelOpt NVFP4 as vLLM and SGLang load it, or MXFP4): every pointer is
// device memory of the layer's device, read only during construction.
enum class BiasType { f32, bf16 };
enum class ScaleLayout { linear, swizzled_128x4 };

struct DeviceProjection {
  const uint8_t* weight = nullptr;  // [E, N, K/2] uint8, element 2i in the low nibble
  const uint8_t* scale = nullptr;   // [E, N, K/block] e4m3 (NVFP4) or e8m0 (MXFP4) bits; or each expert 128x4 swizzled
  const float* scale_2 = nullptr;   // NVFP4: fp32 [E] or [E, scale_2_parts]; MXFP4: null
  int scale_2_parts = 1;            // w13 only: 2 = one weight_scale_2 per half, in w13's row order
};

struct DeviceMoeWeights {
  Fp4Format format = Fp4Format::nvfp4;
  DeviceProjection w13;  // N = 2I (both halves), K = H
  DeviceProjection w2;   // N = H, K = I
  GateUpOrder w13_order = GateUpOrder::gate_up;
  ScaleLayout scale_layout = ScaleLayout::linear;
  // The model's experts these tensors hold (expert parallelism inside an engine
  // that dispatches itself): [expert_begin, expert_begin + expert_count) of
  // MoeConfig::num_experts, expert_count = -1 for all. Ids outside it contribute nothing.
  int64_t expert_begin = 0, expert_count = -1;
  bool has_shared = false;
  DeviceProjection shared_w13, shared_w2;  // E = 1, N = 2 * shared_intermediate
  const float* correction_bias = nullptr;  // fp32 [E] (MoeConfig::use_correction_bias)
  const uint16_t* router_weight = nullptr; // bf16 bits [E, H], for forward_from_hidden; or null
  const float* router_bias = nullptr;      // fp32 [E], added to the router's logits (gpt-oss); with router_weight
  // The experts' biases (MoeConfig::expert_bias: gpt-oss): w13's [experts, 2I]
  // in w13's row order and w2's [experts, H], of bias_type; read once at construction.
  const void* w13_bias = nullptr;
  const void* w2_bias = nullptr;
  BiasType bias_type = BiasType::f32;
};

class MoeLayer {
 public:
  // weights: ModelOpt-layout FP4 matrices on the host (gate/up [I, H], down [H, I]).
  MoeLayer(const MoeConfig& cfg, const MoeWeights& weights, const LayerOptions& opts = {});
  // weights: on the GPU (DeviceMoeWeights); prepared by kernels on the device,
  // byte for byte what the host prepare makes. Synchronises once, at the end.
  MoeLayer(const MoeConfig& cfg, const DeviceMoeWeights& weights, const LayerOptions& opts = {});
  ~MoeLayer();
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  // Device pointers: hidden bf16 [T, H], router_logits fp32 [T, E], out bf16 [T, H].
  void forward(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits, int64_t tokens,
               __nv_bfloat16* out);

  // The same with the caller's routing: topk_ids int32 [T, k] (the model's
  // expert ids; ids of experts this layer does not hold contribute nothing; -1
  // is no expert; other ids outside [0, E) contribute nothing and
  // check_status() reports them) and topk_weights fp32 [T, k].
  void forward_routed(cudaStream_t stream, const __nv_bfloat16* hidden, const int32_t* topk_ids,
                      const float* topk_weights, int64_t tokens, __nv_bfloat16* out);

  // The same with the router logits computed on the device from the weights'
  // router_weight (bf16 [E, H], cuBLAS, fp32 output and accumulation); throws
  // when the layer was built without one.
  void forward_from_hidden(cudaStream_t stream, const __nv_bfloat16* hidden, int64_t tokens, __nv_bfloat16* out);
  bool has_router_weight() const;

  // Per-stage device time of forward() over `reps` runs, CUDA events between
  // the stages: "route", "permute", "gemm1", "gemm2", "shared", "finalize" (at 1
  // to 8 tokens routing and permutation are one launch: "route" holds both). Synchronises.
  struct StageTime {
    std::string stage;
    double median_ms = 0, min_ms = 0, max_ms = 0;
  };
  std::vector<StageTime> profile(cudaStream_t stream, const __nv_bfloat16* hidden, const float* router_logits,
                                 int64_t tokens, __nv_bfloat16* out, int reps = 20);

  // Reads and clears the device status on `stream` (synchronising that stream
  // only); throws naming what was wrong (a non-finite router logit, an expert
  // id out of range, the first token whose output is NaN or Inf).
  void check_status(cudaStream_t stream);

  // The last routing this layer computed (forward, forward_from_hidden), on the
  // device: ids int32 [T, k], weights fp32 [T, k].
  const int32_t* topk_ids() const;
  const float* topk_weights() const;

  const MoeConfig& config() const;
  int64_t expert_begin() const;  // the model's experts this layer holds: [begin, begin + count)
  int64_t expert_count() const;
  FinalizeMode finalize_mode() const;
  int64_t workspace_bytes() const;    // device bytes besides the weights
  int64_t weight_bytes() const;       // device bytes of the prepared weights
  // One line per kernel: what runs for `tokens` tokens (tiles, stages, finalize
  // mode, and whether each tile is tuned or the planner's default).
  std::string describe(int64_t tokens) const;

  // Autotuning: for each token count's bucket and each GEMM of the layer, times
  // every tile the planner accepts on routed random inputs (median of CUDA
  // events), keeps the fastest in the tune cache (saved atomically, merged) and
  // uses it from then on. A tile that fails to launch is an error, never skipped.
  struct TuneRow {
    std::string gemm;
    int64_t tokens = 0, bucket = 0;
    std::string default_tile, tuned_tile;
    double default_ms = 0, tuned_ms = 0;
  };
  std::vector<TuneRow> tune(const std::vector<int64_t>& tokens,
                            const std::function<void(int done, int total, const std::string& what)>& progress = {});

  // The library's own interface to the layer (src/runtime/layer_core.hpp),
  // for the layers it builds around this one (ParallelMoeLayer).
  LayerCore& core() { return *core_; }

 private:
  void run(cudaStream_t stream, const ForwardArgs& args, int64_t tokens, StageMarks* marks);
  std::unique_ptr<LayerCore> core_;
};

}  // namespace fp4moe
