// Where an element, a block scale and a gated row live in the prepared weight
// layout (gemm_pack.hpp), and where a scale lives in the 128x4 swizzled layout
// of CUTLASS / TensorRT-LLM: the arithmetic the host packer
// (prepare_gemm.cpp), the GPU prepare kernel (kernels/prepare_weights.cu)
// and the swizzle helpers (scale_swizzle.cpp) share.
#pragma once
#include <cstdint>

#include "format/gemm_pack.hpp"
#include "fp4moe/format.hpp"

namespace fp4moe::pack {

// GEMM1's gate and up rows alternate in blocks of this many rows (gate 0-15,
// up 0-15, gate 16-31, ...), so that one 16-row MMA fragment pair holds
// matching gate and up rows for the SwiGLU epilogue.
inline constexpr int kGateUpInterleaveRows = 16;

// Byte offset, inside one expert, of lane `lane`'s word for k16 step t of the
// k64 granule kc of the 16-row group rg.
FP4MOE_HD int64_t word_offset(int64_t k, int64_t rg, int64_t kc, int lane, int t) {
  return ((rg * (k / 64) + kc) * kLanes + lane) * 16 + t * 4;
}

// W[row, col]: the byte offset of its word and its (register, half) in it.
struct CodeSlot {
  int64_t byte;
  int reg, half;
};
FP4MOE_HD CodeSlot code_slot(int64_t k, int64_t row, int64_t col) {
  const int64_t rr = row % 16, kin = col % 64, kk = kin % 16;
  const int lane = int((rr % 8) * 4 + (kk % 8) / 2);
  return {word_offset(k, row / 16, col / 64, lane, int(kin / 16)), int(rr / 8 + 2 * (kk / 8)), int(kk % 2)};
}

// A 16-row group's scale granules (128 k each; the last is part padding where
// K is not a multiple of 128: zero bytes, read only against zero codes).
FP4MOE_HD int64_t scale_granules(int64_t k) { return (k + 127) / 128; }
// An expert's prepared scale bytes: N/16 row groups of scale_granules(K) x 128 bytes.
FP4MOE_HD int64_t scale_bytes(int64_t n, int64_t k) { return n / 16 * scale_granules(k) * kScaleGranuleBytes; }

// Byte offset, inside one expert, of the prepared scale of W[row, col]'s 16-column block.
FP4MOE_HD int64_t scale_offset(int64_t k, int64_t row, int64_t col) {
  const int64_t rg = row / 16, rr = row % 16;
  const int64_t kc = col / 128, step = (col % 128) / 16;
  return (rg * scale_granules(k) + kc) * kScaleGranuleBytes + (rr % 8) * 16 + step * 2 + rr / 8;
}

// The row of a checkpoint's w13 (`src_rows` gate rows and as many up rows, in
// `order`) that holds gate row `part_row`, or up row `part_row` when `up`.
FP4MOE_HD int64_t w13_checkpoint_row(int64_t part_row, bool up, int64_t src_rows, GateUpOrder order) {
  if (order == GateUpOrder::interleaved) return 2 * part_row + (up ? 1 : 0);
  return up != (order == GateUpOrder::up_gate) ? src_rows + part_row : part_row;
}

// The row of the checkpoint's w13 (`src_rows` gate and as many up rows) that
// prepared gated row `row` holds (each half of the prepared rows padded to a
// multiple of 16), or -1 for a padding row (zero weights).
FP4MOE_HD int64_t gated_source_row(int64_t row, int64_t src_rows, GateUpOrder order) {
  const int64_t block = row / kGateUpInterleaveRows;
  const int64_t part_row = (block / 2) * kGateUpInterleaveRows + row % kGateUpInterleaveRows;
  const bool up = block % 2 == 1;
  return part_row < src_rows ? w13_checkpoint_row(part_row, up, src_rows, order) : -1;
}

// 128x4 swizzled scales: rows padded to 128, scale columns to 4; each 128x4
// tile is 512 contiguous bytes, tiles row-tile-major:
//   off(m, kb) = (m/128) ceil(Kc/4) 512 + (kb/4) 512 + (m%32) 16 + ((m%128)/32) 4 + kb%4
FP4MOE_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
FP4MOE_HD int64_t swizzled_bytes(int64_t rows, int64_t scale_cols) {
  return round_up(rows, 128) * round_up(scale_cols, 4);
}
FP4MOE_HD int64_t swizzled_offset(int64_t m, int64_t kb, int64_t scale_cols) {
  return (m / 128) * (round_up(scale_cols, 4) / 4) * 512 + (kb / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 +
         kb % 4;
}

}  // namespace fp4moe::pack
