// The FP8 row copy (W4A8, docs/fp8.md): bf16 rows, gathered by an index or
// in order, to e4m3 codes with fp32 scales, the rows in expert order as the
// FP8 tiles' tensor copies read them. Bitwise equal to quantize_rows_e4m3 on
// the host.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp4moe::kernels {

struct QuantizeRowsFp8Args {
  const __nv_bfloat16* x = nullptr;  // [*, cols]
  const int32_t* rows = nullptr;     // [count]: out row p is x[rows[p]]; null: x[p]
  int64_t count = 0, cols = 0;       // cols a multiple of 16
  int64_t group = 0;                 // 0: one scale per row; 128: per row and 128 columns
  uint8_t* codes = nullptr;          // [count, out_cols] e4m3; columns past cols are 0
  int64_t out_cols = 0;              // 0: cols; more: zero padded (a multiple of 16)
  float* scales = nullptr;           // [count, groups]: 1, or ceil(cols / 128)
};
void launch_quantize_rows_fp8(const QuantizeRowsFp8Args& a, cudaStream_t stream);

}  // namespace fp4moe::kernels
