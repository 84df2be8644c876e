// fp4moe run|bench --ep G | --tp G: the layer across G local GPUs over NCCL,
// one thread per GPU (rank r on cuda:r), each rank with its own random tokens
// (EP) or the same tokens (TP). For each token count per rank: every rank's
// forward, its collectives alone, and the single-GPU layer holding every
// expert on the same tokens, timed interleaved; with --check each rank's
// output against that single-GPU layer.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <random>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "fp4moe/reference.hpp"
#include "common/median.hpp"
#include "fp4moe/error.hpp"
#include "fp4moe/layer.hpp"
#include "fp4moe/parallel.hpp"
#include "io/atomic_file.hpp"
#include "run_layer.hpp"
#include "common/cuda_check.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/timing.hpp"

namespace fp4moe::cli {
namespace {

struct Point {  // one rank at one token count
  double forward_ms = 0, comm_ms = 0, single_ms = 0, rel_err = -1;
  bool bitwise = false;
};

std::vector<uint16_t> random_bf16_bits(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& b : v) b = bf16_from_float(d(rng));
  return v;
}

ParallelMode mode_of(const ParallelRequest& r) {
  FP4MOE_CHECK(r.mode == "ep" || r.mode == "tp", "parallel mode '" << r.mode << "' is not ep or tp");
  return r.mode == "tp" ? ParallelMode::tensor : parse_parallel_mode(r.dispatch);
}

double rel_error(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ga = bf16_to_float(a[i]), gb = bf16_to_float(b[i]);
    num += (ga - gb) * (ga - gb), den += gb * gb;
  }
  return std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
}

// One rank's whole sweep. Every rank runs the same sequence of collectives.
void run_rank(const RunLayer& layer, const ParallelRequest& r, ParallelMode mode, ncclComm_t comm, int rank,
              std::barrier<>& sync, std::vector<Point>& points) {
  const MoeConfig& cfg = layer.cfg;
  const int64_t H = cfg.hidden, Tmax = *std::max_element(r.tokens.begin(), r.tokens.end());
  LayerOptions lo = r.layer;
  lo.max_tokens = Tmax;
  lo.device = rank;
  lo.finalize = FinalizeMode::split;
  ParallelOptions po;
  po.alltoall_capacity = r.capacity;
  ParallelMoeLayer par(cfg, layer.weights, mode, comm, lo, po);
  MoeLayer single(cfg, layer.weights, lo);
  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  const uint64_t seed = r.seed + (mode == ParallelMode::tensor ? 0 : uint64_t(rank));
  DeviceBuffer<uint16_t> x(random_bf16_bits(Tmax * H, seed)), out(size_t(Tmax * H)), ref(size_t(Tmax * H));
  DeviceBuffer<float> l(gaussian_logits(Tmax, cfg.num_experts, seed + 1000));
  auto* hx = reinterpret_cast<const __nv_bfloat16*>(x.get());
  auto* o = reinterpret_cast<__nv_bfloat16*>(out.get());
  auto* o_ref = reinterpret_cast<__nv_bfloat16*>(ref.get());
  constexpr int kRounds = 3;  // the three timings interleaved, so that clocks drift alike
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    const int64_t T = r.tokens[i];
    Point& pt = points[i];
    out.fill_bytes(0xFF);
    ref.fill_bytes(0xFF);
    // every rank has T tokens: the exchanges carry T rows per rank, as an engine passes the step's count
    for (int w = 0; w < r.warmup_forwards; ++w) par.forward(s, hx, l.get(), T, o, T);
    std::vector<double> fwd, comm_ms, one;
    for (int round = 0; round < kRounds; ++round) {
      fwd.push_back(time_on_stream([&] { par.forward(s, hx, l.get(), T, o, T); }, s, 2, r.reps).median_ms);
      comm_ms.push_back(time_on_stream([&] { par.communicate(s, T, T); }, s, 2, r.reps).median_ms);
      one.push_back(time_on_stream([&] { single.forward(s, hx, l.get(), T, o_ref); }, s, 2, r.reps).median_ms);
    }
    par.forward(s, hx, l.get(), T, o, T);  // the outputs compared: after the timings, from the same inputs
    single.forward(s, hx, l.get(), T, o_ref);
    par.check_status(s);
    single.check_status(s);
    std::sort(fwd.begin(), fwd.end()), std::sort(comm_ms.begin(), comm_ms.end()), std::sort(one.begin(), one.end());
    pt.forward_ms = detail::median_of_sorted(fwd);
    pt.comm_ms = detail::median_of_sorted(comm_ms);
    pt.single_ms = detail::median_of_sorted(one);
    if (r.check) {
      const std::vector<uint16_t> a = out.download(), b = ref.download();
      const std::vector<uint16_t> a_t(a.begin(), a.begin() + T * H), b_t(b.begin(), b.begin() + T * H);
      pt.bitwise = a_t == b_t;
      pt.rel_err = rel_error(a_t, b_t);
    }
    sync.arrive_and_wait();  // the next token count starts together
  }
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace

