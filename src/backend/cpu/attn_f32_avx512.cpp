// Stage 12 (kernels): AVX-512 forms of the f32 attention's chunk kernels (vec_dot.h):
// scores of one or two query heads over a chunk of cells, and the chunk's exponentials.
// Invariant (ARCHITECTURE §2.8): each is bitwise its per-cell / per-element reference —
// a score keeps dot_f32_avx2's 8 lanes, their order and its horizontal tree; an
// exponential is glibc's expf — so a row's bits do not depend on which form ran.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/expf_glibc.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/x86_simd.h"

namespace minfer::backend::cpu {
namespace {

using x86::hsum_f32x8;

// Eight registers, each two 8-lane dot accumulators (low half "a", high half "b"), summed
// by hsum_f32x8's tree — the same additions of the same lanes, done for all sixteen dots
// at once, so each sum is bitwise hsum_f32x8 of its half. Result lane 4·j + p holds, for
// the register pair (2p, 2p + 1): j = 0 → a of 2p, 1 → b of 2p, 2 → a of 2p+1, 3 → b of 2p+1.
inline __m512 hsum8x2(const __m512* acc) {
  __m512 s[4];
  for (int p = 0; p < 4; ++p) {  // l_k + l_{k+4}: 128-bit halves of each 8-lane half
    const __m512 x = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 y = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1));
    s[p] = _mm512_add_ps(x, y);
  }
  __m512 t[2];
  for (int p = 0; p < 2; ++p) {  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
    const __m512 x = _mm512_shuffle_ps(s[2 * p], s[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 y = _mm512_shuffle_ps(s[2 * p], s[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2));
    t[p] = _mm512_add_ps(x, y);
  }
  const __m512 x = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 y = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_add_ps(x, y);
}

inline __m512 load_pair(const float* lo, const float* hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(lo))),
                         _mm256_castps_pd(_mm256_loadu_ps(hi)), 1));
}

// NC cells of the pair kernel: each cell's 8 K values broadcast to both halves, the two
// query heads' 8 values side by side; per half exactly dot_f32_avx2's lanes and order.
template <int NC>
inline void scores2_cells(int64_t hd, const float* q0, const float* q1, const float* k,
                          int64_t k_stride, float scale, float* out0, float* out1) {
  const int64_t body = hd / 8 * 8;
  __m512 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    const __m512 qv = load_pair(q0 + i, q1 + i);
    for (int c = 0; c < NC; ++c) {
      const __m512 kv = _mm512_castpd_ps(
          _mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(k + c * k_stride + i))));
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(qv, kv));
    }
  }
  if (NC == 8 && body == hd) {  // no tail: the tree for all sixteen dots at once
    // lane 4j + p: cell 2p (j 0, 1) or 2p + 1 (j 2, 3), head j % 2 → [head 0 | head 1]
    const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    const __m512 r = _mm512_permutexvar_ps(idx, _mm512_mul_ps(hsum8x2(acc), _mm512_set1_ps(scale)));
    _mm256_storeu_ps(out0, _mm512_castps512_ps256(r));
    _mm256_storeu_ps(out1, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1)));
    return;
  }
  for (int c = 0; c < NC; ++c) {
    const float* kc = k + c * k_stride;
    float s0 = hsum_f32x8(_mm512_castps512_ps256(acc[c]));
    float s1 = hsum_f32x8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[c]), 1)));
    for (int64_t i = body; i < hd; ++i) {  // the tail after the lane sum, as dot_f32_avx2
      s0 += q0[i] * kc[i];
      s1 += q1[i] * kc[i];
    }
    out0[c] = s0 * scale;
    out1[c] = s1 * scale;
  }
}

// glibc's expf, eight lanes in double (expf_glibc.h).
using glibc_expf::kInvLn2N;
using glibc_expf::kPoly;
using glibc_expf::kShift;
constexpr const uint64_t* kExp2fTab = glibc_expf::kTab;

inline __m512d bits_pd(uint64_t b) {
  return _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(b)));
}

struct ExpConsts {
  __m512i tab_lo, tab_hi, tab_lo2, tab_hi2;  // entries 0–7, 8–15, 16–23, 24–31
  __m512d inv_ln2n = bits_pd(kInvLn2N), shift = bits_pd(kShift);
  __m512d c0 = bits_pd(kPoly[0]), c1 = bits_pd(kPoly[1]), c2 = bits_pd(kPoly[2]);
  __m512d one = _mm512_set1_pd(1.0);
  ExpConsts() {
    tab_lo = _mm512_loadu_si512(kExp2fTab);
    tab_hi = _mm512_loadu_si512(kExp2fTab + 8);
    tab_lo2 = _mm512_loadu_si512(kExp2fTab + 16);
    tab_hi2 = _mm512_loadu_si512(kExp2fTab + 24);
  }
};

// expf of 8 floats whose |x| < 88 (the caller sends the others to std::exp).
inline __m256 expf8(const ExpConsts& e, __m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x);
  __m512d kd = _mm512_fmadd_pd(e.inv_ln2n, xd, e.shift);
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, e.shift);
  const __m512d r = _mm512_fmsub_pd(e.inv_ln2n, xd, kd);
  // T[ki % 32]: bits 0–3 pick within 16 entries, bit 4 which 16
  const __m512i lo = _mm512_permutex2var_epi64(e.tab_lo, ki, e.tab_hi);
  const __m512i hi = _mm512_permutex2var_epi64(e.tab_lo2, ki, e.tab_hi2);
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  __m512i t = _mm512_mask_blend_epi64(upper, lo, hi);
  t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
  const __m512d s = _mm512_castsi512_pd(t);
  const __m512d z = _mm512_fmadd_pd(e.c0, r, e.c1);
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(e.c2, r, e.one);
  y = _mm512_fmadd_pd(z, r2, y);
  y = _mm512_mul_pd(y, s);
  return _mm512_cvtpd_ps(y);
}

}  // namespace

