// Stage 12 (kernels): AVX2 twins that keep the scalar reference's arithmetic exactly:
// Q2_K, Q3_K, Q4_K and Q5_K · Q8_K (vec_dot_kquants.cpp) and Q5_0 / Q5_1 (vec_dot_scalar.cpp).
// Per block or super-block the same exact integers — here 32 codes at a time through
// vpmaddubsw (u8 codes × s8 activations, pairs in int16: at most 2·31·127) and vpmaddwd
// against the sub-block scales (int32, exact) — then the scalar's float expression, block
// after block, so they are bitwise equal to it. This file alone is compiled with -mavx2
// (with AVX2 kernels in vec_dot_avx2.cpp); reached only after cpuid.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "backend/cpu/x86_simd.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using x86::h2f;
using x86::load256;

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

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
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i nib = _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_setr_epi64x(0, 0, 4, 4)),
                                       _mm256_set1_epi8(0x0F));
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

namespace {

// Eight int32x8 vectors to one: lane i holds v[i]'s total (exact, so any order).
inline __m256i hsum8_i32x8(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// A Q4 block's 32 codes (0..15) in element order: the low nibbles, then the high.
inline __m256i q4_codes(const uint8_t* qs) {
  // both lanes load the 16 bytes; the high lane's 64-bit words shift by 4 (one shuffle-
  // free shift instead of a shift and a lane insert)
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_setr_epi64x(0, 0, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// The legacy types as the scalar reference computes them (vec_dot_scalar.cpp): per block
// an exact integer Σ code·y, minus offset·Σy where the codes are stored offset (Q4_0: 8,
// Q5_0: 16), then its float expression —
//   Q4_0  sumf += (float(sumi) · d_w) · d_x
//   Q8_0  sumf += float(sumi) · (d_w · d_x)
//   Q5_0  sumf += (d_w · d_x) · float(sumi)
//   Q4_1, Q5_1  sumf += (d_w · d_x) · float(sumi) + m_w · s_x
// (a·b = b·a exactly, so Q8_0's and Q5_0's are one form). Codes are unsigned except Q8_0's
// (signed: vpmaddubsw takes |w| and y with w's sign).
struct Q4_0Ref {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr int kShift = 3;  // Σ code·y − 8·Σy
  static constexpr bool kSigned = false, kMin = false, kSumFirst = true;
  static constexpr int kCodeBits = 4;
  static __m256i codes(const WB& b) { return q4_codes(b.qs); }
};
struct Q4_1Ref {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr int kShift = -1;
  static constexpr bool kSigned = false, kMin = true, kSumFirst = false;
  static constexpr int kCodeBits = 4;
  static __m256i codes(const WB& b) { return q4_codes(b.qs); }
};
struct Q5_0Ref {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr int kShift = 4;  // Σ code·y − 16·Σy
  static constexpr bool kSigned = false, kMin = false, kSumFirst = false;
  static constexpr int kCodeBits = 5;
  static __m256i codes(const WB& b) { return q5_codes(b.qs, b.qh); }
};
struct Q5_1Ref {
  using WB = BlockQ5_1;
  using XB = BlockQ8_1;
  static constexpr int kShift = -1;
  static constexpr bool kSigned = false, kMin = true, kSumFirst = false;
  static constexpr int kCodeBits = 5;
  static __m256i codes(const WB& b) { return q5_codes(b.qs, b.qh); }
};
struct Q8_0Ref {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr int kShift = -1;
  static constexpr bool kSigned = true, kMin = false, kSumFirst = false;
  static constexpr int kCodeBits = 8;
  static __m256i codes(const WB& b) { return load256(b.qs); }
};

// Σ code·y of one block in 8 int32 lanes (exact); for signed codes a = |w|.
template <class P>
inline __m256i block_lanes(__m256i codes, __m256i abs_codes, __m256i y) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  if constexpr (P::kSigned) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_codes, _mm256_sign_epi8(y, codes)), ones16);
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, y), ones16);
  }
}

inline int32_t sum_y(__m256i y) {  // Σ of 32 s8, exact
  return hsum_i32x8(
      _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), y), _mm256_set1_epi16(1)));
}

