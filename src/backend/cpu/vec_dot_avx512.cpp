// Stage 12 (kernels): AVX-512 VNNI (256-bit EVEX forms: AVX512VL + AVX512_VNNI + BW,
// with F16C and FMA) dot products and their register-blocked GEMM, for Q5_0, Q4_K and
// Q6_K weights (Q4_0, Q4_1 and Q8_0: vec_dot_avx512_rows.cpp, one f32 lane per row).
// These files alone are compiled with those flags; callers reach them only after cpuid
// said yes, once, at startup. Q5_0 runs two blocks per
// zmm (see PairFmt) and meets the scalar reference within the legacy SIMD tolerance; the
// K-quants keep ggml's x86 lane order (see Q4_KFmt), so they equal the scalar (and AVX2)
// twins bit for bit. The speed comes from vpdpbusd (one instruction for u8·s8 → int32,
// with the code offsets folded into its accumulator), hardware fp16 scale conversion, and
// register blocking: gemm computes an NW × NX tile of outputs per pass over the blocks,
// each output with its own accumulator and exactly vec_dot's operations in vec_dot's
// order (invariant 8: prefill GEMM == decode GEMV, bitwise); NW weight rows per
// activation row give the decode GEMV independent FMA chains.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/kquants_x86.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"

namespace minfer::backend::cpu {
namespace {

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
// Legacy formats (32-element blocks): two consecutive blocks per 512-bit register —
// block 2p in int32/float lanes 0-7, block 2p+1 in lanes 8-15 — so one vpdpbusd does
// 64 multiply-adds. Per block the int32 lane sums are exact (any method gives the same
// integers); the float part is fixed: lane += (d_w · d_x) · float(lane sum) with FMA,
// 16 lanes, then lanes i and i+8 added and the 8-lane tree. An odd last block runs
// with an all-zero upper half. The code offset (Q5_0: −16) is folded into the
// accumulator vpdpbusd starts from: −k·Σx, computed per activation block once and
// shared by every weight row of a tile.

// Masked loads, broadcasts and blends build the 512-bit operands from 256-bit halves
// (AVX512F + BW only: no DQ inserts/extracts).
inline __m512i load2x256(const int8_t* p0, const int8_t* p1) {
  // lanes 4-7 load p1[0..31] (address p1 − 32 + 32); masked-off lanes never fault
  return _mm512_mask_loadu_epi64(_mm512_maskz_loadu_epi64(0x0F, p0), 0xF0, p1 - 32);
}
// Two blocks' 16 packed bytes → 64 bytes: block 0 elements 0-31, then block 1's.
inline __m512i unpack_nibbles2(const uint8_t* p0, const uint8_t* p1) {
  const __m256i t = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)));
  const __m512i tt = _mm512_broadcast_i64x4(t);
  // 128-bit lanes [b0 lo, b1 lo, b0 hi, b1 hi] → [b0 lo, b0 hi, b1 lo, b1 hi]
  const __m512i z = _mm512_mask_srli_epi16(tt, 0xFFFF0000u, tt, 4);
  return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)),
                          _mm512_set1_epi8(0x0F));
}
inline __m512 splat2(float a, float b) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}
inline float hsum_f32x16(__m512 v) {
  const __m512 hi = _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2));
  return hsum_f32x8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(hi)));
}
// −k · Σ x over each group of 4 bytes (int32 lanes), the start of the pair's vpdpbusd.
inline __m512i neg_k_sum(int8_t k, __m512i x) {
  return _mm512_sub_epi32(_mm512_setzero_si512(),
                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(k), x));
}

