#include "format/prepare_fp8.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "format/fp8_fragment.hpp"
#include "format/gemm_pack.hpp"
#include "format/prepare_gemm.hpp"
#include "format/prepared_layout.hpp"
#include "fp4moe/error.hpp"
#include "reference/detail.hpp"

namespace fp4moe {

void check_fp8_format(Fp4Format format, bool round_nvfp4) {
  FP4MOE_CHECK(format == Fp4Format::mxfp4 || round_nvfp4,
               "FP8 activations: the weights are " << to_string(format)
                                                   << "; their e4m3 block scales carry a mantissa, so folded into e4m3 "
                                                      "the weights round (docs/fp8.md, \"NVFP4\"): opt in with "
                                                      "LayerOptions::fp8_rounds_nvfp4 (--fp8-rounds-nvfp4), or run "
                                                      "MXFP4 weights");
}

void check_fp8_fold(const std::vector<int64_t>& below, const std::vector<int64_t>& first_row, Fp4Format format) {
  const bool rounded = format == Fp4Format::nvfp4;
  for (size_t e = 0; e < below.size(); ++e)
    FP4MOE_CHECK(below[e] == 0,
                 "FP8 activations: expert " << e << " has " << below[e] << " nonzero " << to_string(format)
                                            << " blocks (the first in row " << first_row[e] << ") more than 2^"
                                            << fp8::max_shift(rounded) - fp8::kFp8TableMinShift
                                            << " below their row's largest block; they would not fold into e4m3"
                                            << (rounded ? "" : " exactly") << ": run these weights with bf16 activations");
}

PreparedFp8Weights prepare_fp8_gemm_weights(const PreparedExpertWeights& p, bool round_nvfp4) {
  check_fp8_format(p.format, round_nvfp4);
  const bool rounded = p.format == Fp4Format::nvfp4;
  const int bias = prepared_scale_bias(p.format);
  const int64_t block_steps = (p.format == Fp4Format::nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize) / 16;
  FP4MOE_CHECK(p.k % kPreparedKGranule == 0 && p.n % 16 == 0,
               "FP8 prepare: [" << p.n << ", " << p.k << "] is not prepared (N a multiple of 16, K of " << kPreparedKGranule << ")");
  PreparedFp8Weights out;
  out.experts = p.experts, out.n = p.n, out.k = p.k;
  out.weights.assign(p.weights.size(), 0);
  out.scales.assign(p.scales.size(), 0);
  out.row_scale.assign(size_t(p.experts * p.n), 0.f);
  std::vector<int64_t> below(size_t(p.experts), 0), first_row(size_t(p.experts), -1);
  std::vector<int> span(size_t(p.experts), 0);
  // One 16-row group at a time: its codes decoded from the FP4 layout's words,
  // each row's exponents and fold codes, then the FP8 layout's words.
  detail::parallel_for(p.experts, [&](int64_t e) {
    const uint8_t* w = p.weights.data() + e * p.weight_bytes_per_expert();
    const uint8_t* sc = p.scales.data() + e * p.scale_bytes_per_expert();
    uint8_t* osc = out.scales.data() + e * p.scale_bytes_per_expert();
    uint8_t* ow = out.weights.data() + e * p.weight_bytes_per_expert();
    const int64_t K = p.k;
    std::vector<uint8_t> codes(size_t(16 * K));  // [16 rows][K]
    std::vector<int> exps(size_t(K / 16));
    for (int64_t rg = 0; rg < p.n / 16; ++rg) {
      for (int64_t kc = 0; kc < K / 64; ++kc)
        for (int lane = 0; lane < pack::kLanes; ++lane)
          for (int t = 0; t < 4; ++t) {
            uint32_t word;
            std::memcpy(&word, w + pack::word_offset(K, rg, kc, lane, t), 4);
            for (int reg = 0; reg < 4; ++reg)
              for (int half = 0; half < 2; ++half) {  // gemm_pack.hpp: reg 1, 3 rows + 8; reg 2, 3 columns + 8
                const pack::CodeBits b = pack::kCodeBits[reg][half];
                const int r = lane / 4 + 8 * (reg % 2);
                const int64_t col = kc * 64 + 16 * t + 2 * (lane % 4) + half + 8 * (reg / 2);
                codes[size_t(r * K + col)] = uint8_t(((word >> b.sign) & 1u) << 3 | ((word >> b.m2) & 1u) << 2 |
                                                     ((word >> b.m1) & 1u) << 1 | ((word >> b.m0) & 1u));
              }
          }
      for (int r = 0; r < 16; ++r) {
        const int64_t row = rg * 16 + r;
        const uint8_t* rc = codes.data() + r * K;
        // each 16-wide step's exponent (INT_MIN: every code zero)
        int hi = INT_MIN, lo = INT_MAX;
        for (int64_t s = 0; s < K / 16; ++s) {
          bool zero = true;
          for (int i = 0; i < 16; ++i) zero &= (rc[s * 16 + i] & 7u) == 0;
          exps[size_t(s)] = zero ? INT_MIN : fp8::block_exponent(sc[pack::scale_offset(K, row, s * 16)], bias);
          if (!zero) hi = std::max(hi, exps[size_t(s)]), lo = std::min(lo, exps[size_t(s)]);
        }
        const int row_exp = fp8::row_exponent(hi, hi != INT_MIN, rounded);
        if (hi != INT_MIN) span[size_t(e)] = std::max(span[size_t(e)], hi - lo);
        for (int64_t s = 0; s < K / 16; ++s) {
          int u = 0;
          if (exps[size_t(s)] != INT_MIN) {
            u = fp8::fold_code(exps[size_t(s)], row_exp);
            if (u < 0) {
              // counted once per block (MXFP4's spans two steps), at its first nonzero step
              const bool first = s % block_steps == 0 || exps[size_t(s - 1)] == INT_MIN;
              if (first && !below[size_t(e)]++) first_row[size_t(e)] = row;
              u = 0;
            }
            // (NVFP4: the scale's mantissa picks the rounded table)
            u |= int(fp8::block_mantissa(sc[pack::scale_offset(K, row, s * 16)])) << 4;
          }
          osc[pack::scale_offset(K, row, s * 16)] = uint8_t(u);
        }
        const float global = p.dequant_scale[size_t(e * p.scale_parts + (row / 16) % p.scale_parts)] / pack::kAccumulatorFactor;
        out.row_scale[size_t(e * p.n + row)] = std::ldexp(global, row_exp);
      }
      // the FP8 words: lane l, k32 step j, row half h hold row l/4 + 8h's codes at k 32j + 4c.. and 32j + 16 + 4c..
      for (int64_t kc = 0; kc < K / 64; ++kc)
        for (int lane = 0; lane < pack::kLanes; ++lane)
          for (int j = 0; j < 2; ++j)
            for (int h = 0; h < 2; ++h) {
              const uint8_t* rc = codes.data() + (lane / 4 + 8 * h) * K + kc * 64 + 32 * j + 4 * (lane % 4);
              uint32_t word = 0;
              for (int i = 0; i < 4; ++i) word = fp8::place_code(fp8::place_code(word, i, rc[i]), 4 + i, rc[16 + i]);
              std::memcpy(ow + ((rg * (K / 64) + kc) * pack::kLanes + lane) * 16 + 4 * (2 * j + h), &word, 4);
            }
    }
  });
  check_fp8_fold(below, first_row, p.format);
  for (int64_t e = 0; e < p.experts; ++e) out.max_row_span = std::max(out.max_row_span, span[size_t(e)]);
  return out;
}

double fp8_folded_weight(uint8_t code, float block_scale) {
  FP4MOE_CHECK(std::isfinite(block_scale) && block_scale >= 0.f,
               "fp8_folded_weight: block scale " << block_scale << " is not a finite non-negative value");
  if (block_scale == 0.f) return 0.0;
  int exp2 = 0;
  const double frac = std::frexp(double(block_scale), &exp2);  // scale = 2 frac x 2^(exp2 - 1), 2 frac in [1, 2)
  const double m8 = (2 * frac - 1) * 8;
  FP4MOE_CHECK(m8 == std::floor(m8), "fp8_folded_weight: block scale " << block_scale << " has more than 3 mantissa bits");
  uint32_t lo, hi;
  fp8::rounded_fold_table(uint32_t(-fp8::kFp8TableMinShift) | uint32_t(m8) << 4, lo, hi);  // shift 0
  const uint32_t mag = code & 7u;
  const uint8_t byte = uint8_t((mag < 4 ? lo >> (8 * mag) : hi >> (8 * (mag - 4))) & 0xFFu);
  const double v = std::ldexp(double(e4m3_decode(byte)), exp2 - 1);
  return (code & 8u) ? -v : v;
}

uint8_t prepared_fp8_code(const PreparedFp8Weights& p, int64_t e, int64_t row, int64_t col) {
  const fp8::Fp8CodeSlot slot = fp8::fp8_code_slot(p.k, row, col);
  uint32_t word;
  std::memcpy(&word, p.weights.data() + e * (p.n * p.k / 2) + slot.byte, 4);
  const uint8_t u = p.scales[size_t(e * pack::scale_bytes(p.n, p.k) + pack::scale_offset(p.k, row, col))];
  uint32_t lo, hi;
  fp8::rounded_fold_table(u, lo, hi);
  const uint32_t reg = slot.index < 4 ? fp8::low_register(word, lo, hi) : fp8::high_register(word, lo, hi);
  return uint8_t(reg >> (8 * (slot.index % 4)));
}

}  // namespace fp4moe
