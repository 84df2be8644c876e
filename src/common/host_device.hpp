// Functions shared by host code and kernels: inline on the host, forced
// inline on the device.
#pragma once

#if defined(__CUDACC__)
#define FP4MOE_HD __host__ __device__ __forceinline__
#else
#define FP4MOE_HD inline
#endif
