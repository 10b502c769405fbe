// Stage 12 (kernels): AVX-512 VNNI (256-bit EVEX forms: AVX512VL + AVX512_VNNI + BW,
// with F16C and FMA) dot products and their register-blocked GEMM, for Q4_0, Q4_1,
// Q5_0, Q8_0, Q4_K and Q6_K weights. This file alone is compiled with those flags; callers
// reach it only after cpuid said yes, once, at startup.
// Why 256-bit lanes: one legacy block is 32 bytes of activation codes, so a ymm holds
// exactly one block and the lane partition (4 bytes per int32 lane) is the AVX2
// kernels' — the integer lane sums are exact and the float expression per block is
// the AVX2 twin's, so these kernels equal the AVX2 ones bit for bit (tested), and the
// K-quants equal the scalar reference bit for bit. The speed comes from vpdpbusd (one
// instruction for u8·s8 → int32), hardware fp16 scale conversion, and register
// blocking: gemm computes an NW × NX tile of outputs per pass over the blocks, each
// output with its own accumulator and exactly vec_dot's operations in vec_dot's order
// (invariant 8: prefill GEMM == decode GEMV, bitwise); NW weight rows per activation
// row give the decode GEMV independent FMA chains.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

inline float h2f(quant::Half h) {
  return _cvtsh_ss(h);  // exact, like the software conversion of core/fp16.h
}

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): the AVX2 twin's horizontal tree.
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

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 16 packed bytes → 32 bytes: low nibbles (elements 0-15) then high (16-31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// Σ over each group of 4 bytes of u8 · s8 → 8 int32 lanes (exact).
inline __m256i dp_us8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

// ---- per-format policies: prep_w / prep_x once per block, step per (w, x) pair ----

struct Q4_0Fmt {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr int64_t kBlock = kQK;
  struct Acc {
    __m256 v;
  };
  struct WP {
    __m256i q;  // nibbles 0..15 (the code is q − 8)
    float d;
  };
  struct XP {
    __m256i q;
    __m256i corr;  // 8 · Σ x per lane: Σ (q − 8)·x = Σ q·x − corr, exact
    float d;
  };
  static void init(Acc& a) { a.v = _mm256_setzero_ps(); }
  static WP prep_w(const WB& b) { return {unpack_nibbles(b.qs), h2f(b.d)}; }
  static XP prep_x(const XB& b) {
    const __m256i q = load256(b.qs);
    return {q, dp_us8(_mm256_set1_epi8(8), q), h2f(b.d)};
  }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i s = _mm256_sub_epi32(dp_us8(w.q, x.q), x.corr);
    a.v = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x.d), _mm256_cvtepi32_ps(s), a.v);
  }
  static float finish(const Acc& a) { return hsum_f32x8(a.v); }
};

struct Q4_1Fmt {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr int64_t kBlock = kQK;
  struct Acc {
    __m256 v;
    float summs;
  };
  struct WP {
    __m256i q;
    float d, m;
  };
  struct XP {
    __m256i q;
    float d, s;
  };
  static void init(Acc& a) {
    a.v = _mm256_setzero_ps();
    a.summs = 0.0f;
  }
  static WP prep_w(const WB& b) { return {unpack_nibbles(b.qs), h2f(b.d), h2f(b.m)}; }
  static XP prep_x(const XB& b) { return {load256(b.qs), h2f(b.d), h2f(b.s)}; }
  static void step(Acc& a, const WP& w, const XP& x) {
    a.summs += w.m * x.s;
    a.v = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x.d), _mm256_cvtepi32_ps(dp_us8(w.q, x.q)), a.v);
  }
  static float finish(const Acc& a) { return hsum_f32x8(a.v) + a.summs; }
};

struct Q8_0Fmt {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr int64_t kBlock = kQK;
  struct Acc {
    __m256 v;
  };
  struct WP {
    __m256i abs, sgn;  // |w| as u8; w for the sign transfer onto x
    float d;
  };
  struct XP {
    __m256i q;
    float d;
  };
  static void init(Acc& a) { a.v = _mm256_setzero_ps(); }
  static WP prep_w(const WB& b) {
    const __m256i q = load256(b.qs);
    return {_mm256_sign_epi8(q, q), q, h2f(b.d)};
  }
  static XP prep_x(const XB& b) { return {load256(b.qs), h2f(b.d)}; }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i s = dp_us8(w.abs, _mm256_sign_epi8(x.q, w.sgn));
    a.v = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x.d), _mm256_cvtepi32_ps(s), a.v);
  }
  static float finish(const Acc& a) { return hsum_f32x8(a.v); }
};

