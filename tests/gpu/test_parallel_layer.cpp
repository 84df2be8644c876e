// The parallel layer on the GPUs this machine has. With one rank (NCCL runs a
// one-rank communicator) each mode equals the single-GPU layer bitwise with
// split finalize, at token counts below and at max_tokens; with several local
// GPUs, every rank's output against the single-GPU layer (1e-3). gpt-oss with its
// biases too (TP adds the down bias once).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "fp4moe/reference.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/parallel.hpp"
#include "gpu_test_util.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

struct Inputs {
  test::Bf16Matrix x;
  std::vector<float> logits;
};

Inputs inputs(const MoeConfig& c, int64_t T, uint64_t seed) {
  return {test::random_bf16(T * c.hidden, seed), gaussian_logits(T, c.num_experts, seed + 1)};
}

template <class Layer, class... RowsPerRank>
std::vector<uint16_t> run(Layer& layer, const MoeConfig& c, const Inputs& in, int64_t T, RowsPerRank... rows) {
  DeviceBuffer<uint16_t> x(in.x.bits), out(size_t(T * c.hidden));
  DeviceBuffer<float> l(in.logits);
  out.fill_bytes(0xFF);
  layer.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(x.get()), l.get(), T,
                reinterpret_cast<__nv_bfloat16*>(out.get()), rows...);
  layer.check_status(nullptr);
  return out.download();
}

// glm5-small with I = 256 (the TP slice of one rank of two stays a multiple of 128).
MoeConfig config() {
  MoeConfig c = preset("glm5-small");
  c.intermediate = 256;
  c.shared_intermediate = 256;
  return c;
}

// Each parallel mode at one rank against the single-GPU layer with the same options.
void expect_one_rank_equals_single_gpu(Fp4Format format, ActivationFormat activations, const MoeConfig& c = config()) {
  const MoeWeights w = random_moe_weights(c, format, 5);
  std::vector<ncclComm_t> comms = make_local_nccl_comms({0});
  LayerOptions o;
  o.max_tokens = 64;
  o.finalize = FinalizeMode::split;
  o.activations = activations;
  // the parallel layer runs the shared expert apart (over the rank's own tokens); so must its reference
  LayerOptions single_options = o;
  single_options.shared_expert_in_routed_gemms = false;
  MoeLayer single(c, w, single_options);
  for (ParallelMode mode : {ParallelMode::expert_allgather, ParallelMode::expert_alltoall, ParallelMode::tensor}) {
    ParallelMoeLayer par(c, w, mode, comms[0], o);
    EXPECT_EQ(par.ranks(), 1);
    for (int64_t T : {1, 13, 64}) {
      const Inputs in = inputs(c, T, 100 + uint64_t(T));
      const std::vector<uint16_t> want = run(single, c, in, T);
      EXPECT_EQ(run(par, c, in, T), want) << to_string(mode) << " T=" << T;
      // the step's rows per rank as an engine passes them: T itself, and one more
      EXPECT_EQ(run(par, c, in, T, int64_t(T)), want) << to_string(mode) << " T=" << T << " rows_per_rank=T";
      if (T < o.max_tokens) {
        EXPECT_EQ(run(par, c, in, T, T + 1), want) << to_string(mode) << " T=" << T;
      }
    }
  }
  destroy_nccl_comm(comms[0]);
}

TEST(GpuParallelLayer, OneRankEqualsTheSingleGpuLayerBitwise) {
  FP4MOE_REQUIRE_GPU();
  expect_one_rank_equals_single_gpu(Fp4Format::nvfp4, ActivationFormat::bf16);
}

TEST(GpuParallelLayer, OneRankWithFp8ActivationsEqualsTheSingleGpuLayerBitwise) {
  FP4MOE_REQUIRE_GPU();
  if (!test::first_device_has_wgmma()) GTEST_SKIP() << "fp8 activations run on sm_90's FP8 tiles";
  expect_one_rank_equals_single_gpu(Fp4Format::mxfp4, ActivationFormat::fp8);
}

// gpt-oss (MXFP4, expert biases, the clamped SwiGLU): the biases follow their
// experts (EP) and rows, the down bias added once (TP, src/parallel/partition.cpp).
TEST(GpuParallelLayer, OneRankGptOssWithBiasesEqualsTheSingleGpuLayerBitwise) {
  FP4MOE_REQUIRE_GPU();
  expect_one_rank_equals_single_gpu(Fp4Format::mxfp4, ActivationFormat::bf16, preset("gpt-oss-small"));
  if (test::first_device_has_wgmma())
    expect_one_rank_equals_single_gpu(Fp4Format::mxfp4, ActivationFormat::fp8, preset("gpt-oss-small"));
}

