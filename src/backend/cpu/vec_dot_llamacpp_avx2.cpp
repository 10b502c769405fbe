// Stage 12 (kernels): AVX2 forms of llama.cpp's repack float orders, of ggml's x86 Q5_0 and
// Q5_K orders and of its tiled Q5_K matmul (scalar references and the expressions: vec_dot.h,
// vec_dot_repack.cpp). Built with -mavx2 -mfma -mf16c; reached only under llamacpp numerics on an
// AVX2 CPU. The integer sums are exact in any order; the float operations are the references', so
// each kernel equals its reference bit for bit.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "backend/cpu/x86_simd.h"

namespace minfer::backend::cpu {
namespace {

using x86::h2f;
using x86::hsum_f32x8;
using x86::load256;

using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

inline int32_t hsum_i32x8(__m256i v) {  // exact: any order
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
// 16 packed bytes → 32 codes: low nibbles (elements 0..15), then high nibbles (16..31).
inline __m256i nibbles32(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}
// Σ of each 4 consecutive s8·s8 products: 8 int32 lanes (lane l: elements 4l..4l+3).
inline __m256i dot_ss8(__m256i a, __m256i b) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}
// Σ of each 4 consecutive u8·s8 products (u8 ≤ 15, so the int16 pairs cannot saturate).
inline __m256i dot_us8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// The Q4_K super-block's exact pieces per sub-block pair c (sub-blocks 2c, 2c + 1):
// sumi[c] = sc·Σq·y over both, summ[c] = m·Σy over both.
inline void q4_k_pair_sums(const BlockQ4_K& w, const BlockQ8_K& x, int32_t sumi[4],
                           int32_t summ[4]) {
  uint8_t sm[16];
  kquant_scales_mins(w.scales, sm);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load256(w.qs + 32 * c);
    const __m256i lo = dot_us8(_mm256_and_si256(q, m4), load256(x.qs + 64 * c));
    const __m256i hi =
        dot_us8(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), load256(x.qs + 64 * c + 32));
    sumi[c] = sm[2 * c] * hsum_i32x8(lo) + sm[2 * c + 1] * hsum_i32x8(hi);
    summ[c] = sm[8 + 2 * c] * (x.bsums[4 * c] + x.bsums[4 * c + 1]) +
              sm[8 + 2 * c + 1] * (x.bsums[4 * c + 2] + x.bsums[4 * c + 3]);
  }
}

// A Q5_K super-block's 8 exact integer lanes, ggml's x86 shape: lane l = Σ_j sc_j · Σ of
// elements 4l..4l+3 of sub-block j (5-bit codes, u8 · s8 pairs: no int16 saturation).
inline __m256i q5_k_lanes(const BlockQ5_K& w, const int8_t* y, const uint8_t sm[16]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i hbits = load256(w.qh);
  __m256i sumi = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
    const __m256i q = load256(w.qs + 32 * c);
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one), 4);
    const __m256i h1 =
        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one), 4);
    const __m256i q0 = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
    const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, load256(y + 64 * c)),
                                         _mm256_set1_epi16(sm[2 * c]));
    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, load256(y + 64 * c + 32)),
                                         _mm256_set1_epi16(sm[2 * c + 1]));
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
  }
  return sumi;
}

inline int32_t kquant_min_sum(const uint8_t sm[16], const BlockQ8_K& x) {  // exact
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += sm[8 + j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  return s;
}

}  // namespace

float dot_q4_0_q8_0_repack_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256i qw = _mm256_sub_epi8(nibbles32(w[ib].qs), _mm256_set1_epi8(8));
    const int32_t sumi = hsum_i32x8(dot_ss8(qw, load256(x[ib].qs)));
    acc = std::fma(static_cast<float>(sumi), h2f(w[ib].d) * h2f(x[ib].d), acc);
  }
  return acc;
}

float dot_q4_k_q8_k_repack_gemv_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f, accm = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t sumi[4], summ[4];
    q4_k_pair_sums(w[i], x[i], sumi, summ);
    acc = std::fma(static_cast<float>(sumi[0] + sumi[1] + sumi[2] + sumi[3]), h2f(w[i].d) * x[i].d,
                   acc);
    accm = std::fma(static_cast<float>(summ[0] + summ[1] + summ[2] + summ[3]),
                    h2f(w[i].dmin) * x[i].d, accm);
  }
  return acc - accm;
}

float dot_q4_k_q8_k_repack_gemm_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f, accm = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t sumi[4], summ[4];
    q4_k_pair_sums(w[i], x[i], sumi, summ);
    const float d = h2f(w[i].d) * x[i].d;
    const float dmin = h2f(w[i].dmin) * x[i].d;
    for (int c = 0; c < 4; ++c) {
      acc = std::fma(static_cast<float>(sumi[c]), d, acc);
      accm = std::fma(static_cast<float>(summ[c]), dmin, accm);
    }
  }
  return acc - accm;
}

float dot_q5_0_q8_0_ggml_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  // bit j of qh → byte j all ones (ggml's bytes_from_bits_32)
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  const __m256i bitmask = _mm256_set1_epi64x(static_cast<int64_t>(0x7fbfdfeff7fbfdfe));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    uint32_t qh;
    std::memcpy(&qh, w[ib].qh, 4);
    __m256i bits = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)), shuf);
    bits = _mm256_cmpeq_epi8(_mm256_or_si256(bits, bitmask), _mm256_set1_epi64x(-1));
    // code − 16: the nibble with 0xF0 where bit 4 is clear (two's complement)
    const __m256i qw = _mm256_or_si256(
        nibbles32(w[ib].qs), _mm256_andnot_si256(bits, _mm256_set1_epi8(static_cast<char>(0xF0))));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_ss8(qw, load256(x[ib].qs))), acc);
  }
  return hsum_f32x8(acc);
}

float dot_q5_k_q8_k_ggml_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sm[16];
    kquant_scales_mins(w[i].scales, sm);
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = -x[i].d * h2f(w[i].dmin);
    summs = std::fma(dmin, static_cast<float>(kquant_min_sum(sm, x[i])), summs);
    acc =
        _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q5_k_lanes(w[i], x[i].qs, sm)), acc);
  }
  return hsum_f32x8(acc) + summs;
}

float dot_q5_k_q8_k_tiled_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sm[16];
    kquant_scales_mins(w[i].scales, sm);
    const int32_t s1 = hsum_i32x8(q5_k_lanes(w[i], x[i].qs, sm));
    const float t = h2f(w[i].d) * static_cast<float>(s1);
    const float r = std::fma(-h2f(w[i].dmin), static_cast<float>(kquant_min_sum(sm, x[i])), t);
    acc = std::fma(r, x[i].d, acc);
  }
  return acc;
}

}  // namespace minfer::backend::cpu
