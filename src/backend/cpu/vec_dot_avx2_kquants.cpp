// Stage 12 (kernels): AVX2 twins of Q2_K, Q3_K, Q4_K and Q5_K · Q8_K that keep the scalar
// reference's arithmetic exactly (vec_dot_kquants.cpp). Per super-block the same exact
// integers — 32 codes at a time through vpmaddubsw (u8 codes × s8 activations, pairs in int16:
// at most 2·31·127) and vpmaddwd against the sub-block scales (int32, exact) — then the
// scalar's float expression, so they are bitwise equal to it. Compiled with -mavx2 (the legacy
// types: vec_dot_avx2_exact.cpp); reached only after cpuid.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "backend/cpu/x86_lanes_avx2.h"
#include "backend/cpu/x86_simd.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ8_K;
using quant::kQKK;

// Σ over 32 elements of scale(e) · code(e) · y(e) into 8 int32 lanes: codes u8 (≤ 31),
// y s8, scales one int16 per element pair (the pair's sub-block scale).
inline __m256i scaled_dot32(__m256i codes, const int8_t* y, __m256i scales16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load256(y)), scales16);
}

// Scales of two 16-element sub-blocks a (elements 0-15) and b (16-31) as int16 pairs.
inline __m256i scales_16_16(int16_t a, int16_t b) {
  return _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
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

namespace {

// Q4_K / Q5_K: sub-block k's 32 codes (element 32k + l): nibble k % 2 of qs[32(k/2) + l],
// for Q5_K with bit k of qh[l] as bit 4.
inline __m256i kquant_nibbles(const uint8_t* qs, int k) {
  const __m256i q = load256(qs + 32 * (k / 2));
  return _mm256_and_si256(_mm256_srli_epi16(q, 4 * (k % 2)), _mm256_set1_epi8(0x0F));
}
struct Q4_KCodes {
  using WB = BlockQ4_K;
  static constexpr int kCodeBits = 4;
  static __m256i codes(const WB& b, int k) { return kquant_nibbles(b.qs, k); }
};
struct Q5_KCodes {
  using WB = BlockQ5_K;
  static constexpr int kCodeBits = 5;
  static __m256i codes(const WB& b, int k) {
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(load256(b.qh), k), _mm256_set1_epi8(1));
    return _mm256_or_si256(kquant_nibbles(b.qs, k), _mm256_slli_epi16(hi, 4));
  }
};

// The decode form of the Q4_K / Q5_K dots above: 8 weight rows, row r in lane r. Per
// super-block each row's exact integers Σ_k sc_k·Σ code·y (one hadd tree for all 8) and
// Σ_j m_j·(bsums[2j] + bsums[2j+1]) (vpmaddwd of the bsums against the mins, each twice;
// one more tree), then its dot's float expression as lane arithmetic:
// sumf + ((d_x·d_w)·float(sumi) − (d_x·dmin_w)·float(summ)).
template <class P>
void kquant_gemv_tile_avx2(const GemmArgs& a, int64_t nb, const typename P::WB* const* w,
                           const BlockQ8_K* x, int nr, float* y) {
  // bytes 8..15 (the mins) each twice: int16 pairs against the 16 bsums
  const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  TilePrefetch prefetch(a, w[0], 8, nb);
  const uint16_t* dp[8];
  const uint16_t* dminp[8];
  for (int r = 0; r < 8; ++r) {
    dp[r] = &w[r][0].d;
    dminp[r] = &w[r][0].dmin;
  }
  __m256 sumf = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch.step();
    alignas(16) uint8_t sm[8][16];
    alignas(16) int16_t sc16[8][8];  // each k's scale one vpbroadcastw from memory
    __m256i mins16[8];
    for (int r = 0; r < 8; ++r) {
      kquant_scales_mins(w[r][i].scales, sm[r]);
      const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(sm[r]));
      _mm_store_si128(reinterpret_cast<__m128i*>(sc16[r]), _mm_cvtepu8_epi16(v));
      mins16[r] = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, dup));
    }
    __m256i acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i yv = load256(x[i].qs + 32 * k);
      for (int r = 0; r < 8; ++r) {
        const __m256i p = _mm256_maddubs_epi16(P::codes(w[r][i], k), yv);
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, _mm256_set1_epi16(sc16[r][k])));
      }
    }
    const __m256i sumi = hsum8_i32x8(acc);
    __m256i mterm[8];
    const __m256i bsums = load256(x[i].bsums);
    for (int r = 0; r < 8; ++r) mterm[r] = _mm256_madd_epi16(bsums, mins16[r]);
    const __m256i summ = hsum8_i32x8(mterm);
    const __m256 vxd = _mm256_set1_ps(x[i].d);
    const __m256 d = _mm256_mul_ps(vxd, halves8(dp, i, sizeof(typename P::WB)));
    const __m256 dmin = _mm256_mul_ps(vxd, halves8(dminp, i, sizeof(typename P::WB)));
    const __m256 t = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi)),
                                   _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(summ)));
    sumf = _mm256_add_ps(sumf, t);
  }
  float out[8];
  _mm256_storeu_ps(out, sumf);
  for (int r = 0; r < nr; ++r) y[r] = out[r];
}

