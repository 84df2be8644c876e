// The GPU oracle (gpu_reference.hpp) against the CPU reference in double, on
// small problems of both formats: it may stand in for the CPU reference only
// because it computes the same function.
#include <gtest/gtest.h>

#include <numeric>

#include "fp4moe/reference.hpp"
#include "gpu_reference.hpp"
#include "gpu_test_util.hpp"

namespace fp4moe {
namespace {

// The two oracles sum in other orders; each rounds an fp64 sum to fp32 once.
constexpr double kOracleTolerance = 1e-6;

TEST(GpuReference, GroupedGemmMatchesTheCpuReference) {
  FP4MOE_REQUIRE_GPU();
  for (Fp4Format f : {Fp4Format::nvfp4, Fp4Format::mxfp4}) {
    const int64_t n = 96, k = 320;
    const std::vector<int> counts = {3, 0, 17, 1, 40};
    std::vector<int32_t> offsets(counts.size() + 1, 0);
    for (size_t e = 0; e < counts.size(); ++e) offsets[e + 1] = offsets[e] + counts[e];
    const int64_t P = offsets.back(), T = 29;
    std::vector<Fp4Matrix> experts;
    std::vector<std::unique_ptr<test::DeviceFp4Matrix>> on_device;
    std::vector<const test::DeviceFp4Matrix*> pointers;
    for (size_t e = 0; e < counts.size(); ++e) {
      const test::Bf16Matrix w = test::random_bf16(n * k, 300 + e, 0.05f * float(e + 1));
      experts.push_back(quantize(f, w.values.data(), n, k));
      on_device.push_back(std::make_unique<test::DeviceFp4Matrix>(experts.back()));
      pointers.push_back(on_device.back().get());
    }
    const test::Bf16Matrix x = test::random_bf16(T * k, 31);
    std::mt19937 rng(5);
    std::vector<int32_t> gather(static_cast<size_t>(P));
    for (int32_t& g : gather) g = int32_t(rng() % T);
    for (bool gathered : {true, false}) {
      std::vector<float> xs = x.values;
      if (!gathered) xs.resize(size_t(std::min<int64_t>(P, T) * k));
      const int64_t rows_in_x = gathered ? T : std::min<int64_t>(P, T);
      std::vector<int32_t> rows = gathered ? gather : std::vector<int32_t>{};
      std::vector<int32_t> off = offsets;
      if (!gathered) {  // contiguous rows: as many as x holds
        off.assign(counts.size() + 1, 0);
        off[1] = int32_t(rows_in_x);
        for (size_t e = 1; e < counts.size(); ++e) off[e + 1] = off[e];
      }
      const std::vector<float> gpu = test::grouped_gemm_reference_gpu(pointers, xs, k, off, rows);
      std::vector<float> cpu(size_t(off.back() * n));
      for (size_t e = 0; e < counts.size(); ++e) {
        const int64_t r0 = off[e], count = off[e + 1] - off[e];
        std::vector<float> xr(size_t(count * k));
        for (int64_t r = 0; r < count; ++r)
          std::copy_n(xs.begin() + int64_t(gathered ? gather[size_t(r0 + r)] : r0 + r) * k, k, xr.begin() + r * k);
        expert_gemm_reference(experts[e], xr.data(), count, cpu.data() + r0 * n);
      }
      int64_t nans = 0;
      const double err = test::rel_frobenius(gpu, cpu, &nans);
      EXPECT_EQ(nans, 0) << to_string(f);
      EXPECT_LT(err, kOracleTolerance) << to_string(f) << (gathered ? " gathered" : " contiguous");
      std::printf("  %s %s: GPU oracle vs CPU reference %.2e\n", to_string(f), gathered ? "gathered" : "contiguous", err);
    }
  }
}

TEST(GpuReference, LayerMatchesTheCpuReference) {
  FP4MOE_REQUIRE_GPU();
  for (const char* name : {"glm5-small", "mixtral-small"}) {
    const MoeConfig cfg = preset(name);
    const MoeWeights w = random_moe_weights(cfg, Fp4Format::nvfp4, 41);
    const int64_t T = 37;
    const test::Bf16Matrix x = test::random_bf16(T * cfg.hidden, 42);
    const test::Bf16Matrix logits = test::random_bf16(T * cfg.num_experts, 43);
    const Routing r = route_reference(cfg, logits.values.data(), T, w.correction_bias);
    const std::vector<float> cpu = moe_forward_reference(cfg, w, x.values.data(), T, r);
    const std::vector<float> gpu = test::moe_forward_reference_gpu(cfg, w, x.values.data(), T, r);
    int64_t nans = 0;
    const double err = test::rel_frobenius(gpu, cpu, &nans);
    EXPECT_EQ(nans, 0) << name;
    EXPECT_LT(err, kOracleTolerance) << name;
    std::printf("  %s T=%lld: GPU oracle vs CPU reference %.2e\n", name, (long long)T, err);
  }
}

}  // namespace
}  // namespace fp4moe