// Q5_0 (no AVX2 twin: the scalar one adds one float per block, this one keeps the 8
// float lanes of Q4_0 — equal within the legacy SIMD tolerance). Bit 4 of element j is
// bit j of qh, and byte j of the unpacked nibbles is element j, so the 32-bit qh is
// directly a byte mask.
struct Q5_0Fmt {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr int64_t kBlock = kQK;
  struct Acc {
    __m256 v;
  };
  struct WP {
    __m256i q;  // 0..31 (the code is q − 16)
    float d;
  };
  struct XP {
    __m256i q;
    __m256i corr;  // 16 · Σ x per lane
    float d;
  };
  static void init(Acc& a) { a.v = _mm256_setzero_ps(); }
  static WP prep_w(const WB& b) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    const __m256i hi = _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10));
    return {_mm256_or_si256(unpack_nibbles(b.qs), hi), h2f(b.d)};
  }
  static XP prep_x(const XB& b) {
    const __m256i q = load256(b.qs);
    return {q, dp_us8(_mm256_set1_epi8(16), q), h2f(b.d)};
  }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i s = _mm256_sub_epi32(dp_us8(w.q, x.q), x.corr);
    a.v = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x.d), _mm256_cvtepi32_ps(s), a.v);
  }
  static float finish(const Acc& a) { return hsum_f32x8(a.v); }
};

// Q4_K: per super-block d·Σ(sc·Σq·y) − dmin·Σ(m·bsum) in exact integers, then the
// scalar twin's float expression; sumf accumulates in super-block order.
struct Q4_KFmt {
  using WB = BlockQ4_K;
  using XB = BlockQ8_K;
  static constexpr int64_t kBlock = kQKK;
  struct Acc {
    float sumf;
  };
  struct WP {
    const uint8_t* qs;
    __m256i sc[8];  // int16 scale of sub-block j, broadcast
    __m256i m;      // int32 min of sub-block j in lane j
    float d, dmin;
  };
  struct XP {
    const int8_t* qs;
    __m256i bsum;  // int32 bsums[2j] + bsums[2j+1] in lane j
    float d;
  };
  static void init(Acc& a) { a.sumf = 0.0f; }
  static WP prep_w(const WB& b) {
    WP p;
    p.qs = b.qs;
    alignas(32) int32_t mins[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      kquant_scale_min(j, b.scales, &sc, &m);
      p.sc[j] = _mm256_set1_epi16(sc);
      mins[j] = m;
    }
    p.m = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins));
    p.d = h2f(b.d);
    p.dmin = h2f(b.dmin);
    return p;
  }
  static XP prep_x(const XB& b) {
    const __m256i bs = _mm256_cvtepi16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.bsums)));  // bsums 0..7
    const __m256i bs2 = _mm256_cvtepi16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.bsums + 8)));  // bsums 8..15
    // pairwise sums: lane j = bsums[2j] + bsums[2j+1]
    const __m256i h = _mm256_hadd_epi32(bs, bs2);  // [0..3 of bs pairs, 0..3 of bs2 pairs] per 128
    return {b.qs, _mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0)), b.d};
  }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const int32_t summ = hsum_i32x8(_mm256_mullo_epi32(w.m, x.bsum));
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = load256(w.qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q4, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i plo = _mm256_maddubs_epi16(lo, load256(x.qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, load256(x.qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, w.sc[2 * c]));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, w.sc[2 * c + 1]));
    }
    const float d = x.d * w.d;
    const float dmin = x.d * w.dmin;
    a.sumf += d * static_cast<float>(hsum_i32x8(sumi)) - dmin * static_cast<float>(summ);
  }
  static float finish(const Acc& a) { return a.sumf; }
};

struct Q6_KFmt {
  using WB = BlockQ6_K;
  using XB = BlockQ8_K;
  static constexpr int64_t kBlock = kQKK;
  struct Acc {
    float sumf;
  };
  struct WP {
    const WB* b;
    float d;
  };
  struct XP {
    const int8_t* qs;
    __m256i k32y[8];  // 32 · y per 32 codes, as int16 pair sums (the −32 offset)
    float d;
  };
  static void init(Acc& a) { a.sumf = 0.0f; }
  static WP prep_w(const WB& b) { return {&b, h2f(b.d)}; }
  static XP prep_x(const XB& b) {
    XP p;
    p.qs = b.qs;
    const __m256i k32 = _mm256_set1_epi8(32);
    for (int i = 0; i < 8; ++i) p.k32y[i] = _mm256_maddubs_epi16(k32, load256(b.qs + 32 * i));
    p.d = b.d;
    return p;
  }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    const WB& b = *w.b;
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(b.ql + 64 * h);
      const __m256i ql1 = load256(b.ql + 64 * h + 32);
      const __m256i qh = load256(b.qh + 32 * h);
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
        const __m256i y = load256(x.qs + 128 * h + 32 * k);
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], y), x.k32y[4 * h + k]);
        const int s = 8 * h + 2 * k;
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale));
      }
    }
    a.sumf += (x.d * w.d) * static_cast<float>(hsum_i32x8(sumi));
  }
  static float finish(const Acc& a) { return a.sumf; }
};

