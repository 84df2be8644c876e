// The decode K loop's math alone on sm_90a (bench/wgmma_rate_kernels.cu), for
// bench_wgmma_rate: one case per token width, fragment kind and depth.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace fp4moe::bench {

struct WgmmaRateCase {
  int n;           // token columns per wgmma
  int depth;       // A fragment buffers: wgmma groups in flight per warpgroup
  int mode;        // 0 raw code words, 1 dequantized, 2 dequantized without wgmma, 3 unpacked, 4 unpacked + integer ops
  int warpgroups;  // consumer warpgroups per CTA (one CTA per SM)
  int acc_sets;    // accumulator sets: 2 alternates them over k16 steps
};

inline constexpr int kWgmmaRateStepsPerPass = 8;  // k16 steps per pass: two 64-k atoms, as a 128-k stage

std::vector<WgmmaRateCase> wgmma_rate_cases();
// FLOPs one CTA multiplies per pass (mode 2 counted as if it multiplied)
double wgmma_rate_flop_per_pass(const WgmmaRateCase& c);
// One launch of case `index`: `ctas` CTAs of `passes` passes (8 k16 steps each).
void launch_wgmma_rate(size_t index, int ctas, int passes, float* sink, cudaStream_t stream);

}  // namespace fp4moe::bench