// The batch form with a weight row per lane (legacy_batch_lanes_avx2's layout, per
// 32-element sub-block): the call's weight rows re-laid once, 8 to a group, per
// super-block and sub-block k 8 vectors (vector j lane r: codes 4j..4j+3 of row r), the
// 8 rows' sub-block scales as int16 pairs, their mins as int16 pairs of sub-blocks
// (2p, 2p + 1), d and dmin as f32 lanes. Per sub-block the pair sums add exactly in int16
// (kFold16 of them: at most 8 · 2·15·128 for Q4_K, 4 · 2·31·128 for Q5_K), vpmaddwd
// against the scales takes them to int32; the mins' sum is 4 vpmaddwd against the
// activation's bsum pairs. The integers are the dot's sumi and summ, exactly, and the
// float step is its expression — every output equals the dot bit for bit.
template <class P>
void kquant_batch_lanes_avx2(const GemmArgs& a) {
  using WB = typename P::WB;
  constexpr int kFold16 = P::kCodeBits == 4 ? 8 : 4;
  constexpr int kC = 4;
  constexpr size_t kVecs = 8 * 8 + 8 + 4;  // codes, scales, min pairs per super-block
  const int64_t nb = a.k / kQKK;
  const int64_t n_groups = (a.n_w + 7) / 8;
  const auto* xbase = static_cast<const uint8_t*>(a.x);
  const size_t n_gb = static_cast<size_t>(n_groups * nb);
  __m256i* wv = thread_scratch<__m256i, 64>(kVecs * n_gb);
  float* wd = thread_scratch<float, 65>(16 * n_gb);
  float* wdmin = wd + 8 * n_gb;
  for (int64_t g = 0; g < n_groups; ++g) {
    const WB* w[8];
    group_rows(a, g, w);
    for (int64_t i = 0; i < nb; ++i) {
      const size_t gb = static_cast<size_t>(g * nb + i);
      __m256i* v = wv + kVecs * gb;
      alignas(32) int32_t sc[8][8], mn[4][8];  // [k][row] (as pairs), [p][row]
      for (int r = 0; r < 8; ++r) {
        alignas(16) uint8_t sm[16];
        kquant_scales_mins(w[r][i].scales, sm);
        for (int k = 0; k < 8; ++k) sc[k][r] = sm[k] | (sm[k] << 16);
        for (int q = 0; q < 4; ++q) mn[q][r] = sm[8 + 2 * q] | (sm[9 + 2 * q] << 16);
        wd[8 * gb + r] = h2f(w[r][i].d);
        wdmin[8 * gb + r] = h2f(w[r][i].dmin);
      }
      for (int k = 0; k < 8; ++k) {
        for (int r = 0; r < 8; ++r) v[8 * k + r] = P::codes(w[r][i], k);
        transpose8_epi32(v + 8 * k);
        v[64 + k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[k]));
      }
      for (int q = 0; q < 4; ++q)
        v[72 + q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(mn[q]));
    }
  }
  for (int64_t c0 = 0; c0 < a.n_x; c0 += kC) {
    const int nc = static_cast<int>(std::min<int64_t>(kC, a.n_x - c0));
    const BlockQ8_K* x[kC];
    for (int c = 0; c < kC; ++c) {
      x[c] = reinterpret_cast<const BlockQ8_K*>(xbase + (c0 + std::min(c, nc - 1)) * a.x_stride);
    }
    for (int64_t g = 0; g < n_groups; ++g) {
      __m256 sumf[kC];
      for (int c = 0; c < kC; ++c) sumf[c] = _mm256_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        const size_t gb = static_cast<size_t>(g * nb + i);
        const __m256i* v = wv + kVecs * gb;
        __m256i sumi[kC];
        for (int c = 0; c < kC; ++c) sumi[c] = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          __m256i acc[kC];
          for (int c = 0; c < kC; ++c) acc[c] = _mm256_setzero_si256();
          for (int j = 0; j < 8; ++j) {
            const __m256i codes = v[8 * k + j];
            for (int c = 0; c < kC; ++c) {
              int32_t q4;
              std::memcpy(&q4, x[c][i].qs + 32 * k + 4 * j, 4);
              acc[c] = _mm256_add_epi16(acc[c], _mm256_maddubs_epi16(codes, _mm256_set1_epi32(q4)));
            }
            if ((j + 1) % kFold16 == 0) {
              for (int c = 0; c < kC; ++c) {
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(acc[c], v[64 + k]));
                acc[c] = _mm256_setzero_si256();
              }
            }
          }
        }
        const __m256 wdv = _mm256_load_ps(wd + 8 * gb);
        const __m256 wdminv = _mm256_load_ps(wdmin + 8 * gb);
        for (int c = 0; c < kC; ++c) {
          __m256i summ = _mm256_setzero_si256();
          for (int q = 0; q < 4;
               ++q) {  // (bsums[4q] + bsums[4q + 1], bsums[4q + 2] + bsums[4q + 3])
            const int16_t* bs = x[c][i].bsums + 4 * q;
            const auto lo = static_cast<uint16_t>(bs[0] + bs[1]);
            const auto hi = static_cast<uint16_t>(bs[2] + bs[3]);
            const auto pair = static_cast<int32_t>(lo | (static_cast<uint32_t>(hi) << 16));
            summ = _mm256_add_epi32(summ, _mm256_madd_epi16(v[72 + q], _mm256_set1_epi32(pair)));
          }
          const __m256 vxd = _mm256_set1_ps(x[c][i].d);
          const __m256 d = _mm256_mul_ps(vxd, wdv);
          const __m256 dmin = _mm256_mul_ps(vxd, wdminv);
          const __m256 t = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sumi[c])),
                                         _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(summ)));
          sumf[c] = _mm256_add_ps(sumf[c], t);
        }
      }
      store_group_lanes(a, g, c0, nc, sumf);
    }
  }
}

template <class P>
void kquant_gemm_avx2(const GemmArgs& a) {
  using WB = typename P::WB;
  const int64_t nb = a.k / kQKK;
  if (a.n_x == 1) {
    register_tiles<WB, BlockQ8_K, 8, 1>(
        a, [&a, nb](const WB* const* ws, const BlockQ8_K* const* xs, int nr, int,
                    float* const* ys) { kquant_gemv_tile_avx2<P>(a, nb, ws, xs[0], nr, ys[0]); });
  } else {
    kquant_batch_lanes_avx2<P>(a);
  }
}

}  // namespace

void gemm_q4_k_q8_k_avx2(const GemmArgs& a) {
  kquant_gemm_avx2<Q4_KCodes>(a);
}

void gemm_q5_k_q8_k_avx2(const GemmArgs& a) {
  kquant_gemm_avx2<Q5_KCodes>(a);
}

}  // namespace minfer::backend::cpu
