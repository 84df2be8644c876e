#include "format/prepare_gemm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/parallel.hpp"
#include "format/gemm_pack.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"

namespace fp4moe {
namespace {

uint8_t scale_byte_of(const Fp4Matrix& m, int64_t row, int64_t col) {
  return m.scales[static_cast<size_t>(row * m.scale_cols() + col / m.block_size())];
}

float scale_value_of(Fp4Format f, uint8_t b) { return f == Fp4Format::nvfp4 ? e4m3_decode(b) : ue8m0_decode(b); }


// The prepared UE5M3 byte of a non-zero block scale (gemm_pack.hpp), or -1
// when the value is outside its range.
int prepared_scale_of(Fp4Format f, float value) {
  int exp2 = 0;
  const float frac = std::frexp(value, &exp2);  // value = frac * 2^exp2, frac in [0.5, 1)
  const int e = exp2 - 1 + prepared_scale_bias(f);
  const float mant8 = (frac * 2.f - 1.f) * 8.f;  // exact: both scale formats have <= 3 mantissa bits
  if (e < 0 || e > 31 || mant8 != std::floor(mant8)) return -1;
  return (e << 3) | static_cast<int>(mant8);
}

// The bits of one checkpoint byte (codes of columns c and c + 1: halves 0 and
// 1) in a prepared word, for each of the word's four registers.
const std::array<std::array<uint32_t, 256>, 4> kPairWords = [] {
  std::array<std::array<uint32_t, 256>, 4> t{};
  for (int reg = 0; reg < 4; ++reg)
    for (int b = 0; b < 256; ++b)
      t[size_t(reg)][size_t(b)] =
          pack::place_code(pack::place_code(0, reg, 0, uint8_t(b & 15)), reg, 1, uint8_t(b >> 4));
  return t;
}();

void clear_code(uint8_t* w, int64_t k, int64_t row, int64_t col) {
  const pack::CodeSlot slot = pack::code_slot(k, row, col);
  uint32_t word;
  std::memcpy(&word, w + slot.byte, 4);
  const pack::CodeBits b = pack::kCodeBits[slot.reg][slot.half];
  word &= ~((1u << b.sign) | (1u << b.m2) | (1u << b.m1) | (1u << b.m0));
  std::memcpy(w + slot.byte, &word, 4);
}

}  // namespace

namespace {
std::vector<const Fp4Matrix*> pointers(std::span<const Fp4Matrix> v) {
  std::vector<const Fp4Matrix*> p;
  for (const Fp4Matrix& m : v) p.push_back(&m);
  return p;
}
}  // namespace

PreparedExpertWeights prepare_gemm_weights(std::span<const Fp4Matrix> experts, int64_t n, int64_t k) {
  return prepare_gemm_weights(pointers(experts), n, k);
}

PreparedExpertWeights prepare_gated_gemm_weights(std::span<const Fp4Matrix> gate, std::span<const Fp4Matrix> up,
                                                   int64_t rows, int64_t k) {
  return prepare_gated_gemm_weights(pointers(gate), pointers(up), rows, k);
}

Fp4Matrix pad_fp4_matrix(const Fp4Matrix& m, int64_t rows, int64_t cols) {
  FP4MOE_CHECK(rows >= m.rows && cols >= m.cols && cols % m.block_size() == 0,
               "pad_fp4_matrix: [" << m.rows << ", " << m.cols << "] cannot be padded to [" << rows << ", " << cols
                                   << "] (" << to_string(m.format) << " blocks of " << m.block_size() << ")");
  if (rows == m.rows && cols == m.cols) return m;
  Fp4Matrix p;
  p.format = m.format;
  p.rows = rows;
  p.cols = cols;
  p.weight_scale_2 = m.weight_scale_2;
  p.packed.assign(size_t(rows * (cols / 2)), 0);
  p.scales.assign(size_t(rows * p.scale_cols()), 0);
  for (int64_t r = 0; r < m.rows; ++r) {
    std::memcpy(p.packed.data() + r * (cols / 2), m.packed.data() + r * (m.cols / 2), size_t(m.cols / 2));
    std::memcpy(p.scales.data() + r * p.scale_cols(), m.scales.data() + r * m.scale_cols(), size_t(m.scale_cols()));
  }
  return p;
}

PreparedExpertWeights prepare_gemm_weights(std::span<const Fp4Matrix* const> experts, int64_t n, int64_t k) {
  FP4MOE_CHECK(!experts.empty(), "prepare_gemm_weights: no experts given");
  const Fp4Matrix& first = *experts[0];
  PreparedExpertWeights p;
  p.format = first.format;
  p.experts = static_cast<int64_t>(experts.size());
  p.n = n ? n : first.rows;
  p.k = k ? k : first.cols;
  FP4MOE_CHECK(p.n > 0 && p.n % 16 == 0, "prepare_gemm_weights: N = " << p.n << " is not a positive multiple of 16");
  FP4MOE_CHECK(p.k > 0 && p.k % kPreparedKGranule == 0,
               "prepare_gemm_weights: K = " << p.k << " is not a positive multiple of " << kPreparedKGranule
                                            << " (pad it: padded_features)");
  FP4MOE_CHECK(p.n >= first.rows && p.k >= first.cols, "prepare_gemm_weights: the prepared shape [" << p.n << ", " << p.k
                                                           << "] is smaller than the experts' [" << first.rows << ", "
                                                           << first.cols << "]");
  p.weights.assign(static_cast<size_t>(p.experts * p.weight_bytes_per_expert()), 0);
  p.scales.assign(static_cast<size_t>(p.experts * p.scale_bytes_per_expert()), 0);
  p.dequant_scale.resize(static_cast<size_t>(p.experts));

  for (int64_t e = 0; e < p.experts; ++e) {
    const Fp4Matrix& m = *experts[static_cast<size_t>(e)];
    FP4MOE_CHECK(m.format == p.format, "prepare_gemm_weights: expert " << e << " is " << to_string(m.format)
                                                                        << ", expert 0 is " << to_string(p.format));
    FP4MOE_CHECK(m.rows == first.rows && m.cols == first.cols, "prepare_gemm_weights: expert " << e << " is [" << m.rows
                                                   << ", " << m.cols << "], expert 0 is [" << first.rows << ", "
                                                   << first.cols << "]");
    FP4MOE_CHECK(m.packed.size() == size_t(m.rows * m.cols / 2) && m.scales.size() == size_t(m.rows * m.scale_cols()),
                 "prepare_gemm_weights: expert " << e << " has " << m.packed.size() << " weight bytes and "
                                                   << m.scales.size() << " scale bytes for [" << m.rows << ", " << m.cols << "]");
  }
  const std::array<int16_t, 256> prepared = prepared_scale_table(p.format);
  detail::parallel_for(p.experts, [&](int64_t e) {
    // (an expert narrower than the prepared shape is padded one at a time: a model's worth of copies is not held)
    Fp4Matrix padded;
    const Fp4Matrix* given = experts[static_cast<size_t>(e)];
    if (given->rows != p.n || given->cols != p.k) given = &(padded = pad_fp4_matrix(*given, p.n, p.k));
    const Fp4Matrix& m = *given;
    uint8_t* w = p.weights.data() + e * p.weight_bytes_per_expert();
    uint8_t* s = p.scales.data() + e * p.scale_bytes_per_expert();
    // One 32-bit word per (16-row group, k16 step, lane): the lane's 8 codes, the
    // two of each checkpoint byte (columns c, c + 1) placed by one table lookup.
    const int64_t row_bytes = p.k / 2;
    for (int64_t rg = 0; rg < p.n / 16; ++rg)
      for (int64_t kc = 0; kc < p.k / 64; ++kc)
        for (int lane = 0; lane < pack::kLanes; ++lane)
          for (int t = 0; t < 4; ++t) {
            const int64_t r = rg * 16 + lane / 4, c = kc * 64 + t * 16 + (lane % 4) * 2;
            const uint8_t* src = m.packed.data() + r * row_bytes + c / 2;
            // reg = (row + 8) + 2 (column + 8): bytes at rows r, r + 8 and columns c, c + 8
            const uint32_t word = kPairWords[0][src[0]] | kPairWords[1][src[8 * row_bytes]] | kPairWords[2][src[4]] |
                                  kPairWords[3][src[8 * row_bytes + 4]];
            std::memcpy(w + pack::word_offset(p.k, rg, kc, lane, t), &word, 4);
          }
    for (int64_t row = 0; row < p.n; ++row)
      for (int64_t col = 0; col < p.k; col += 16) {
        const uint8_t b = scale_byte_of(m, row, col);
        // every code +-0: the 8 bytes of the row's 16 codes, sign bits aside
        const uint8_t* codes = m.packed.data() + row * (p.k / 2) + col / 2;
        bool all_zero = true;
        for (int i = 0; i < 8; ++i) all_zero &= (codes[i] & 0x77) == 0;
        int pb = 0;
        if (prepared[b] == kPreparedScaleZero || all_zero) {
          // A zero scale or a block of zeros: store byte 0 and clear the codes (exact).
          for (int64_t c = col; c < col + 16; ++c) clear_code(w, p.k, row, c);
        } else {
          pb = prepared[b];
          FP4MOE_CHECK(pb >= 0, "prepare_gemm_weights: expert " << e << " row " << row << " column " << col
                                  << ": block scale " << scale_value_of(p.format, b) << " (byte 0x" << std::hex << int(b) << std::dec
                                  << ") is outside the decode kernel's range for " << to_string(p.format) << " [2^-"
                                  << prepared_scale_bias(p.format) << ", 2^" << 31 - prepared_scale_bias(p.format) << "]");
        }
        s[pack::scale_offset(p.k, row, col)] = static_cast<uint8_t>(pb);
      }
    p.dequant_scale[static_cast<size_t>(e)] = pack::kAccumulatorFactor * m.weight_scale_2;  // exact: a power of two
  });
  return p;
}

Fp4Matrix stack_rows(std::span<const Fp4Matrix* const> parts, int64_t interleave) {
  FP4MOE_CHECK(!parts.empty(), "stack_rows: no matrices given");
  const Fp4Matrix& a = *parts[0];
  Fp4Matrix out;
  out.format = a.format;
  out.cols = a.cols;
  out.weight_scale_2 = a.weight_scale_2;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Fp4Matrix& m = *parts[i];
    FP4MOE_CHECK(m.format == a.format && m.cols == a.cols && m.rows == a.rows,
                 "stack_rows: part " << i << " is " << to_string(m.format) << " [" << m.rows << ", " << m.cols
                                     << "], part 0 is " << to_string(a.format) << " [" << a.rows << ", " << a.cols << "]");
    out.rows += m.rows;
  }
  const int64_t block = interleave > 0 ? interleave : a.rows;
  FP4MOE_CHECK(a.rows % block == 0, "stack_rows: interleave " << interleave << " does not divide " << a.rows << " rows");
  const int64_t row_bytes = a.cols / 2, srow_bytes = a.scale_cols();
  out.packed.reserve(static_cast<size_t>(out.rows * row_bytes));
  out.scales.reserve(static_cast<size_t>(out.rows * srow_bytes));
  for (int64_t r0 = 0; r0 < a.rows; r0 += block)
    for (const Fp4Matrix* m : parts) {
      out.packed.insert(out.packed.end(), m->packed.begin() + r0 * row_bytes, m->packed.begin() + (r0 + block) * row_bytes);
      out.scales.insert(out.scales.end(), m->scales.begin() + r0 * srow_bytes, m->scales.begin() + (r0 + block) * srow_bytes);
    }
  return out;
}

