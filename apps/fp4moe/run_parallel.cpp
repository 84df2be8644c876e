// fp4moe run --ep G | --tp G: the layer across G local GPUs over NCCL, one
// thread per GPU (rank r on cuda:r), each rank with its own random tokens
// (EP) or the same tokens (TP); times each rank's forward and, with --check,
// compares each rank's output with the single-GPU layer on its GPU.
#include <cmath>
#include <random>
#include <thread>

#include <fmt/core.h>

#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/parallel.hpp"
#include "run_layer.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/timing.hpp"

namespace fp4moe::cli {
namespace {

struct RankResult {
  std::string error;
  double median_ms = 0, single_ms = 0, rel_err = -1;
};

std::vector<uint16_t> random_bf16_bits(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& b : v) b = bf16_from_float(d(rng));
  return v;
}

}  // namespace

void run_parallel(const RunLayer& layer, const ParallelRequest& r, const std::vector<DeviceInfo>& devs) {
  FP4MOE_CHECK(r.mode == "ep" || r.mode == "tp", "parallel mode '" << r.mode << "' is not ep or tp");
  FP4MOE_CHECK(r.ranks >= 1, "--" << r.mode << " " << r.ranks << " must be at least 1");
  FP4MOE_CHECK(int(devs.size()) >= r.ranks, "--" << r.mode << " " << r.ranks << " needs " << r.ranks
                                                 << " GPUs; this machine has " << devs.size());
  const MoeConfig& cfg = layer.cfg;
  const ParallelMode mode = r.mode == "ep" ? ParallelMode::expert_allgather : ParallelMode::tensor;
  const int64_t T = r.tokens, H = cfg.hidden;
  std::vector<int> ids(size_t(r.ranks));
  for (int i = 0; i < r.ranks; ++i) ids[size_t(i)] = i;
  std::vector<ncclComm_t> comms = make_local_nccl_comms(ids);
  fmt::print("fp4moe run --{} {} on {} x {}\n  model      {}\n  weights    {}\n  tokens     {} per rank\n", r.mode,
             r.ranks, r.ranks, devs[0].name, describe_model(cfg), layer.source, T);
  std::vector<RankResult> results(size_t(r.ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < r.ranks; ++rank)
    threads.emplace_back([&, rank] {
      RankResult& res = results[size_t(rank)];
      try {
        LayerOptions lo;
        lo.max_tokens = T;
        lo.device = rank;
        lo.finalize = FinalizeMode::split;
        ParallelMoeLayer par(cfg, layer.weights, mode, comms[size_t(rank)], lo);
        const uint64_t seed = r.seed + (mode == ParallelMode::tensor ? 0 : uint64_t(rank));
        DeviceBuffer<uint16_t> x(random_bf16_bits(T * H, seed)), out(size_t(T * H)), ref(size_t(T * H));
        std::mt19937_64 rng(seed + 1000);
        std::normal_distribution<float> d(0.f, 1.f);
        std::vector<float> logits(size_t(T * cfg.num_experts));
        for (float& v : logits) v = d(rng);
        DeviceBuffer<float> l(logits);
        out.fill_bytes(0xFF);
        cudaStream_t s;
        FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
        auto* hx = reinterpret_cast<const __nv_bfloat16*>(x.get());
        // every rank runs the same number of forwards: each is a collective
        res.median_ms = time_on_stream([&] { par.forward(s, hx, l.get(), T, reinterpret_cast<__nv_bfloat16*>(out.get())); },
                                       s, 3, r.reps).median_ms;
        par.check_status(s);
        if (r.check) {
          MoeLayer single(cfg, layer.weights, lo);
          res.single_ms = time_on_stream([&] { single.forward(s, hx, l.get(), T, reinterpret_cast<__nv_bfloat16*>(ref.get())); },
                                         s, 3, r.reps).median_ms;
          const std::vector<uint16_t> a = out.download(), b = ref.download();
          double num = 0, den = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            const double ga = bf16_to_float(a[i]), gb = bf16_to_float(b[i]);
            num += (ga - gb) * (ga - gb), den += gb * gb;
          }
          res.rel_err = std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
        }
        FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
      } catch (const std::exception& e) {
        res.error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (ncclComm_t c : comms) destroy_nccl_comm(c);
  bool ok = true;
  for (int rank = 0; rank < r.ranks; ++rank) {
    const RankResult& res = results[size_t(rank)];
    if (!res.error.empty()) {
      fmt::print("  rank {}     error: {}\n", rank, res.error);
      ok = false;
      continue;
    }
    fmt::print("  rank {}     forward {:.4f} ms median of {}", rank, res.median_ms, r.reps);
    if (r.check) {
      fmt::print("; single-GPU layer {:.4f} ms; output vs the single-GPU layer rel. error {:.3e}", res.single_ms, res.rel_err);
      ok &= res.rel_err < 1e-3;
    }
    fmt::print("\n");
  }
  FP4MOE_CHECK(ok, "--" << r.mode << " " << r.ranks << ": a rank failed or its output differs from the single-GPU layer");
}

}  // namespace fp4moe::cli