// ---- the blocked tile and the kernels built from it ----

// y[j * ys + i] for i < NW weight rows, j < NX activation rows.
template <class F, int NW, int NX>
void tile(int64_t nb, const uint8_t* w, uint64_t ws, const uint8_t* x, uint64_t xs, float* y,
          int64_t ys) {
  using WB = typename F::WB;
  using XB = typename F::XB;
  typename F::Acc acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) F::init(acc[i][j]);
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    typename F::XP xp[NX];
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) xp[j] = F::prep_x(reinterpret_cast<const XB*>(x + j * xs)[ib]);
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const typename F::WP wp = F::prep_w(reinterpret_cast<const WB*>(w + i * ws)[ib]);
#pragma GCC unroll 8
      for (int j = 0; j < NX; ++j) F::step(acc[i][j], wp, xp[j]);
    }
  }
  for (int i = 0; i < NW; ++i) {
    for (int j = 0; j < NX; ++j) y[j * ys + i] = F::finish(acc[i][j]);
  }
}

template <class F>
float vec_dot(int64_t n, const void* w, const void* x) {
  float y;
  tile<F, 1, 1>(n / F::kBlock, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(x), 0,
                &y, 1);
  return y;
}

using TileFn = void (*)(int64_t, const uint8_t*, uint64_t, const uint8_t*, uint64_t, float*,
                        int64_t);

// Tile shapes: up to 8 weight rows for one activation row (the decode GEMV), up to
// 4 × 4 for a batch (16 accumulators + prepared operands fit the 32 vector registers).
template <class F>
struct Tiles {
  static constexpr int kMaxWGemv = 8;
  static constexpr int kMaxW = 4;
  static constexpr int kMaxX = 4;
  template <int... I>
  static constexpr std::array<TileFn, sizeof...(I)> gemv(std::integer_sequence<int, I...>) {
    return {&tile<F, I + 1, 1>...};
  }
  template <int NX, int... I>
  static constexpr std::array<TileFn, sizeof...(I)> row(std::integer_sequence<int, I...>) {
    return {&tile<F, I + 1, NX>...};
  }
};

template <class F>
void gemm(const GemmArgs& a) {
  using T = Tiles<F>;
  static constexpr auto kGemv = T::gemv(std::make_integer_sequence<int, T::kMaxWGemv>{});
  static constexpr std::array<std::array<TileFn, T::kMaxW>, T::kMaxX> kGemm = {
      T::template row<1>(std::make_integer_sequence<int, T::kMaxW>{}),
      T::template row<2>(std::make_integer_sequence<int, T::kMaxW>{}),
      T::template row<3>(std::make_integer_sequence<int, T::kMaxW>{}),
      T::template row<4>(std::make_integer_sequence<int, T::kMaxW>{})};
  const int64_t nb = a.k / F::kBlock;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  for (int64_t j0 = 0; j0 < a.n_x; j0 += T::kMaxX) {
    const int64_t nx = std::min<int64_t>(T::kMaxX, a.n_x - j0);
    const int64_t max_w = a.n_x == 1 ? T::kMaxWGemv : T::kMaxW;
    for (int64_t i0 = 0; i0 < a.n_w; i0 += max_w) {
      const int64_t nw = std::min<int64_t>(max_w, a.n_w - i0);
      const TileFn fn = a.n_x == 1 ? kGemv[nw - 1] : kGemm[nx - 1][nw - 1];
      fn(nb, w + i0 * a.w_stride, a.w_stride, x + j0 * a.x_stride, a.x_stride,
         a.y + j0 * a.y_stride + i0, a.y_stride);
    }
  }
}

template <class F>
DotKernel kernel(FromF32Fn from) {
  return {std::is_same_v<typename F::XB, BlockQ8_K>   ? DType::kQ8_K
          : std::is_same_v<typename F::XB, BlockQ8_1> ? DType::kQ8_1
                                                      : DType::kQ8_0,
          from, vec_dot<F>, gemm<F>};
}

}  // namespace

DotKernel avx512_dot_kernel(DType t) {
  switch (t) {
    case DType::kQ4_0:
      return kernel<Q4_0Fmt>(from_f32_q8_0);
    case DType::kQ4_1:
      return kernel<Q4_1Fmt>(from_f32_q8_1);
    case DType::kQ5_0:
      return kernel<Q5_0Fmt>(from_f32_q8_0);
    case DType::kQ8_0:
      return kernel<Q8_0Fmt>(from_f32_q8_0);
    case DType::kQ4_K:
      return kernel<Q4_KFmt>(from_f32_q8_k);
    case DType::kQ6_K:
      return kernel<Q6_KFmt>(from_f32_q8_k);
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