PreparedExpertWeights prepare_gated_gemm_weights(std::span<const Fp4Matrix* const> gate,
                                                   std::span<const Fp4Matrix* const> up, int64_t rows, int64_t k) {
  FP4MOE_CHECK(gate.size() == up.size() && !gate.empty(),
               "prepare_gated_gemm_weights: " << gate.size() << " gate and " << up.size() << " up matrices");
  for (size_t e = 0; e < gate.size(); ++e)
    FP4MOE_CHECK((rows ? rows : gate[e]->rows) % 16 == 0, "prepare_gated_gemm_weights: expert " << e << " has I = "
                                                             << (rows ? rows : gate[e]->rows) << " rows, not a multiple of 16");
  std::vector<Fp4Matrix> stacked(gate.size());
  detail::parallel_for(static_cast<int64_t>(gate.size()), [&](int64_t e) {
    const Fp4Matrix* g = gate[size_t(e)];
    const Fp4Matrix* u = up[size_t(e)];
    Fp4Matrix gp, upad;
    if ((rows && rows != g->rows) || (k && k != g->cols)) {
      gp = pad_fp4_matrix(*g, rows ? rows : g->rows, k ? k : g->cols);
      upad = pad_fp4_matrix(*u, rows ? rows : u->rows, k ? k : u->cols);
      g = &gp, u = &upad;
    }
    const Fp4Matrix* parts[] = {g, u};
    stacked[size_t(e)] = stack_rows(parts, pack::kGateUpInterleaveRows);
  });
  PreparedExpertWeights p = prepare_gemm_weights(std::span<const Fp4Matrix>(stacked));
  p.scale_parts = 2;
  p.dequant_scale.resize(2 * gate.size());
  for (size_t e = 0; e < gate.size(); ++e) {
    p.dequant_scale[2 * e] = pack::kAccumulatorFactor * gate[e]->weight_scale_2;
    p.dequant_scale[2 * e + 1] = pack::kAccumulatorFactor * up[e]->weight_scale_2;
  }
  return p;
}