// Every local GPU a rank of each mode, against the single-GPU layer on that GPU (1e-3).
void expect_every_local_gpu_as_a_rank(const MoeConfig& c, Fp4Format format, int G) {
  const MoeWeights w = random_moe_weights(c, format, 6);
  std::vector<int> devs(static_cast<size_t>(G));
  for (int i = 0; i < G; ++i) devs[size_t(i)] = i;
  std::vector<ncclComm_t> comms = make_local_nccl_comms(devs);
  LayerOptions o;
  o.max_tokens = 48;
  o.finalize = FinalizeMode::split;
  for (ParallelMode mode : {ParallelMode::expert_allgather, ParallelMode::expert_alltoall, ParallelMode::tensor}) {
    std::vector<std::vector<uint16_t>> got(static_cast<size_t>(G)), want(static_cast<size_t>(G));
    std::vector<std::string> errors(static_cast<size_t>(G));
    std::vector<std::thread> threads;
    for (int r = 0; r < G; ++r)
      threads.emplace_back([&, r] {
        try {
          LayerOptions ro = o;
          ro.device = r;
          // each rank its own token count (EP: T differs by rank; TP: the same tokens everywhere)
          const int64_t T = mode == ParallelMode::tensor ? 40 : 1 + 11 * r % 48;
          const Inputs in = inputs(c, T, mode == ParallelMode::tensor ? 7 : 7 + uint64_t(r));
          ParallelMoeLayer par(c, w, mode, comms[size_t(r)], ro);
          got[size_t(r)] = run(par, c, in, T);
          MoeLayer single(c, w, ro);
          want[size_t(r)] = run(single, c, in, T);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < G; ++r) {
      ASSERT_EQ(errors[size_t(r)], "") << to_string(mode) << " rank " << r;
      std::vector<float> a(got[size_t(r)].size()), b(a.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_to_float(got[size_t(r)][i]), b[i] = bf16_to_float(want[size_t(r)][i]);
      int64_t nan = 0;
      EXPECT_LT(test::rel_frobenius(a, b, &nan), 1e-3) << to_string(mode) << " rank " << r;
      EXPECT_EQ(nan, 0);
    }
  }
  for (ncclComm_t comm : comms) destroy_nccl_comm(comm);
}

TEST(GpuParallelLayer, EveryLocalGpuAsARankAgainstTheSingleGpuLayer) {
  FP4MOE_REQUIRE_GPU();
  int n = 0;
  FP4MOE_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "one GPU here: the several-rank run needs 2 or more (scripts/gpu-run.sh parallel)";
  const int G = n >= 8 ? 8 : n >= 4 ? 4 : 2;
  // and gpt-oss with its biases (TP: the down bias added once), I wide enough for 8 slices of 128
  MoeConfig gpt_oss = preset("gpt-oss-small");
  gpt_oss.intermediate = 1024;
  for (const auto& [c, format] : {std::pair{config(), Fp4Format::nvfp4}, std::pair{gpt_oss, Fp4Format::mxfp4}})
    expect_every_local_gpu_as_a_rank(c, format, G);
}

TEST(GpuParallelLayer, AllToAllOverflowIsReported) {
  FP4MOE_REQUIRE_GPU();
  const MoeConfig c = config();
  const MoeWeights w = random_moe_weights(c, Fp4Format::nvfp4, 5);
  std::vector<ncclComm_t> comms = make_local_nccl_comms({0});
  LayerOptions o;
  o.max_tokens = 32;
  ParallelOptions small;
  small.alltoall_capacity = 8;
  ParallelMoeLayer par(c, w, ParallelMode::expert_alltoall, comms[0], o, small);
  EXPECT_EQ(par.alltoall_capacity(), 8);
  const Inputs in = inputs(c, 8, 3);
  run(par, c, in, 8);  // 8 tokens fit
  try {
    run(par, c, inputs(c, 13, 4), 13);
    ADD_FAILURE() << "13 tokens in a capacity of 8 rows were not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alltoall_capacity"), std::string::npos) << e.what();
  }
  destroy_nccl_comm(comms[0]);
}

TEST(GpuParallelLayer, BadSetupsNameTheValue) {
  FP4MOE_REQUIRE_GPU();
  std::vector<ncclComm_t> comms = make_local_nccl_comms({0});
  MoeConfig c = preset("glm5-small");  // I = 128: one rank is fine; the errors below come from the partition
  const MoeWeights w = random_moe_weights(c, Fp4Format::nvfp4, 8);
  EXPECT_THROW(ParallelMoeLayer(c, w, ParallelMode::expert_allgather, nullptr), Error);
  ParallelOptions zero;
  zero.alltoall_capacity = 0;
  try {
    ParallelMoeLayer(c, w, ParallelMode::expert_alltoall, comms[0], {}, zero);
    ADD_FAILURE() << "a capacity of 0 rows was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alltoall_capacity = 0"), std::string::npos) << e.what();
  }
  ParallelMoeLayer ok(c, w, ParallelMode::tensor, comms[0]);
  DeviceBuffer<uint16_t> x(size_t(c.hidden)), out(size_t(c.hidden));
  DeviceBuffer<float> l(size_t(c.num_experts));
  try {
    ok.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(x.get()), l.get(), 2000,
               reinterpret_cast<__nv_bfloat16*>(out.get()));
    ADD_FAILURE() << "T above max_tokens was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens = 2000"), std::string::npos) << e.what();
  }
  try {
    ok.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(x.get()), l.get(), 1,
               reinterpret_cast<__nv_bfloat16*>(out.get()), 0);
    ADD_FAILURE() << "rows_per_rank below the tokens was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows_per_rank = 0"), std::string::npos) << e.what();
  }
  destroy_nccl_comm(comms[0]);
}

}  // namespace
}  // namespace fp4moe