void attn_scores2_f32_avx512(int64_t n_cells, int64_t hd, const float* q0, const float* q1,
                             const float* k, int64_t k_stride, float scale, float* out0,
                             float* out1) {
  int64_t c = 0;
  for (; c + 8 <= n_cells; c += 8) {
    scores2_cells<8>(hd, q0, q1, k + c * k_stride, k_stride, scale, out0 + c, out1 + c);
  }
  for (; c + 4 <= n_cells; c += 4) {
    scores2_cells<4>(hd, q0, q1, k + c * k_stride, k_stride, scale, out0 + c, out1 + c);
  }
  for (; c < n_cells; ++c) {
    scores2_cells<1>(hd, q0, q1, k + c * k_stride, k_stride, scale, out0 + c, out1 + c);
  }
}

void attn_scores_f32_avx512(int64_t n_cells, int64_t hd, const float* q, const float* k,
                            int64_t k_stride, float scale, float* out) {
  int64_t c = 0;
  if (hd % 8 == 0) {
    // sixteen cells in flight: register i holds cells 2i (low half) and 2i + 1 (high)
    const __m512i idx =  // lane 4j + p holds cell 4p + j
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (; c + 16 <= n_cells; c += 16) {
      const float* kc = k + c * k_stride;
      __m512 acc[8];
      for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t i = 0; i < hd; i += 8) {
        const __m512 qv =
            _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q + i))));
        for (int r = 0; r < 8; ++r) {
          const __m512 kv = load_pair(kc + 2 * r * k_stride + i, kc + (2 * r + 1) * k_stride + i);
          acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(qv, kv));
        }
      }
      _mm512_storeu_ps(
          out + c, _mm512_permutexvar_ps(idx, _mm512_mul_ps(hsum8x2(acc), _mm512_set1_ps(scale))));
    }
  }
  attn_scores_f32_avx2(n_cells - c, hd, q, k + c * k_stride, k_stride, scale, out + c);
}

namespace {
// attn_scores_f32_avx512's sixteen-cell step for NQ queries at once: the same additions
// per query, each K pair loaded once for all of them (NQ · 8 accumulators).
template <int NQ>
inline void scores16_multi(int64_t hd, const float* const* q, const float* kc, int64_t k_stride,
                           float scale, float* const* out, int64_t c) {
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 acc[NQ][8];
  for (int j = 0; j < NQ; ++j)
    for (int r = 0; r < 8; ++r) acc[j][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; i += 8) {
    __m512 qv[NQ];
    for (int j = 0; j < NQ; ++j) {
      qv[j] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q[j] + i))));
    }
    for (int r = 0; r < 8; ++r) {
      const __m512 kv = load_pair(kc + 2 * r * k_stride + i, kc + (2 * r + 1) * k_stride + i);
      for (int j = 0; j < NQ; ++j) acc[j][r] = _mm512_add_ps(acc[j][r], _mm512_mul_ps(qv[j], kv));
    }
  }
  for (int j = 0; j < NQ; ++j) {
    _mm512_storeu_ps(out[j] + c, _mm512_permutexvar_ps(
                                     idx, _mm512_mul_ps(hsum8x2(acc[j]), _mm512_set1_ps(scale))));
  }
}
}  // namespace

void attn_scores_f32_multi_avx512(int64_t nq, const float* const* q, int64_t n_cells, int64_t hd,
                                  const float* k, int64_t k_stride, float scale,
                                  float* const* out) {
  int64_t c = 0;
  if (hd % 8 == 0) {
    for (; c + 16 <= n_cells; c += 16) {
      const float* kc = k + c * k_stride;
      int64_t j = 0;
      for (; j + 3 <= nq; j += 3) scores16_multi<3>(hd, q + j, kc, k_stride, scale, out + j, c);
      if (nq - j == 2) scores16_multi<2>(hd, q + j, kc, k_stride, scale, out + j, c);
      if (nq - j == 1) scores16_multi<1>(hd, q + j, kc, k_stride, scale, out + j, c);
    }
  }
  for (int64_t j = 0; j < nq; ++j) {
    attn_scores_f32_avx2(n_cells - c, hd, q[j], k + c * k_stride, k_stride, scale, out[j] + c);
  }
}

void attn_exp_f32_avx512(int64_t n, const float* s, float m, float* out) {
  const ExpConsts e;
  const __m256 vm = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + i), vm);
    // glibc's special cases (|x| ≥ 88, infinities, NaN): top 12 bits, sign dropped
    const __m256i top =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    const __mmask8 special = _mm256_cmpge_epi32_mask(top, _mm256_set1_epi32(0x42b));
    __m256 y = expf8(e, x);
    if (special != 0) {
      alignas(32) float xs[8], ys[8];
      _mm256_store_ps(xs, x);
      _mm256_store_ps(ys, y);
      for (int j = 0; j < 8; ++j) {
        if ((special >> j) & 1) ys[j] = std::exp(xs[j]);
      }
      y = _mm256_load_ps(ys);
    }
    _mm256_storeu_ps(out + i, y);
  }
  for (; i < n; ++i) out[i] = std::exp(s[i] - m);
}

}  // namespace minfer::backend::cpu