// The pair machinery (Q5_0). Codes::load2(b0, b1) → u8 codes (64 bytes) and
// Codes::kOffset; X is Q8_0 codes.
template <class WBlock, class XBlock, class Codes>
struct PairFmt {
  using WB = WBlock;
  using XB = XBlock;
  static constexpr int64_t kElems = kQK;  // per block
  static constexpr int64_t kStep = 2;     // blocks per step
  static constexpr int kTileX = 3;        // 12 accumulators + operands fit 32 zmm
  struct Acc {
    __m512 v;
  };
  struct WP {
    __m512i q;  // u8 codes, offset Codes::kOffset
    __m512 d;
  };
  struct XP {
    __m512i q;
    __m512i start;  // −offset · Σx per lane
    __m512 d;
  };
  static void init(Acc& a) { a.v = _mm512_setzero_ps(); }
  static WP prep(const WB* b, bool two) {
    WP p;
    p.q = Codes::load2(b[0], two ? b[1] : b[0], two);
    p.d = splat2(h2f(b[0].d), two ? h2f(b[1].d) : 0.0f);
    return p;
  }
  static XP prepx(const XB* b, bool two) {
    XP p;
    p.q = two ? load2x256(b[0].qs, b[1].qs) : _mm512_maskz_loadu_epi64(0x0F, b[0].qs);
    p.start = neg_k_sum(static_cast<int8_t>(Codes::kOffset), p.q);
    p.d = splat2(h2f(b[0].d), two ? h2f(b[1].d) : 0.0f);
    return p;
  }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m512i s = _mm512_dpbusd_epi32(x.start, w.q, x.q);
    a.v = _mm512_fmadd_ps(_mm512_mul_ps(w.d, x.d), _mm512_cvtepi32_ps(s), a.v);
  }
  static float finish(const Acc& a) { return hsum_f32x16(a.v); }
};

struct Q5Codes {  // Q5_0: bit 4 of element j is bit j of qh (a byte mask)
  static constexpr int kOffset = 16;
  static __m512i load2(const BlockQ5_0& b0, const BlockQ5_0& b1, bool) {
    uint32_t h0, h1;
    std::memcpy(&h0, b0.qh, 4);
    std::memcpy(&h1, b1.qh, 4);
    const __mmask64 m = static_cast<__mmask64>(h0) | (static_cast<__mmask64>(h1) << 32);
    return _mm512_or_si512(unpack_nibbles2(b0.qs, b1.qs),
                           _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10)));
  }
};
using Q5_0Fmt = PairFmt<BlockQ5_0, BlockQ8_0, Q5Codes>;

// Q4_K and Q6_K: ggml's x86 lane order, as the AVX2 and scalar twins (bit-identical
// with them): per super-block 8 exact integer lanes, scaled into 8 f32 lanes by one
// fma; Q4_K's mins in 4 f32 lanes; one reduction in finish().
struct Q4_KFmt {
  using WB = BlockQ4_K;
  using XB = BlockQ8_K;
  static constexpr int64_t kElems = kQKK;
  static constexpr int64_t kStep = 1;
  static constexpr int kTileX = 4;
  struct Acc {
    __m256 acc;
    __m128 acc_m;
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
  static void init(Acc& a) {
    a.acc = _mm256_setzero_ps();
    a.acc_m = _mm_setzero_ps();
  }
  static WP prep(const WB* pb, bool) {
    const WB& b = *pb;
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
  static XP prepx(const XB* pb, bool) {
    const XB& b = *pb;
    const __m256i bs = _mm256_cvtepi16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.bsums)));  // bsums 0..7
    const __m256i bs2 = _mm256_cvtepi16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.bsums + 8)));  // bsums 8..15
    // pairwise sums: lane j = bsums[2j] + bsums[2j+1]
    const __m256i h = _mm256_hadd_epi32(bs, bs2);  // [0..3 of bs pairs, 0..3 of bs2 pairs] per 128
    return {b.qs, _mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0)), b.d};
  }
  static void step(Acc& a, const WP& w, const XP& x) {
    // mins: lane t of 4 = m[2t]·q8s[2t] + m[2t+1]·q8s[2t+1] (q8s[j] = bsums 2j + 2j+1)
    const __m256i mq = _mm256_mullo_epi32(w.m, x.bsum);
    const __m256i pairs = _mm256_hadd_epi32(mq, mq);
    const __m128i prod =
        _mm_unpacklo_epi64(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    a.acc_m = _mm_fmadd_ps(_mm_set1_ps(-x.d * w.dmin), _mm_cvtepi32_ps(prod), a.acc_m);
    const __m256i sumi = x86::q4_k_lanes(w.qs, x.qs, w.sc);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(x.d * w.d), _mm256_cvtepi32_ps(sumi), a.acc);
  }
  static float finish(const Acc& a) {
    __m128 m = _mm_add_ps(a.acc_m, _mm_movehl_ps(a.acc_m, a.acc_m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return hsum_f32x8(a.acc) + _mm_cvtss_f32(m);
  }
};

struct Q6_KFmt {
  using WB = BlockQ6_K;
  using XB = BlockQ8_K;
  static constexpr int64_t kElems = kQKK;
  static constexpr int64_t kStep = 1;
  static constexpr int kTileX = 4;
  struct Acc {
    __m256 acc;
  };
  struct WP {
    const WB* b;
    __m256i sc16;  // the 16 sub-block scales as int16
    float d;
  };
  struct XP {
    const int8_t* qs;
    __m256i bsums;  // 16 int16 sums of 16 y each
    float d;
  };
  static void init(Acc& a) { a.acc = _mm256_setzero_ps(); }
  static WP prep(const WB* b, bool) {
    return {b, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales))),
            h2f(b->d)};
  }
  static XP prepx(const XB* pb, bool) { return {pb->qs, load256(pb->bsums), pb->d}; }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i sumi = x86::q6_k_lanes(*w.b, x.qs, x.bsums, w.sc16);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(x.d * w.d), _mm256_cvtepi32_ps(sumi), a.acc);
  }
  static float finish(const Acc& a) { return hsum_f32x8(a.acc); }
};