std::vector<float> prepared_bias(std::span<const std::vector<float>* const> bias, int64_t n) {
  std::vector<float> out(bias.size() * size_t(n), 0.f);
  for (size_t e = 0; e < bias.size(); ++e) {
    FP4MOE_CHECK(int64_t(bias[e]->size()) <= n, "prepared_bias: expert " << e << " has " << bias[e]->size()
                                                                         << " biases for N = " << n << " rows");
    std::copy(bias[e]->begin(), bias[e]->end(), out.begin() + int64_t(e) * n);
  }
  return out;
}

std::vector<float> prepared_gated_bias(std::span<const std::vector<float>* const> gate_bias,
                                       std::span<const std::vector<float>* const> up_bias, int64_t n) {
  FP4MOE_CHECK(gate_bias.size() == up_bias.size() && n % (2 * pack::kGateUpInterleaveRows) == 0,
               "prepared_gated_bias: " << gate_bias.size() << " gate and " << up_bias.size() << " up biases for N = " << n);
  constexpr int64_t kG = pack::kGateUpInterleaveRows;
  std::vector<float> out(gate_bias.size() * size_t(n), 0.f);
  for (size_t e = 0; e < gate_bias.size(); ++e) {
    FP4MOE_CHECK(int64_t(gate_bias[e]->size()) <= n / 2 && gate_bias[e]->size() == up_bias[e]->size(),
                 "prepared_gated_bias: expert " << e << " has " << gate_bias[e]->size() << " gate and "
                                                << up_bias[e]->size() << " up biases for N = " << n << " rows");
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<float>& b = (r / kG) % 2 ? *up_bias[e] : *gate_bias[e];
      const int64_t src = (r / (2 * kG)) * kG + r % kG;
      if (src < int64_t(b.size())) out[e * size_t(n) + size_t(r)] = b[size_t(src)];
    }
  }
  return out;
}

