// The tensor-map geometry of the prepared weights and block scales that a
// warp-specialized tile's producer copies one stage at a time (one TMA box per
// operand per stage). The host encodes these numbers into CUtensorMaps
// (src/kernels/fp4_grouped_gemm_ws_sm90.cu); the CPU tests check that a box is
// exactly the planner's per-stage bytes for every tile and shape it accepts.
#pragma once
#include <cstdint>

#include "plan/gemm_layout.hpp"

namespace fp4moe::plan {

struct TmaGeometry {
  static constexpr int kMaxRank = 4;
  int rank = 0;
  int64_t dims[kMaxRank] = {};         // elements (bytes here), innermost first
  int64_t strides[kMaxRank - 1] = {};  // bytes, of dims 1 and up
  int64_t box[kMaxRank] = {};          // elements per box, innermost first
  constexpr int64_t box_bytes() const {
    int64_t b = 1;
    for (int i = 0; i < rank; ++i) b *= box[i];
    return b;
  }
  // What cuTensorMapEncodeTiled accepts: 1..256 elements per box dimension, a
  // box within the tensor, 16-byte multiples for the inner box and the strides.
  constexpr bool valid() const {
    for (int i = 0; i < rank; ++i)
      if (box[i] < 1 || box[i] > 256 || box[i] > dims[i]) return false;
    for (int i = 0; i + 1 < rank; ++i)
      if (strides[i] % 16) return false;
    return rank >= 1 && box[0] % 16 == 0;
  }
};

// Prepared weights [E][N/16][K/64][512 bytes] as bytes {256, K/32, N/16, E}:
// a row group holds K x 8 contiguous bytes; the box {256, bk/32, bm/16, 1} at
// (0, kt bk/32, N tile's first row group, expert) is the stage's [bm/16][bk/64][512].
// Past K (a last partial stage) and past the expert's N (a last partial N tile)
// the copy writes zeros and reads nothing, so a GEMM reads its weights' bytes
// and no more.
constexpr TmaGeometry weight_tma_geometry(int64_t experts, int64_t n, int64_t k, const GemmTile& t) {
  TmaGeometry g;
  g.rank = 4;
  g.dims[0] = 256, g.dims[1] = k / 32, g.dims[2] = n / 16, g.dims[3] = experts;
  g.strides[0] = 256, g.strides[1] = k * 8, g.strides[2] = n / 16 * k * 8;
  g.box[0] = 256, g.box[1] = t.bk / 32, g.box[2] = t.bm / 16, g.box[3] = 1;
  return g;
}

// Prepared scales [E][N/16][ceil(K/128)][128 bytes] as bytes {ceil(K/128) 128,
// N/16, E}: the box {bk, bm/16, 1} at (kt bk, N tile's first row group, expert)
// is the stage's [bm/16][bk/128][128] (zeros past the last granule and past N).
constexpr TmaGeometry scale_tma_geometry(int64_t experts, int64_t n, int64_t k, const GemmTile& t) {
  TmaGeometry g;
  g.rank = 3;
  g.dims[0] = (k + 127) / 128 * 128, g.dims[1] = n / 16, g.dims[2] = experts;
  g.strides[0] = g.dims[0], g.strides[1] = n / 16 * g.dims[0];
  g.box[0] = t.bk, g.box[1] = t.bm / 16, g.box[2] = 1;
  return g;
}

}  // namespace fp4moe::plan