void run_parallel(const RunLayer& layer, const ParallelRequest& r, const std::vector<DeviceInfo>& devs) {
  const ParallelMode mode = mode_of(r);
  FP4MOE_CHECK(r.ranks >= 1, "--" << r.mode << " " << r.ranks << " must be at least 1");
  FP4MOE_CHECK(int(devs.size()) >= r.ranks, "--" << r.mode << " " << r.ranks << " needs " << r.ranks
                                                 << " GPUs; this machine has " << devs.size());
  FP4MOE_CHECK(!r.tokens.empty(), "no token counts given");
  for (int64_t T : r.tokens) FP4MOE_CHECK(T >= 1, "--tokens " << T << " must be at least 1");
  const MoeConfig& cfg = layer.cfg;
  std::vector<int> ids(size_t(r.ranks));
  for (int i = 0; i < r.ranks; ++i) ids[size_t(i)] = i;
  std::vector<ncclComm_t> comms = make_local_nccl_comms(ids);
  fmt::print("fp4moe --{} {} ({}) on {} x {}\n  model      {}\n  weights    {}\n", r.mode, r.ranks, to_string(mode), r.ranks,
             devs[0].name, describe_model(cfg), layer.source);
  std::vector<std::vector<Point>> points(size_t(r.ranks), std::vector<Point>(r.tokens.size()));
  std::vector<std::string> errors(size_t(r.ranks));
  std::barrier<> sync(r.ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < r.ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        run_rank(layer, r, mode, comms[size_t(rank)], rank, sync, points[size_t(rank)]);
      } catch (const std::exception& e) {
        // Setup errors (the partition, memory) fail every rank alike, before any collective.
        errors[size_t(rank)] = e.what();
        sync.arrive_and_drop();
      }
    });
  for (auto& t : threads) t.join();
  bool failed = false;
  for (int rank = 0; rank < r.ranks; ++rank)
    if (!errors[size_t(rank)].empty()) fmt::print("  rank {}     error: {}\n", rank, errors[size_t(rank)]), failed = true;
  if (!failed)
    for (ncclComm_t c : comms) destroy_nccl_comm(c);
  FP4MOE_CHECK(!failed, "--" << r.mode << " " << r.ranks << ": a rank failed (above)");
  // The slowest rank sets the layer's time; the comparison is its own single-GPU layer.
  fmt::print("\n| T per rank | forward ms (slowest rank) | collectives alone ms | share | single-GPU layer ms | "
             "forward / single |{}\n|---|---|---|---|---|---|{}\n",
             r.check ? " output vs single GPU |" : "", r.check ? "---|" : "");
  nlohmann::json rows = nlohmann::json::array();
  bool ok = true;
  // bf16: the ranks sum the same products in another order. fp8: a tensor-parallel
  // rank scales its slice of each GEMM2 input row on its own slice's largest value,
  // so its e4m3 rounding differs from the single GPU's (each quantization costs
  // about 2.5e-2, docs/fp8.md).
  const double tolerance = r.layer.activations == ActivationFormat::fp8 ? 5e-2 : 1e-3;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    int worst = 0;
    for (int rank = 1; rank < r.ranks; ++rank)
      if (points[size_t(rank)][i].forward_ms > points[size_t(worst)][i].forward_ms) worst = rank;
    const Point& p = points[size_t(worst)][i];
    double err = 0;
    bool bitwise = true;
    for (int rank = 0; rank < r.ranks; ++rank)
      err = std::max(err, points[size_t(rank)][i].rel_err), bitwise &= points[size_t(rank)][i].bitwise;
    const std::string check = !r.check ? "" : bitwise ? " bitwise |" : fmt::format(" {:.2e} |", err);
    fmt::print("| {} | {:.4f} | {:.4f} | {:.0f}% | {:.4f} | {:.3f}x |{}\n", r.tokens[i], p.forward_ms, p.comm_ms,
               100 * p.comm_ms / p.forward_ms, p.single_ms, p.forward_ms / p.single_ms, check);
    if (r.check) ok &= err < tolerance;
    nlohmann::json per_rank = nlohmann::json::array();
    for (int rank = 0; rank < r.ranks; ++rank) {
      const Point& q = points[size_t(rank)][i];
      per_rank.push_back({{"rank", rank}, {"forward_ms", q.forward_ms}, {"collectives_ms", q.comm_ms},
                          {"single_gpu_ms", q.single_ms}, {"rel_err", q.rel_err}, {"bitwise", q.bitwise}});
    }
    rows.push_back({{"tokens_per_rank", r.tokens[i]}, {"ranks", per_rank}});
  }
  if (!r.json_out.empty()) {
    const nlohmann::json report = {{"mode", r.mode}, {"dispatch", to_string(mode)}, {"ranks", r.ranks},
                                   {"gpu", devs[0].name}, {"model", describe_model(cfg)}, {"weights", layer.source},
                                   {"reps", r.reps}, {"warmup_forwards", r.warmup_forwards}, {"rows_per_rank", "T"},
                                   {"alltoall_capacity", r.capacity}, {"points", rows}};
    io::write_file_atomically(r.json_out, report.dump(1) + "\n");
    fmt::print("\nwrote {}\n", r.json_out);
  }
  FP4MOE_CHECK(ok, "--" << r.mode << " " << r.ranks << ": a rank's output differs from the single-GPU layer by "
                         << tolerance << " or more");
}

}  // namespace fp4moe::cli