// One dot (DotKernel::vec_dot), the scalar reference's operations.
template <class P>
float legacy_dot(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const typename P::WB*>(vw);
  const auto* x = static_cast<const typename P::XB*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256i codes = P::codes(w[ib]);
    const __m256i y = load256(x[ib].qs);
    int32_t sumi = hsum_i32x8(block_lanes<P>(codes, _mm256_abs_epi8(codes), y));
    if constexpr (P::kShift >= 0) sumi -= sum_y(y) * (1 << P::kShift);
    const float dw = h2f(w[ib].d);
    const float dx = h2f(x[ib].d);
    if constexpr (P::kSumFirst) {
      sumf += static_cast<float>(sumi) * dw * dx;
    } else if constexpr (P::kMin) {
      sumf += (dw * dx) * static_cast<float>(sumi) + h2f(w[ib].m) * h2f(x[ib].s);
    } else {
      sumf += (dw * dx) * static_cast<float>(sumi);
    }
  }
  return sumf;
}

// The float step for 8 outputs at once (lane l): sumf + the type's expression, the same
// IEEE operations as legacy_dot's scalar line, lane by lane.
template <class P>
inline __m256 legacy_step(__m256 sumf, __m256i sumi, __m256 wd, __m256 xd, __m256 wm, __m256 xs) {
  const __m256 s = _mm256_cvtepi32_ps(sumi);
  if constexpr (P::kSumFirst) return _mm256_add_ps(sumf, _mm256_mul_ps(_mm256_mul_ps(s, wd), xd));
  __m256 t = _mm256_mul_ps(_mm256_mul_ps(wd, xd), s);
  if constexpr (P::kMin) t = _mm256_add_ps(t, _mm256_mul_ps(wm, xs));
  return _mm256_add_ps(sumf, t);
}

inline __m256 cvt_halves8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// Eight f16 fields (row r's at p[r]) as 8 f32 lanes, without a store and reload (eight
// 16-bit stores read back as one vector never forward: each block would wait on them).
inline __m256 halves8(const uint16_t* const* p, int64_t ib, int64_t stride) {
  const auto at = [&](int r) {
    uint16_t h;
    std::memcpy(&h, reinterpret_cast<const uint8_t*>(p[r]) + ib * stride, 2);
    return h;
  };
  __m128i v = _mm_cvtsi32_si128(at(0));
  v = _mm_insert_epi16(v, at(1), 1);
  v = _mm_insert_epi16(v, at(2), 2);
  v = _mm_insert_epi16(v, at(3), 3);
  v = _mm_insert_epi16(v, at(4), 4);
  v = _mm_insert_epi16(v, at(5), 5);
  v = _mm_insert_epi16(v, at(6), 6);
  v = _mm_insert_epi16(v, at(7), 7);
  return _mm256_cvtph_ps(v);
}

// The register-blocked forms (DotKernel::gemm), 8 outputs in the 8 f32 lanes of one
// register: per block each output's exact integer sum, then legacy_step — so every
// output equals legacy_dot, and the scalar reference, bit for bit
// (invariant 8, and one result on every x86 CPU: the AVX-512 rows kernels give the same).
// A dot is a chain of dependent scalar adds, one per block.
//  GEMV (one activation row): 8 weight rows side by side, each block decoded once, the 8
//   sums gathered by one hadd tree; the
//   activation's d and code offsets' Σy taken once per call; the tile two ahead
//   prefetched a slice per block (TilePrefetch: it is what lets the 8 interleaved rows
//   stream from DRAM — on the AMD EPYC (Zen 3), one core, 896-wide rows: Q4_0 6.8 →
//   11 GB/s, Q5_0 4.7 → 9.6, and faster than one row after another, which Q8_0 and
//   Q5_0 took before: Q8_0 7.6 → 12.4, Q5_0 5.7 → 9.6).
//  GEMM (a batch): legacy_batch_lanes_avx2, below.
template <class P>
void legacy_gemv_avx2(const GemmArgs& a) {
  using WB = typename P::WB;
  using XB = typename P::XB;
  const int64_t nb = a.k / kQK;
  const auto* x = static_cast<const XB*>(a.x);
  // the code offsets' Σy, and x's d as f32, once per call (every tile shares them): on
  // the stack, since a decode step allocates nothing (a worker's first call of a size
  // may come at any step); rows past kStackBlocks blocks (none in practice) use scratch
  constexpr int64_t kStackBlocks = 4096;  // 131,072 elements, 32 KiB of stack
  alignas(32) int32_t offsets_stack[kStackBlocks];
  alignas(32) float xd_stack[kStackBlocks];
  int32_t* offsets = offsets_stack;
  float* xd = xd_stack;
  if (nb > kStackBlocks) {
    offsets = thread_scratch<int32_t, 56>(static_cast<size_t>(nb));
    xd = thread_scratch<float, 57>(static_cast<size_t>(nb));
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    if constexpr (P::kShift >= 0) offsets[ib] = sum_y(load256(x[ib].qs)) * (1 << P::kShift);
    xd[ib] = h2f(x[ib].d);
  }
  register_tiles<WB, XB, 8, 1>(
      a, [&](const WB* const* w, const XB* const*, int nr, int, float* const* y) {
        const uint16_t* dp[8];
        const uint16_t* mp[8];
        for (int r = 0; r < 8; ++r) {
          dp[r] = &w[r][0].d;
          if constexpr (P::kMin) mp[r] = &w[r][0].m;
        }
        TilePrefetch prefetch(a, w[0], 8, nb);
        __m256 sumf = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < nb; ++ib) {
          prefetch.step();
          const __m256i yv = load256(x[ib].qs);
          __m256i part[8];
          for (int r = 0; r < 8; ++r) {
            const __m256i codes = P::codes(w[r][ib]);
            part[r] = block_lanes<P>(codes, _mm256_abs_epi8(codes), yv);
          }
          __m256i sumi = hsum8_i32x8(part);
          if constexpr (P::kShift >= 0)
            sumi = _mm256_sub_epi32(sumi, _mm256_set1_epi32(offsets[ib]));
          __m256 wmv = _mm256_setzero_ps();
          __m256 xs = _mm256_setzero_ps();
          if constexpr (P::kMin) {
            wmv = halves8(mp, ib, sizeof(WB));
            xs = _mm256_set1_ps(h2f(x[ib].s));
          }
          sumf = legacy_step<P>(sumf, sumi, halves8(dp, ib, sizeof(WB)), _mm256_set1_ps(xd[ib]),
                                wmv, xs);
        }
        float out[8];
        _mm256_storeu_ps(out, sumf);
        for (int r = 0; r < nr; ++r) y[0][r] = out[r];
      });
}

