// A forward's launches, decided once: per shape (token count), every step as
// it will launch (routing, permutation, each GEMM with its row copy, tile,
// stages and split-K, the finalize). The layer makes a plan when a shape is
// first seen (or again after tuning) and a forward only binds its own
// pointers to it and queues the launches: no planner call, no argument
// assembly. describe() prints it.
#pragma once
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cuda_bf16.h>

#include "common/concurrent_memo.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/gemm_step.hpp"

namespace fp4moe {

// Which tile a GEMM runs and why.
struct TileChoice {
  int tile = -1;
  int stages = 0;
  bool tuned = false;  // from the tune cache; otherwise the planner's ranking
};

// One GEMM of a forward.
struct GemmStepPlan {
  const char* name = "";   // "gemm1", "gemm2", "shared gemm1", "shared gemm2" (tune rows)
  const char* title = "";  // describe()
  const char* stage = nullptr;  // the profile() stage this GEMM ends, or null
  bool dense = false;           // the shared expert: every token, one "expert"
  bool reads_hidden = false;    // x is the forward's hidden states (bound at launch)
  bool reads_routing_weights = false;  // the fused finalize's weights are the forward's (bound at launch)
  TileChoice choice;
  GemmStepLaunch launch;
};

// What a plan is made for.
struct PlanShape {
  int64_t rows = 0;         // tokens routed: the forward's T, or a parallel layer's rows of every rank
  int64_t tile_tokens = 0;  // tokens the tiles are chosen for (the expected rows per expert)
  int64_t dense_rows = 0;   // the shared expert's tokens (the permutation writes its offsets)
  static PlanShape of_tokens(int64_t t) { return {t, t, t}; }
  auto operator<=>(const PlanShape&) const = default;
};

struct ForwardPlan {
  PlanShape shape;
  kernels::RouteArgs route;      // into the layer's routing buffers; logits bound at launch
  kernels::PermuteArgs permute;  // topk_ids bound at launch
  // Routing and permutation in one launch (kernels::launch_route_permute): a
  // forward of few tokens that routes on the device.
  bool route_permute_fused = false;
  // As many as the forward has (2, or 4 with a shared expert of its own): a
  // layer holds a plan per token count, and each step is about 1.7 KB.
  std::vector<GemmStepPlan> gemm_steps;
  // The fused finalize's fp32 sums start at zero: `accumulate_bytes` of `accumulate`, or none.
  float* accumulate = nullptr;
  size_t accumulate_bytes = 0;
  kernels::FinalizeArgs finalize;  // topk_weights and the output bound at launch
  // describe()'s lines above the steps (padding, epilogues, the cache): one per layer, shared
  std::shared_ptr<const std::string> notes;

  std::span<const GemmStepPlan> gemms() const { return gemm_steps; }
  // The host memory it holds (the notes are the layer's).
  size_t bytes() const { return sizeof(ForwardPlan) + gemm_steps.capacity() * sizeof(GemmStepPlan); }
  // The launches (and memsets) a forward queues: routing (when the layer
  // routes) and permutation, each GEMM's row copy and the GEMM, the fused
  // finalize's zeroing, the finalize. At decode sizes each costs a launch
  // gap and a tail, so the count is a figure of the small-batch path.
  int launches(bool layer_routes) const;
  // One line per launch: tile (tuned or the planner's), stages, shared
  // memory, the row copy and split-K; then the launch count.
  std::string describe() const;
};

// One forward's own pointers; everything else is the plan's.
struct ForwardArgs {
  const __nv_bfloat16* hidden = nullptr;  // [T, H]
  const float* router_logits = nullptr;   // [T, E], or the caller's routing:
  const int32_t* topk_ids = nullptr;      // [T, k]
  const float* topk_weights = nullptr;    // [T, k]
  __nv_bfloat16* out = nullptr;           // [T, H], or
  float* sums = nullptr;                  // [T, H] fp32, before the one rounding (parallel layers)
};

// Queues a planned GEMM step with the forward's pointers bound where it reads them.
void enqueue_planned_gemm(const GemmStepPlan& step, const __nv_bfloat16* hidden, const float* routing_weights,
                          cudaStream_t stream);

// The plans a layer has made, by shape: made on first use under a lock, then
// immutable; a caller's plan outlives clear() (after tuning) while it holds it.
using PlanCache = ConcurrentMemo<PlanShape, ForwardPlan>;

}  // namespace fp4moe
