// Stage 12 (kernels): AVX2 + FMA + F16C dot products (this file alone is compiled with
// -mavx2 -mfma -mf16c; callers reach it only after cpuid said yes, once, at startup).
// Invariants, per kernel, against the scalar twin (tests/backend/vec_dot_test.cpp):
//  - Q4_K, Q6_K: the same exact integer super-block sums and the same float expression
//    → bitwise equal.
//  - F16, F32 dots: 8 lanes, mul then add (no FMA), the scalar twin's tree → bitwise.
//  - Q4_0, Q4_1, Q8_0: 8 float lanes with FMA per block (ggml-cpu's x86 shape) instead
//    of one scalar sum per block → equal within a named tolerance (float reassociation).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "core/fp16.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

inline float h2f(quant::Half h) {
  return _cvtsh_ss(h);  // F16C: exact, equal to core/fp16.h's software conversion
}

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): the tree the scalar lanes8 twin uses.
inline float hsum_f32x8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32x8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 16 packed bytes → 32 bytes: low nibbles in the low lane, high nibbles in the high.
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// Σ pairs of u8·s8 → 8 int32 → float.
inline __m256 dot_us8_f32(__m256i u, __m256i s) {
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// Σ pairs of s8·s8 (sign moved onto the second operand, as maddubs needs u8 first).
inline __m256 dot_ss8_f32(__m256i a, __m256i b) {
  return dot_us8_f32(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

float avx2_dot_q4_0_q8_0(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    const __m256i qw = _mm256_sub_epi8(unpack_nibbles(w[ib].qs), _mm256_set1_epi8(8));
    acc = _mm256_fmadd_ps(d, dot_ss8_f32(qw, load256(x[ib].qs)), acc);
  }
  return hsum_f32x8(acc);
}

float avx2_dot_q4_1_q8_1(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    summs += h2f(w[ib].m) * h2f(x[ib].s);
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    acc = _mm256_fmadd_ps(d, dot_us8_f32(unpack_nibbles(w[ib].qs), load256(x[ib].qs)), acc);
  }
  return hsum_f32x8(acc) + summs;
}

float avx2_dot_q8_0_q8_0(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    acc = _mm256_fmadd_ps(d, dot_ss8_f32(load256(w[ib].qs), load256(x[ib].qs)), acc);
  }
  return hsum_f32x8(acc);
}

float avx2_dot_q4_k_q8_k(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t summ = 0;
    uint8_t sc[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t m;
      kquant_scale_min(j, w[i].scales, &sc[j], &m);
      summ += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = load256(w[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q4, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i plo = _mm256_maddubs_epi16(lo, load256(x[i].qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, load256(x[i].qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += d * static_cast<float>(hsum_i32x8(sumi)) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float avx2_dot_q6_k_q8_k(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  const __m256i k32 = _mm256_set1_epi8(32);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[i].ql + 64 * h);
      const __m256i ql1 = load256(w[i].ql + 64 * h + 32);
      const __m256i qh = load256(w[i].qh + 32 * h);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
      for (int k = 0; k < 4; ++k) {
        const __m256i y = load256(x[i].qs + 128 * h + 32 * k);
        // codes are 0..63 (u8 for maddubs); the −32 offset is subtracted as 32·y
        const __m256i p =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], y), _mm256_maddubs_epi16(k32, y));
        const int s = 8 * h + 2 * k;
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(w[i].scales[s + 1]), _mm_set1_epi16(w[i].scales[s]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale));
      }
    }
    sumf += (x[i].d * h2f(w[i].d)) * static_cast<float>(hsum_i32x8(sumi));
  }
  return sumf;
}

float avx2_dot_f16_f16(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const uint16_t*>(vw);
  const auto* x = static_cast<const uint16_t*>(vx);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(a, b));
  }
  float s = hsum_f32x8(acc);
  for (; i < n; ++i) s += fp16_to_fp32(w[i]) * fp16_to_fp32(x[i]);
  return s;
}

float avx2_dot_f32_f32(int64_t n, const void* vw, const void* vx) {
  return dot_f32_avx2(n, static_cast<const float*>(vw), static_cast<const float*>(vx));
}

}  // namespace

float dot_f32_avx2(int64_t n, const float* a, const float* b) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  float s = hsum_f32x8(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32_avx2(int64_t n, float a, const float* x, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(
        y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  }
  for (; i < n; ++i) y[i] = y[i] + a * x[i];
}

DotKernel avx2_dot_kernel(DType t) {
  switch (t) {
    case DType::kF32:
      return {DType::kF32, from_f32_f32, avx2_dot_f32_f32};
    case DType::kF16:
      return {DType::kF16, from_f32_f16, avx2_dot_f16_f16};
    case DType::kQ4_0:
      return {DType::kQ8_0, from_f32_q8_0, avx2_dot_q4_0_q8_0};
    case DType::kQ4_1:
      return {DType::kQ8_1, from_f32_q8_1, avx2_dot_q4_1_q8_1};
    case DType::kQ8_0:
      return {DType::kQ8_0, from_f32_q8_0, avx2_dot_q8_0_q8_0};
    case DType::kQ4_K:
      return {DType::kQ8_K, from_f32_q8_k, avx2_dot_q4_k_q8_k};
    case DType::kQ6_K:
      return {DType::kQ8_K, from_f32_q8_k, avx2_dot_q6_k_q8_k};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
