// FP4 formats, bit-exact to docs/formats.md.
//
//   E2M1   4-bit element: codes 0..15 -> 0 .5 1 1.5 2 3 4 6 and their negatives.
//   UE4M3  NVFP4 block scale: float8_e4m3fn with sign 0, one per 16 elements.
//   UE8M0  MXFP4 block scale: a power of two, one per 32 elements.
//
// NVFP4 matrix [N, K]: packed uint8 [N, K/2] (element 2i in the low nibble),
// scales uint8 (e4m3fn bits) [N, K/16] row-major, and one fp32 weight_scale_2,
// as NVIDIA's Model Optimizer (ModelOpt) writes them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4moe {

inline constexpr int kNvfp4BlockSize = 16;
inline constexpr int kMxfp4BlockSize = 32;
inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;

// ---- scalar codecs --------------------------------------------------------
float e2m1_decode(uint8_t code);              // code in 0..15
uint8_t e2m1_encode(float x);                 // RNE, saturates to +-6, NaN -> +6 (code 7)
float e4m3_decode(uint8_t bits);              // float8_e4m3fn; 0x7F/0xFF are NaN
uint8_t e4m3_encode(float x);                 // RNE, saturates to +-448, NaN -> 0x7F
uint8_t ue4m3_encode(float x);                // scale: x >= 0 required (negative -> error), RNE, sat 448
float ue8m0_decode(uint8_t bits);             // 2^(bits-127); 0xFF is NaN
uint8_t ue8m0_encode_ceil(float x);           // smallest power of two >= x (x > 0), clamped to range
uint16_t bf16_from_float(float x);            // RNE; NaN stays NaN
float bf16_to_float(uint16_t bits);

// ---- matrices -------------------------------------------------------------
enum class Fp4Format { nvfp4, mxfp4 };
// How a checkpoint's w13 (2I rows) holds gate and up: gate then up, up then
// gate, or alternating row by row (gate 0, up 0, gate 1, ...: gpt-oss's checkpoint).
enum class GateUpOrder { gate_up, up_gate, interleaved };
const char* to_string(Fp4Format f);
// "nvfp4" or "mxfp4"; anything else is an fp4moe::Error naming it.
Fp4Format parse_fp4_format(const std::string& name);

// The activations the expert GEMMs multiply the FP4 weights by: bf16 (W4A16),
// or float8_e4m3fn with an fp32 scale per row (W4A8, docs/fp8.md).
enum class ActivationFormat { bf16, fp8 };
const char* to_string(ActivationFormat a);
// "bf16" or "fp8" (also "fp8_e4m3", "e4m3"); anything else is an fp4moe::Error naming it.
ActivationFormat parse_activation_format(const std::string& name);

// Bytes a GEMM reads per weight: its e2m1 code (half a byte) and its share of
// the block's one-byte scale (the benchmarks' byte model).
constexpr double fp4_bytes_per_weight(Fp4Format f) {
  return 0.5 + 1.0 / (f == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize);
}

// A [rows, cols] FP4 matrix in the row-major "checkpoint" layout.
struct Fp4Matrix {
  Fp4Format format = Fp4Format::nvfp4;
  int64_t rows = 0;
  int64_t cols = 0;                 // K, the reduction dimension
  std::vector<uint8_t> packed;      // [rows, cols/2], element 2i in the low nibble
  std::vector<uint8_t> scales;      // [rows, cols/block] e4m3fn (nvfp4) or e8m0 (mxfp4) bits
  // NVFP4: ModelOpt's per-tensor scale, amax * fl(1/2688); a value is
  // e2m1 * fl(block scale * weight_scale_2) (docs/formats.md). MXFP4: 1.
  float weight_scale_2 = 1.0f;

  int block_size() const { return format == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize; }
  int64_t scale_cols() const { return cols / block_size(); }
  uint8_t code(int64_t r, int64_t c) const {
    const uint8_t b = packed[static_cast<size_t>(r * (cols / 2) + c / 2)];
    return (c & 1) ? (b >> 4) : (b & 0xF);
  }
  float scale(int64_t r, int64_t kb) const;   // decoded block scale (without global)
  float dequant(int64_t r, int64_t c) const;  // exact value this element stands for
};

// Quantize a row-major [rows, cols] matrix. cols must be a multiple of the
// block size (16 for NVFP4, 32 for MXFP4), otherwise fp4moe::Error.
// NVFP4 is bit-exact with ModelOpt's export (docs/formats.md). amax defaults to
// the matrix's max |x|; a larger one is given where ModelOpt shares it (an
// expert's gate_proj and up_proj both take the larger of their two amax).
Fp4Matrix quantize_nvfp4(const float* x, int64_t rows, int64_t cols);
Fp4Matrix quantize_nvfp4(const float* x, int64_t rows, int64_t cols, float amax);
Fp4Matrix quantize_nvfp4_bf16(const uint16_t* x, int64_t rows, int64_t cols);
Fp4Matrix quantize_nvfp4_bf16(const uint16_t* x, int64_t rows, int64_t cols, float amax);
float nvfp4_amax(const float* x, int64_t rows, int64_t cols);  // max |x|, with quantize_nvfp4's input checks
Fp4Matrix quantize_mxfp4(const float* x, int64_t rows, int64_t cols);
Fp4Matrix quantize(Fp4Format f, const float* x, int64_t rows, int64_t cols);

// Dequantize to fp32: every value is e2m1 * fl(scale * weight_scale_2), as
// ModelOpt computes it (MXFP4: e2m1 * scale, exact).
std::vector<float> dequantize(const Fp4Matrix& m);

// ---- scale layouts --------------------------------------------------------
// The 128x4 swizzled scale layout of CUTLASS / TensorRT-LLM:
// off(m,kb) = (m/128)*ceil(Kc/4)*512 + (kb/4)*512 + (m%32)*16 + ((m%128)/32)*4 + kb%4,
// rows padded to 128 and scale columns to 4 (padding bytes are zero).
size_t swizzled_scale_bytes(int64_t rows, int64_t scale_cols);
size_t swizzled_scale_offset(int64_t m, int64_t kb, int64_t scale_cols);
std::vector<uint8_t> swizzle_scales_128x4(const uint8_t* row_major, int64_t rows, int64_t scale_cols);
std::vector<uint8_t> unswizzle_scales_128x4(const uint8_t* swizzled, int64_t rows, int64_t scale_cols);

}  // namespace fp4moe
