#include "gpu_reference.hpp"

#include <cmath>
#include <numeric>

#include "fp4moe/error.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::test {
namespace {

__device__ float e2m1_value(unsigned code) {
  const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

// float8_e4m3fn (NVFP4) or e8m0 (MXFP4) block scale, exactly.
__device__ float scale_value(bool nvfp4, unsigned b) {
  if (!nvfp4) return b == 0xFF ? NAN : ldexpf(1.f, int(b) - 127);
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e == 0 ? ldexpf(float(m), -9) : ldexpf(float(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

template <class In, class Out>
__global__ void reference_gemm_kernel(const uint8_t* packed, const uint8_t* scales, bool nvfp4, float ws2, int64_t n_rows,
                                      int64_t k, const In* x, int64_t x_stride, const int32_t* rows, int64_t count, Out* y) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= count * n_rows) return;
  const int64_t r = warp / n_rows, n = warp % n_rows;
  const In* xr = x + int64_t(rows ? rows[r] : r) * x_stride;
  const uint8_t* wr = packed + n * (k / 2);
  const int block = nvfp4 ? 16 : 32;
  const uint8_t* sr = scales + n * (k / block);
  double acc = 0.0;
  for (int64_t j = lane; j < k / 2; j += 32) {
    const unsigned b = wr[j];
    // the float value dequantize() gives: e2m1 * fl(scale * weight_scale_2)
    const float s = __fmul_rn(scale_value(nvfp4, sr[(2 * j) / block]), ws2);
    acc += double(__fmul_rn(e2m1_value(b & 15), s)) * double(xr[2 * j]);
    acc += double(__fmul_rn(e2m1_value(b >> 4), s)) * double(xr[2 * j + 1]);
  }
  for (int o = 16; o >= 1; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[r * n_rows + n] = Out(acc);
}

__global__ void swiglu_kernel(const double* gate, const double* up, int64_t count, double* a) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) a[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}

unsigned blocks_for(int64_t threads) { return unsigned((threads + 255) / 256); }

// One expert's MLP for `count` rows of x (gathered by `rows`), fp64 out [count, H].
void expert_mlp_gpu(const DeviceFp4Matrix& gate, const DeviceFp4Matrix& up, const DeviceFp4Matrix& down, const float* x,
                    int64_t hidden, const int32_t* rows, int64_t count, double* y) {
  const int64_t I = gate.rows;
  DeviceBuffer<double> g(size_t(count * I)), u(size_t(count * I));
  reference_gemm(gate, x, hidden, rows, count, g.get());
  reference_gemm(up, x, hidden, rows, count, u.get());
  swiglu_kernel<<<blocks_for(count * I), 256>>>(g.get(), u.get(), count * I, g.get());
  FP4MOE_CHECK_LAUNCH("swiglu_kernel");
  reference_gemm(down, g.get(), I, static_cast<const int32_t*>(nullptr), count, y);
}

}  // namespace

DeviceFp4Matrix::DeviceFp4Matrix(const Fp4Matrix& m)
    : packed(m.packed), scales(m.scales), format(m.format), rows(m.rows), cols(m.cols), weight_scale_2(m.weight_scale_2) {}

template <class In, class Out>
void reference_gemm(const DeviceFp4Matrix& w, const In* x, int64_t x_stride, const int32_t* rows, int64_t count, Out* y) {
  if (count == 0) return;
  reference_gemm_kernel<In, Out><<<blocks_for(count * w.rows * 32), 256>>>(
      w.packed.get(), w.scales.get(), w.format == Fp4Format::nvfp4, w.weight_scale_2, w.rows, w.cols, x, x_stride, rows,
      count, y);
  FP4MOE_CHECK_LAUNCH("reference_gemm_kernel");
}
template void reference_gemm(const DeviceFp4Matrix&, const float*, int64_t, const int32_t*, int64_t, float*);
template void reference_gemm(const DeviceFp4Matrix&, const float*, int64_t, const int32_t*, int64_t, double*);
template void reference_gemm(const DeviceFp4Matrix&, const double*, int64_t, const int32_t*, int64_t, double*);

std::vector<float> grouped_gemm_reference_gpu(const std::vector<const DeviceFp4Matrix*>& experts,
                                              const std::vector<float>& x, int64_t k,
                                              const std::vector<int32_t>& offsets, const std::vector<int32_t>& gather) {
  FP4MOE_CHECK(offsets.size() == experts.size() + 1, "grouped_gemm_reference_gpu: " << offsets.size() << " offsets for "
                                                                                       << experts.size() << " experts");
  const int64_t P = offsets.back(), n = experts.empty() ? 0 : experts[0]->rows;
  if (P == 0) return {};
  std::vector<int32_t> rows = gather;
  if (rows.empty()) {
    rows.resize(size_t(P));
    std::iota(rows.begin(), rows.end(), 0);
  }
  rows.resize(size_t(P));
  DeviceBuffer<float> dx(x), dy(size_t(P * n));
  DeviceBuffer<int32_t> drows(rows);
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t r0 = offsets[e], count = offsets[e + 1] - offsets[e];
    FP4MOE_CHECK(experts[e]->rows == n && experts[e]->cols == k, "grouped_gemm_reference_gpu: expert " << e << " is ["
                                                                 << experts[e]->rows << ", " << experts[e]->cols << "]");
    reference_gemm(*experts[e], dx.get(), k, drows.get() + r0, count, dy.get() + r0 * n);
  }
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return dy.download();
}

std::vector<float> moe_forward_reference_gpu(const MoeConfig& cfg, const MoeWeights& w, const float* x, int64_t tokens,
                                             const Routing& routing) {
  const int64_t H = cfg.hidden, E = cfg.num_experts, k = cfg.top_k;
  FP4MOE_CHECK(int64_t(w.experts.size()) == E && routing.tokens == tokens && routing.top_k == k,
               "moe_forward_reference_gpu: " << w.experts.size() << " experts and routing for " << routing.tokens
                                             << " tokens, top-" << routing.top_k << "; the model has " << E
                                             << " experts, top-" << k << ", and " << tokens << " tokens were given");
  const Permutation perm = permute_reference(routing, E);
  DeviceBuffer<float> dx(std::vector<float>(x, x + tokens * H));
  // row p of the permutation reads token permuted_pair[p] / k
  std::vector<int32_t> token_of(perm.permuted_pair.size());
  for (size_t p = 0; p < token_of.size(); ++p) token_of[p] = int32_t(perm.permuted_pair[p] / k);
  DeviceBuffer<int32_t> dtoken(token_of);
  DeviceBuffer<double> dy(size_t(std::max<int64_t>(tokens * k * H, 1)));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = perm.expert_offsets[size_t(e)], count = perm.expert_offsets[size_t(e + 1)] - r0;
    if (!count) continue;  // an expert without tokens is never evaluated
    const ExpertWeights& ew = w.experts[size_t(e)];
    const DeviceFp4Matrix gate(ew.gate), up(ew.up), down(ew.down);
    expert_mlp_gpu(gate, up, down, dx.get(), H, dtoken.get() + r0, count, dy.get() + r0 * H);
  }
  std::vector<double> shared;
  if (w.has_shared && tokens > 0) {
    const DeviceFp4Matrix gate(w.shared.gate), up(w.shared.up), down(w.shared.down);
    DeviceBuffer<double> ds(size_t(tokens * H));
    expert_mlp_gpu(gate, up, down, dx.get(), H, static_cast<const int32_t*>(nullptr), tokens, ds.get());
    shared = ds.download();
  }
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<double> y = dy.download();  // permuted rows
  std::vector<int64_t> row_of_pair(size_t(tokens * k));
  for (size_t p = 0; p < perm.permuted_pair.size(); ++p) row_of_pair[size_t(perm.permuted_pair[p])] = int64_t(p);
  // out[t] = sum over slots j (ascending) of w[t,j] * y[t,j], then + shared, in double (as the CPU reference)
  std::vector<float> out(size_t(tokens * H));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t n = 0; n < H; ++n) {
      double acc = 0.0;
      for (int64_t j = 0; j < k; ++j)
        acc += double(routing.topk_weights[size_t(t * k + j)]) * y[size_t(row_of_pair[size_t(t * k + j)] * H + n)];
      if (!shared.empty()) acc += shared[size_t(t * H + n)];
      out[size_t(t * H + n)] = float(acc);
    }
  return out;
}

}  // namespace fp4moe::test