// ---- the blocked tile and the kernels built from it ----

// y[j * ys + i] for i < NW weight rows, j < NX activation rows, over n elements. The
// operands come prepared (wprep[i * n_steps + step], xprep[j * n_steps + step];
// kPrepped) or are prepared here per step; either way every output sees the same
// operations in the same order.
// kPrefetch (the decode GEMV): every step also asks for the same bytes of the next NW
// rows, so the weight stream's next tile arrives spread over this tile's work instead
// of a burst that fills the line-fill buffers and stalls.
template <class F, int NW, int NX, bool kPrepped, bool kPrefetch = false>
void tile(int64_t n, const uint8_t* w, uint64_t ws, const void* wprep_v, const void* xprep_v,
          int64_t n_steps, const uint8_t* x, uint64_t xs, float* y, int64_t ys) {
  using WB = typename F::WB;
  using XB = typename F::XB;
  using WP = typename F::WP;
  using XP = typename F::XP;
  const auto* wprep = static_cast<const WP*>(wprep_v);
  const auto* xprep = static_cast<const XP*>(xprep_v);
  const int64_t nb = n / F::kElems;
  typename F::Acc acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) F::init(acc[i][j]);
  }
  for (int64_t ib = 0; ib < nb; ib += F::kStep) {
    const bool two = F::kStep == 1 || ib + 1 < nb;
    typename F::XP xp[NX];
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j)
      xp[j] = kPrepped ? xprep[j * n_steps + ib / F::kStep]
                       : F::prepx(reinterpret_cast<const XB*>(x + j * xs) + ib, two);
    if constexpr (kPrefetch) {
      constexpr int64_t kBytes = F::kStep * static_cast<int64_t>(sizeof(WB));
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        const uint8_t* p = w + (i + NW) * ws + ib * static_cast<int64_t>(sizeof(WB));
        for (int64_t b = 0; b < kBytes; b += 64) __builtin_prefetch(p + b, 0, 3);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const WP wp = kPrepped ? wprep[i * n_steps + ib / F::kStep]
                             : F::prep(reinterpret_cast<const WB*>(w + i * ws) + ib, two);
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
  tile<F, 1, 1, false>(n, static_cast<const uint8_t*>(w), 0, nullptr, nullptr, 0,
                       static_cast<const uint8_t*>(x), 0, &y, 1);
  return y;
}

using TileFn = void (*)(int64_t, const uint8_t*, uint64_t, const void*, const void*, int64_t,
                        const uint8_t*, uint64_t, float*, int64_t);

// Tile shapes: up to 8 weight rows for one activation row (the decode GEMV), up to
// 4 × F::kTileX for a batch (accumulators + prepared operands fit the 32 registers).
constexpr int kMaxWGemv = 8;
constexpr int kMaxW = 4;
// A batch of at least this many activation rows prepares the call's weight blocks once
// (unpacked codes, broadcast scales) instead of once per activation tile, and each
// activation tile's blocks once instead of once per weight tile.
constexpr int64_t kPrepMinRows = 6;

