// Stage 12 (kernels): the integer lanes of ggml's x86 Q6_K dot, one definition
// for the AVX2 and the AVX-512 kernels (both translation units are built with -mavx2
// -mfma -mf16c; no other file includes this header). Lane l sums bytes 4l..4l+3 of every
// 32-byte chunk of a super-block; the kernels scale the 8 lanes into f32 lanes.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "quant/blocks.h"

namespace minfer::backend::cpu::x86 {

inline __m256i load256_u(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Q6_K: codes 0..63 · y scaled per 16-element sub-block, minus the −32 offset taken per
// lane from the activation's bsums: 32 · (bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1]).
// bsums: the 16 int16 bsums; sc16: the 16 sub-block scales as int16.
inline __m256i q6_k_lanes(const quant::BlockQ6_K& b, const int8_t* y, __m256i bsums, __m256i sc16) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  __m256i sumi = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256_u(b.ql + 64 * h);
    const __m256i ql1 = load256_u(b.ql + 64 * h + 32);
    const __m256i qh = load256_u(b.qh + 32 * h);
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
      const __m256i p = _mm256_maddubs_epi16(q[k], load256_u(y + 128 * h + 32 * k));
      const int s = 8 * h + 2 * k;
      const __m256i scale =
          _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale));
    }
  }
  return _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
}

}  // namespace minfer::backend::cpu::x86
