// Stage 12 (kernels): AVX2 twins of the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) that keep
// the scalar reference's arithmetic exactly (vec_dot_scalar.cpp). Per block the same exact
// integer — here 32 codes at a time through vpmaddubsw (u8 codes × s8 activations, pairs in
// int16: at most 2·31·127) — then the scalar's float expression, block after block, so they
// are bitwise equal to it. Compiled with -mavx2 (the K-quants: vec_dot_avx2_kquants.cpp;
// other AVX2 kernels: vec_dot_avx2.cpp); reached only after cpuid.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/x86_lanes_avx2.h"
#include "backend/cpu/x86_simd.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ8_0;
using quant::kQK;

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

}  // namespace minfer::backend::cpu
