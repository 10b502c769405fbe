// Stage 12 (kernels): the small helpers every x86 kernel file shares. Include only from
// translation units compiled for AVX2 + F16C or more (the *_avx2 / *_avx512 files, reached
// after cpuid); static inline, so each of those keeps its own copy built for its flags.
#pragma once

#include <immintrin.h>

#include "quant/blocks.h"

namespace minfer::backend::cpu::x86 {

// F16C: exact, equal to core/fp16.h's software conversion.
static inline float h2f(quant::Half h) {
  return _cvtsh_ss(h);
}

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): the tree the scalar lanes8 twins use.
static inline float hsum_f32x8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

}  // namespace minfer::backend::cpu::x86
