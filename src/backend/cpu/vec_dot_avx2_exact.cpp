// Stage 12 (kernels): AVX2 twins that keep the scalar reference's arithmetic exactly:
// Q2_K, Q3_K, Q4_K and Q5_K · Q8_K (vec_dot_kquants.cpp) and Q5_0 / Q5_1 (vec_dot_scalar.cpp).
// Per block or super-block the same exact integers — here 32 codes at a time through
// vpmaddubsw (u8 codes × s8 activations, pairs in int16: at most 2·31·127) and vpmaddwd
// against the sub-block scales (int32, exact) — then the scalar's float expression, block
// after block, so they are bitwise equal to it. This file alone is compiled with -mavx2
// (with AVX2 kernels in vec_dot_avx2.cpp); reached only after cpuid.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

inline float h2f(quant::Half h) {
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline int32_t hsum_i32x8(__m256i v) {  // exact: any order
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Σ over 32 elements of scale(e) · code(e) · y(e) into 8 int32 lanes: codes u8 (≤ 31),
// y s8, scales one int16 per element pair (the pair's sub-block scale).
inline __m256i scaled_dot32(__m256i codes, const int8_t* y, __m256i scales16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load256(y)), scales16);
}

// Scales of two 16-element sub-blocks a (elements 0-15) and b (16-31) as int16 pairs.
inline __m256i scales_16_16(int16_t a, int16_t b) {
  return _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
}

// A Q5 block's 32 codes (0..31) in element order: nibbles plus bit j of qh as bit 4.
inline __m256i q5_codes(const uint8_t* qs, const uint8_t* qh) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i nib =
      _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // byte j: qh byte j / 8 (each 128-bit lane holds all four), tested for bit j % 8
  const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                       2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i b =
      _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(h)), sel), bit);
  return _mm256_or_si256(nib, _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10)));
}

// Σ of 32 u8 codes · s8 activations, exact.
inline int32_t isum32(__m256i codes, const int8_t* y) {
  return hsum_i32x8(
      _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load256(y)), _mm256_set1_epi16(1)));
}

// A Q4_K / Q5_K super-block's 8 sub-block scales and Σ_j m_j·(bsums[2j] + bsums[2j+1]).
inline int32_t scales_and_summ(const uint8_t* packed, const int16_t* bsums, int16_t sc[8]) {
  alignas(16) uint8_t sm[16];
  kquant_scales_mins(packed, sm);
  const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(sm));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(sc), _mm_cvtepu8_epi16(v));         // sc[0..7]
  const __m256i pairs = _mm256_madd_epi16(load256(bsums), _mm256_set1_epi16(1));  // 8 int32
  const __m256i mins = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
  return hsum_i32x8(_mm256_mullo_epi32(pairs, mins));
}

}  // namespace

float dot_q5_0_q8_0_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sx = 0;  // the codes are dotted as q (0..31), the values are q − 16
    for (int j = 0; j < kQK; ++j) sx += x[ib].qs[j];
    const int32_t sumi = isum32(q5_codes(w[ib].qs, w[ib].qh), x[ib].qs) - 16 * sx;
    sumf += (h2f(w[ib].d) * h2f(x[ib].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float dot_q5_1_q8_1_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const int32_t sumi = isum32(q5_codes(w[ib].qs, w[ib].qh), x[ib].qs);
    sumf += (h2f(w[ib].d) * h2f(x[ib].d)) * static_cast<float>(sumi) + h2f(w[ib].m) * h2f(x[ib].s);
  }
  return sumf;
}

float dot_q2_k_q8_k_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ2_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const __m256i m3 = _mm256_set1_epi8(3);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t summ = 0;
    int16_t sc[16];
    for (int j = 0; j < 16; ++j) {
      sc[j] = static_cast<int16_t>(w[i].scales[j] & 0xF);
      summ += (w[i].scales[j] >> 4) * x[i].bsums[j];
    }
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(w[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s) {  // elements 128h + 32s + l: bits 2s of qs[32h + l]
        const int k = 4 * h + s;
        const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
        acc = _mm256_add_epi32(
            acc, scaled_dot32(codes, x[i].qs + 32 * k, scales_16_16(sc[2 * k], sc[2 * k + 1])));
      }
    }
    const int32_t sumi = hsum_i32x8(acc);
    const float dall = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += dall * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q3_k_q8_k_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ3_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m1 = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int16_t sc[16];
    int32_t corr = 0;  // Σ sc · Σ y: the codes are dotted as q (0..7), the values are q − 4
    for (int j = 0; j < 16; ++j) {
      const int low4 = j < 8 ? (w[i].scales[j] & 0xF) : (w[i].scales[j - 8] >> 4);
      const int high2 = (w[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      sc[j] = static_cast<int16_t>((low4 | (high2 << 4)) - 32);
      corr += sc[j] * x[i].bsums[j];
    }
    const __m256i hm = load256(w[i].hmask);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(w[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s) {  // element e = 32k + l: bit k of hmask[l] is its bit 2
        const int k = 4 * h + s;
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, k), m1);
        const __m256i codes = _mm256_or_si256(low, _mm256_slli_epi16(hi, 2));
        acc = _mm256_add_epi32(
            acc, scaled_dot32(codes, x[i].qs + 32 * k, scales_16_16(sc[2 * k], sc[2 * k + 1])));
      }
    }
    const int32_t sumi = hsum_i32x8(acc) - 4 * corr;
    sumf += (x[i].d * h2f(w[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float dot_q4_k_q8_k_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int16_t sc[8];
    const int32_t summ = scales_and_summ(w[i].scales, x[i].bsums, sc);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {  // element 64c + 32h + l: nibble h of qs[32c + l]
      const __m256i q = load256(w[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      acc = _mm256_add_epi32(acc, scaled_dot32(lo, x[i].qs + 64 * c, _mm256_set1_epi16(sc[2 * c])));
      acc = _mm256_add_epi32(
          acc, scaled_dot32(hi, x[i].qs + 64 * c + 32, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const int32_t sumi = hsum_i32x8(acc);
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q5_k_q8_k_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m1 = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int16_t sc[8];
    const int32_t summ = scales_and_summ(w[i].scales, x[i].bsums, sc);
    const __m256i qh = load256(w[i].qh);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(w[i].qs + 32 * c);
      for (int h = 0; h < 2; ++h) {  // element 64c + 32h + l: bit 2c + h of qh[l] is its bit 4
        const int k = 2 * c + h;
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 4 * h), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, k), m1);
        const __m256i codes = _mm256_or_si256(low, _mm256_slli_epi16(hi, 4));
        acc =
            _mm256_add_epi32(acc, scaled_dot32(codes, x[i].qs + 32 * k, _mm256_set1_epi16(sc[k])));
      }
    }
    const int32_t sumi = hsum_i32x8(acc);
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

}  // namespace minfer::backend::cpu
