// Stage 12 (kernels): the lane helpers of the AVX2 integer kernels that keep the scalar
// reference's exact sums (vec_dot_avx2_exact.cpp: the legacy types; vec_dot_avx2_kquants.cpp:
// Q2_K..Q5_K). Include only from translation units compiled with -mavx2 -mf16c; static,
// so each keeps its own copy built for its flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/x86_simd.h"

namespace minfer::backend::cpu::x86 {

[[gnu::always_inline]] static inline int32_t hsum_i32x8(__m256i v) {  // exact: any order
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Eight int32x8 vectors to one: lane i holds v[i]'s total (exact, so any order).
[[gnu::always_inline]] static inline __m256i hsum8_i32x8(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// The f16 field of row r's block ib (rows at p[r], blocks stride bytes apart).
[[gnu::always_inline]] static inline uint16_t half_at(const uint16_t* const* p, int r, int64_t ib,
                                                      int64_t stride) {
  uint16_t h;
  std::memcpy(&h, reinterpret_cast<const uint8_t*>(p[r]) + ib * stride, 2);
  return h;
}

// Eight f16 fields (row r's at p[r]) as 8 f32 lanes, without a store and reload (eight
// 16-bit stores read back as one vector never forward: each block would wait on them).
// The helpers here are always_inline: at the sanitizer build's -O1 clang left them as
// calls, and the calls (with their instrumented loads) took most of a decode step.
[[gnu::always_inline]] static inline __m256 halves8(const uint16_t* const* p, int64_t ib,
                                                    int64_t stride) {
  __m128i v = _mm_cvtsi32_si128(half_at(p, 0, ib, stride));
  v = _mm_insert_epi16(v, half_at(p, 1, ib, stride), 1);
  v = _mm_insert_epi16(v, half_at(p, 2, ib, stride), 2);
  v = _mm_insert_epi16(v, half_at(p, 3, ib, stride), 3);
  v = _mm_insert_epi16(v, half_at(p, 4, ib, stride), 4);
  v = _mm_insert_epi16(v, half_at(p, 5, ib, stride), 5);
  v = _mm_insert_epi16(v, half_at(p, 6, ib, stride), 6);
  v = _mm_insert_epi16(v, half_at(p, 7, ib, stride), 7);
  return _mm256_cvtph_ps(v);
}

// The row-per-lane batch GEMMs' group g of 8 weight rows (a short last group repeats its
// last row, computed, never stored) and the store of its outputs for activation rows
// c0 .. c0 + nc − 1 (sumf[c]: lane r is row 8g + r).
template <class WB>
static void group_rows(const GemmArgs& a, int64_t g, const WB* w[8]) {
  for (int r = 0; r < 8; ++r) {
    const int64_t row = std::min<int64_t>(g * 8 + r, a.n_w - 1);
    w[r] = reinterpret_cast<const WB*>(static_cast<const uint8_t*>(a.w) + row * a.w_stride);
  }
}

static inline void store_group_lanes(const GemmArgs& a, int64_t g, int64_t c0, int nc,
                                     const __m256* sumf) {
  const int nr = static_cast<int>(std::min<int64_t>(8, a.n_w - g * 8));
  for (int c = 0; c < nc; ++c) {
    alignas(32) float out[8];
    _mm256_store_ps(out, sumf[c]);
    float* yr = a.y + (c0 + c) * a.y_stride + g * 8;
    for (int r = 0; r < nr; ++r) yr[r] = out[r];
  }
}

// 8 vectors of 8 int32 transposed in place: v[j] lane r ← v[r] lane j.
[[gnu::always_inline]] static inline void transpose8_epi32(__m256i* v) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

}  // namespace minfer::backend::cpu::x86

// The AVX2 exact-kernel files (the only includers) name these helpers unqualified.
namespace minfer::backend::cpu {
using x86::group_rows;
using x86::h2f;
using x86::halves8;
using x86::hsum8_i32x8;
using x86::hsum_i32x8;
using x86::load256;
using x86::store_group_lanes;
using x86::transpose8_epi32;
}  // namespace minfer::backend::cpu