// The row-per-lane batch GEMMs' group g of 8 weight rows (a short last group repeats its
// last row, computed, never stored) and the store of its outputs for activation rows
// c0 .. c0 + nc − 1 (sumf[c]: lane r is row 8g + r).
template <class WB>
void group_rows(const GemmArgs& a, int64_t g, const WB* w[8]) {
  for (int r = 0; r < 8; ++r) {
    const int64_t row = std::min<int64_t>(g * 8 + r, a.n_w - 1);
    w[r] = reinterpret_cast<const WB*>(static_cast<const uint8_t*>(a.w) + row * a.w_stride);
  }
}

inline void store_group_lanes(const GemmArgs& a, int64_t g, int64_t c0, int nc,
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
inline void transpose8_epi32(__m256i* v) {
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

// The batch form with a weight row in each lane, so no hadd tree: the call's weight rows, 8 to a
// group, re-laid once per call so that a block's vector j holds codes 4j..4j+3 of the group's 8
// rows, lane r row r; an activation block's 4 bytes 4j..4j+3 broadcast to every lane; vpmaddubsw of
// the two gives each lane two exact pair sums of its own row. Pair sums are at most 2·15·128 =
// 3,840 for 4-bit codes (2·31·128 = 7,936 for 5-bit), so kFold16 of them add exactly in
// int16 before vpmaddwd widens them. Per block each lane then holds its row's exact
// Σ code·y, and legacy_step applies the dot's float expression — every output equals
// legacy_dot bit for bit. 4 activation rows per pass: 8 × 4 outputs from 8 code loads.
template <class P>
void legacy_batch_lanes_avx2(const GemmArgs& a) {
  using WB = typename P::WB;
  using XB = typename P::XB;
  // signed codes (Q8_0): |w| against y with w's sign, whose pair sums (≤ 2·128·127)
  // leave no room in int16, so each is widened at once
  constexpr int kFold16 = P::kSigned ? 1 : P::kCodeBits == 4 ? 8 : 4;
  constexpr int kC = 4;
  const int64_t nb = a.k / kQK;
  const int64_t n_groups = (a.n_w + 7) / 8;
  const auto* xbase = static_cast<const uint8_t*>(a.x);
  // weights: group g's block ib at [(g · nb + ib) · 8]: 8 code vectors, 8 d, 8 m
  const size_t n_gb = static_cast<size_t>(n_groups * nb);
  __m256i* wc = thread_scratch<__m256i, 60>(8 * n_gb);
  float* wd = thread_scratch<float, 61>(16 * n_gb);
  float* wm = wd + 8 * n_gb;
  for (int64_t g = 0; g < n_groups; ++g) {
    const WB* w[8];
    group_rows(a, g, w);
    for (int64_t ib = 0; ib < nb; ++ib) {
      const size_t o = static_cast<size_t>(g * nb + ib) * 8;
      for (int r = 0; r < 8; ++r) {
        wc[o + r] = P::codes(w[r][ib]);
        wd[o + r] = h2f(w[r][ib].d);
        if constexpr (P::kMin) wm[o + r] = h2f(w[r][ib].m);
      }
      transpose8_epi32(wc + o);
    }
  }
  // activations: per row and block its d, s (Q8_1) and the code offset's Σy
  const size_t n_xb = static_cast<size_t>(a.n_x * nb);
  float* xd = thread_scratch<float, 62>(2 * n_xb);
  float* xs = xd + n_xb;
  int32_t* xoff = thread_scratch<int32_t, 63>(n_xb);
  for (int64_t c = 0; c < a.n_x; ++c) {
    const auto* x = reinterpret_cast<const XB*>(xbase + c * a.x_stride);
    for (int64_t ib = 0; ib < nb; ++ib) {
      xd[c * nb + ib] = h2f(x[ib].d);
      if constexpr (P::kMin) xs[c * nb + ib] = h2f(x[ib].s);
      if constexpr (P::kShift >= 0) {
        xoff[c * nb + ib] = sum_y(load256(x[ib].qs)) * (1 << P::kShift);
      }
    }
  }
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t c0 = 0; c0 < a.n_x; c0 += kC) {
    const int nc = static_cast<int>(std::min<int64_t>(kC, a.n_x - c0));
    const uint8_t* xq[kC];
    int64_t cc[kC];
    for (int c = 0; c < kC; ++c) {
      cc[c] = c0 + std::min(c, nc - 1);
      xq[c] = xbase + cc[c] * a.x_stride;
    }
    for (int64_t g = 0; g < n_groups; ++g) {
      __m256 sumf[kC];
      for (int c = 0; c < kC; ++c) sumf[c] = _mm256_setzero_ps();
      for (int64_t ib = 0; ib < nb; ++ib) {
        const size_t o = static_cast<size_t>(g * nb + ib) * 8;
        __m256i sumi[kC], acc[kC];
        for (int c = 0; c < kC; ++c) {
          sumi[c] = _mm256_setzero_si256();
          acc[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; ++j) {
          const __m256i codes = wc[o + j];
          const __m256i ucodes = P::kSigned ? _mm256_abs_epi8(codes) : codes;
          for (int c = 0; c < kC; ++c) {
            int32_t q4;
            std::memcpy(&q4, reinterpret_cast<const XB*>(xq[c])[ib].qs + 4 * j, 4);
            __m256i yv = _mm256_set1_epi32(q4);
            if constexpr (P::kSigned) yv = _mm256_sign_epi8(yv, codes);
            acc[c] = _mm256_add_epi16(acc[c], _mm256_maddubs_epi16(ucodes, yv));
          }
          if ((j + 1) % kFold16 == 0) {
            for (int c = 0; c < kC; ++c) {
              sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(acc[c], ones16));
              acc[c] = _mm256_setzero_si256();
            }
          }
        }
        const __m256 wdv = _mm256_load_ps(wd + o);
        __m256 wmv = _mm256_setzero_ps();
        if constexpr (P::kMin) wmv = _mm256_load_ps(wm + o);
        for (int c = 0; c < kC; ++c) {
          const int64_t xi = cc[c] * nb + ib;
          if constexpr (P::kShift >= 0)
            sumi[c] = _mm256_sub_epi32(sumi[c], _mm256_set1_epi32(xoff[xi]));
          __m256 xsv = _mm256_setzero_ps();
          if constexpr (P::kMin) xsv = _mm256_set1_ps(xs[xi]);
          sumf[c] = legacy_step<P>(sumf[c], sumi[c], wdv, _mm256_set1_ps(xd[xi]), wmv, xsv);
        }
      }
      store_group_lanes(a, g, c0, nc, sumf);
    }
  }
}

template <class P>
void legacy_gemm_avx2(const GemmArgs& a) {
  if (a.n_x == 1) {
    legacy_gemv_avx2<P>(a);
  } else {
    legacy_batch_lanes_avx2<P>(a);
  }
}

template <class P>
IsaDot legacy_ref() {
  return {.dot = legacy_dot<P>, .gemm = legacy_gemm_avx2<P>};
}

}  // namespace

IsaDot avx2_ref_legacy_dot(DType t) {
  switch (t) {
    case DType::kQ4_0:
      return legacy_ref<Q4_0Ref>();
    case DType::kQ4_1:
      return legacy_ref<Q4_1Ref>();
    case DType::kQ5_0:
      return legacy_ref<Q5_0Ref>();
    case DType::kQ5_1:
      return legacy_ref<Q5_1Ref>();
    case DType::kQ8_0:
      return legacy_ref<Q8_0Ref>();
    default:
      return {};
  }
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