template <class F, int NX, bool kPrepped, int... I>
constexpr std::array<TileFn, sizeof...(I)> tile_row(std::integer_sequence<int, I...>) {
  return {&tile<F, I + 1, NX, kPrepped>...};
}
template <class F, int... I>
constexpr std::array<TileFn, sizeof...(I)> gemv_row(std::integer_sequence<int, I...>) {
  return {&tile<F, I + 1, 1, false, true>...};
}
template <class F, bool kPrepped, int... J>
constexpr std::array<std::array<TileFn, kMaxW>, sizeof...(J)> tile_table(
    std::integer_sequence<int, J...>) {
  return {tile_row<F, J + 1, kPrepped>(std::make_integer_sequence<int, kMaxW>{})...};
}

template <class F>
void gemm(const GemmArgs& a) {
  using WP = typename F::WP;
  static constexpr auto kGemv = gemv_row<F>(std::make_integer_sequence<int, kMaxWGemv>{});
  static constexpr auto kGemm = tile_table<F, false>(std::make_integer_sequence<int, F::kTileX>{});
  static constexpr auto kGemmPrepped =
      tile_table<F, true>(std::make_integer_sequence<int, F::kTileX>{});
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int64_t nb = a.k / F::kElems;
  const int64_t n_steps = (nb + F::kStep - 1) / F::kStep;
  const bool prepped = a.n_x >= kPrepMinRows;
  const WP* wprep = nullptr;
  if (prepped) {
    // Per-thread scratch, grown once (prefill only: decode never comes here).
    thread_local std::vector<WP> scratch;
    const auto need = static_cast<size_t>(a.n_w * n_steps);
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t i = 0; i < a.n_w; ++i) {
      const auto* row = reinterpret_cast<const typename F::WB*>(w + i * a.w_stride);
      for (int64_t ib = 0, s = 0; ib < nb; ib += F::kStep, ++s) {
        scratch[static_cast<size_t>(i * n_steps + s)] =
            F::prep(row + ib, F::kStep == 1 || ib + 1 < nb);
      }
    }
    wprep = scratch.data();
  }
  for (int64_t j0 = 0; j0 < a.n_x; j0 += F::kTileX) {
    const int64_t nx = std::min<int64_t>(F::kTileX, a.n_x - j0);
    const int64_t max_w = a.n_x == 1 ? kMaxWGemv : kMaxW;
    const typename F::XP* xprep = nullptr;
    if (prepped) {
      thread_local std::vector<typename F::XP> xscratch;
      const auto need = static_cast<size_t>(nx * n_steps);
      if (xscratch.size() < need) xscratch.resize(need);
      for (int64_t j = 0; j < nx; ++j) {
        const auto* row = reinterpret_cast<const typename F::XB*>(x + (j0 + j) * a.x_stride);
        for (int64_t ib = 0, s = 0; ib < nb; ib += F::kStep, ++s) {
          xscratch[static_cast<size_t>(j * n_steps + s)] =
              F::prepx(row + ib, F::kStep == 1 || ib + 1 < nb);
        }
      }
      xprep = xscratch.data();
    }
    for (int64_t i0 = 0; i0 < a.n_w; i0 += max_w) {
      const int64_t nw = std::min<int64_t>(max_w, a.n_w - i0);
      const TileFn fn = a.n_x == 1 ? kGemv[nw - 1]
                        : prepped  ? kGemmPrepped[nx - 1][nw - 1]
                                   : kGemm[nx - 1][nw - 1];
      fn(a.k, w + i0 * a.w_stride, a.w_stride, prepped ? wprep + i0 * n_steps : nullptr, xprep,
         n_steps, x + j0 * a.x_stride, a.x_stride, a.y + j0 * a.y_stride + i0, a.y_stride);
    }
  }
}

template <class F>
DotKernel kernel(FromF32Fn from) {
  return {std::is_same_v<typename F::XB, BlockQ8_K> ? DType::kQ8_K : DType::kQ8_0, from, vec_dot<F>,
          gemm<F>};
}

}  // namespace

DotKernel avx512_dot_kernel(DType t) {
  switch (t) {
    case DType::kQ4_0:  // one f32 lane per weight row (vec_dot_avx512_rows.cpp)
    case DType::kQ4_1:
    case DType::kQ8_0:
      return avx512_rows_dot_kernel(t);
    case DType::kQ5_0:
      return kernel<Q5_0Fmt>(from_f32_q8_0_avx2);
    case DType::kQ4_K:
      return kernel<Q4_KFmt>(from_f32_q8_k);
    case DType::kQ6_K:
      return kernel<Q6_KFmt>(from_f32_q8_k);
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
