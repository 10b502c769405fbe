// Stage 12 (kernels): the AVX2 Q6_K kernels (compiled with -mavx2 -mfma -mf16c; reached
// only after cpuid). Invariant, against the scalar twin (tests/backend/mul_mat_test.cpp):
// the same 8 exact integer lanes per super-block (q6_k_lanes) and the same per-lane fma
// and final tree, so the dot, the batch GEMM and llama.cpp's tiled order each equal
// their scalar form bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/x86_simd.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using x86::h2f;
using x86::hsum_f32x8;
using x86::load256;

using quant::BlockQ6_K;
using quant::BlockQ8_K;
using quant::kQKK;

// Q6_K: codes 0..63 · y scaled per 16-element sub-block, minus the −32 offset taken per
// lane from the activation's bsums: 32 · (bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1]).
// bsums: the 16 int16 bsums; sc16: the 16 sub-block scales as int16.
inline __m256i q6_k_lanes(const quant::BlockQ6_K& b, const int8_t* y, __m256i bsums, __m256i sc16) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  __m256i sumi = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(b.ql + 64 * h);
    const __m256i ql1 = load256(b.ql + 64 * h + 32);
    const __m256i qh = load256(b.qh + 32 * h);
    __m256i q[4];
    q[0] =
        _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
    for (int k = 0; k < 4; ++k) {
      const __m256i p = _mm256_maddubs_epi16(q[k], load256(y + 128 * h + 32 * k));
      const int s = 8 * h + 2 * k;
      const __m256i scale =
          _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale));
    }
  }
  return _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
}

}  // namespace

// Q6_K follows the lane structure of ggml's x86 kernel, on every ISA (the scalar and
// AVX-512 kernels are bitwise twins): the 8 integer lanes of a super-block scaled into 8
// f32 lanes by an fma per super-block, reduced once at the end, the −32 offset
// subtracted per lane from the bsums; it is bit-identical with llama.cpp's Q6_K rows
// (its output layers). Q4_K: vec_dot_avx2_kquants.cpp.
float dot_q6_k_q8_k_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
    const __m256i sumi = q6_k_lanes(w[i], x[i].qs, load256(x[i].bsums), sc16);
    const float d = x[i].d * h2f(w[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_f32x8(acc);
}

// The Q6_K batch GEMM (DotKernel::gemm; batches only, gemv_rows_max 0): one weight row
// against up to 8 activation rows per pass. Per super-block the row's 8 code vectors and
// sub-block scale pairs (q6_k_lanes' terms) are decoded once and dotted against each
// activation row; each output then takes its dot's fma into its own 8 f32 lanes, reduced
// once at the end by the same hsum, so it equals dot_q6_k_q8_k_avx2 bit for bit.
void gemm_q6_k_q8_k_avx2(const GemmArgs& a) {
  constexpr int kC = 8;
  const int64_t nb = a.k / kQKK;
  const auto* wbase = static_cast<const uint8_t*>(a.w);
  const auto* xbase = static_cast<const uint8_t*>(a.x);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  for (int64_t c0 = 0; c0 < a.n_x; c0 += kC) {
    const int nc = static_cast<int>(std::min<int64_t>(kC, a.n_x - c0));
    const BlockQ8_K* x[kC];
    for (int c = 0; c < kC; ++c) {
      x[c] = reinterpret_cast<const BlockQ8_K*>(xbase + (c0 + std::min(c, nc - 1)) * a.x_stride);
    }
    for (int64_t r = 0; r < a.n_w; ++r) {
      const auto* w = reinterpret_cast<const BlockQ6_K*>(wbase + r * a.w_stride);
      __m256 acc[kC];
      for (int c = 0; c < kC; ++c) acc[c] = _mm256_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const BlockQ6_K& b = w[i];
        __m256i q[8];
        __m256i sc[8];
        for (int h = 0; h < 2; ++h) {
          const __m256i ql0 = load256(b.ql + 64 * h);
          const __m256i ql1 = load256(b.ql + 64 * h + 32);
          const __m256i qh = load256(b.qh + 32 * h);
          q[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                     _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
          q[4 * h + 1] =
              _mm256_or_si256(_mm256_and_si256(ql1, m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
          q[4 * h + 2] =
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
          q[4 * h + 3] =
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
          for (int k = 0; k < 4; ++k) {
            const int s = 8 * h + 2 * k;
            sc[4 * h + k] =
                _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
          }
        }
        const __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
        const float wd = h2f(b.d);
        for (int c = 0; c < kC; ++c) {
          const BlockQ8_K& xb = x[c][i];
          __m256i sumi = _mm256_setzero_si256();
          for (int j = 0; j < 8; ++j) {
            sumi = _mm256_add_epi32(
                sumi,
                _mm256_madd_epi16(_mm256_maddubs_epi16(q[j], load256(xb.qs + 32 * j)), sc[j]));
          }
          sumi = _mm256_sub_epi32(sumi,
                                  _mm256_slli_epi32(_mm256_madd_epi16(load256(xb.bsums), sc16), 5));
          acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * wd), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
      }
      for (int c = 0; c < nc; ++c) a.y[(c0 + c) * a.y_stride + r] = hsum_f32x8(acc[c]);
    }
  }
}

// llama.cpp's tiled K-quant matmul order for Q6_K (vec_dot.h): the same exact integers as
// above, summed per super-block, acc = fma(float(Σ) · d_w, d_x, acc).
float dot_q6_k_q8_k_tiled_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
    const __m256i lanes = q6_k_lanes(w[i], x[i].qs, load256(x[i].bsums), sc16);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    acc = std::fma(static_cast<float>(_mm_cvtsi128_si32(s)) * h2f(w[i].d), x[i].d, acc);
  }
  return acc;
}

}  // namespace minfer::backend::cpu
