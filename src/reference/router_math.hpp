// The router's fp32 arithmetic, one source for the CPU reference and the GPU
// router: every operation is one IEEE fp32 operation (round to nearest even),
// written through fadd/fmul/fdiv/fma so neither compiler contracts or
// reorders it. docs/reference.md states the contract.
#pragma once
#include <cmath>
#include <limits>

#if defined(__CUDACC__)
#define FP4MOE_ROUTER_HD __host__ __device__ __forceinline__
#else
#define FP4MOE_ROUTER_HD inline
#endif

namespace fp4moe::router_math {

FP4MOE_ROUTER_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FP4MOE_ROUTER_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FP4MOE_ROUTER_HD float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FP4MOE_ROUTER_HD float ffma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
FP4MOE_ROUTER_HD float frint(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);  // the default rounding mode: to nearest even
#endif
}
FP4MOE_ROUTER_HD float fldexp(float x, int n) {
#if defined(__CUDA_ARCH__)
  return ldexpf(x, n);
#else
  return std::ldexp(x, n);
#endif
}

// exp(x) from IEEE operations only. x > 88.5 -> +inf; x < -87 -> +0.
FP4MOE_ROUTER_HD float expf_exact(float x) {
  if (x > 0x1.62p+6f) return std::numeric_limits<float>::infinity();
  if (x < -0x1.5cp+6f) return 0.0f;
  const float n = frint(fmul(x, 0x1.715476p+0f));  // rint(x * log2(e))
  float r = ffma(-n, 0x1.62e4p-1f, x);             // Cody-Waite: x - n*ln2_hi
  r = ffma(-n, 0x1.7f7d1cp-20f, r);                //            - n*ln2_lo
  float p = 0x1.a01a02p-13f;                       // degree-7 Taylor, Horner with fma
  p = ffma(p, r, 0x1.6c16c2p-10f);
  p = ffma(p, r, 0x1.111112p-7f);
  p = ffma(p, r, 0x1.555556p-5f);
  p = ffma(p, r, 0x1.555556p-3f);
  p = ffma(p, r, 0.5f);
  p = ffma(p, r, 1.0f);
  p = ffma(p, r, 1.0f);
  return fldexp(p, static_cast<int>(n));
}

FP4MOE_ROUTER_HD float sigmoidf_exact(float x) { return fdiv(1.0f, fadd(1.0f, expf_exact(-x))); }

}  // namespace fp4moe::router_math