uint8_t prepared_code(const PreparedExpertWeights& p, int64_t e, int64_t row, int64_t col) {
  const pack::CodeSlot slot = pack::code_slot(p.k, row, col);
  uint32_t word;
  std::memcpy(&word, p.weights.data() + e * p.weight_bytes_per_expert() + slot.byte, 4);
  const pack::CodeBits b = pack::kCodeBits[slot.reg][slot.half];
  return static_cast<uint8_t>(((word >> b.sign) & 1) << 3 | ((word >> b.m2) & 1) << 2 | ((word >> b.m1) & 1) << 1 |
                              ((word >> b.m0) & 1));
}

float prepared_scale_value(const PreparedExpertWeights& p, int64_t e, int64_t row, int64_t col) {
  const uint8_t b = p.scales[static_cast<size_t>(e * p.scale_bytes_per_expert() + pack::scale_offset(p.k, row, col))];
  return std::ldexp(1.f + float(b & 7) / 8.f, (b >> 3) - prepared_scale_bias(p.format));
}

std::array<int16_t, 256> prepared_scale_table(Fp4Format f) {
  std::array<int16_t, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const float v = scale_value_of(f, uint8_t(b));
    t[size_t(b)] = int16_t(v == 0.f ? kPreparedScaleZero : std::max(int(kPreparedScaleOutOfRange), prepared_scale_of(f, v)));
  }
  return t;
}

uint32_t prepared_scale_exponent_add(Fp4Format f) { return pack::scale_exponent_add(prepared_scale_bias(f)); }

}  // namespace fp4moe
