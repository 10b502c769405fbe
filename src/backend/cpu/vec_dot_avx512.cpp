// Stage 12 (kernels): AVX-512 VNNI (256-bit EVEX forms: AVX512VL + AVX512_VNNI + BW,
// with F16C and FMA) dot products and their register-blocked GEMM for Q4_K and Q6_K
// weights, and the AVX-512 table (Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 come from
// vec_dot_avx512_rows.cpp, one f32 lane per weight row). These files alone are compiled
// with those flags; callers reach them only after cpuid said yes, once, at startup. The
// K-quants keep ggml's x86 lane order (see Q4_KFmt), so they equal the scalar (and AVX2)
// twins bit for bit. Register blocking: gemm computes an NW × NX tile of outputs per
// pass over the super-blocks, each output with its own accumulator and exactly vec_dot's
// operations in vec_dot's order (invariant 8: prefill GEMM == decode GEMV, bitwise); NW
// weight rows per activation row give the decode GEMV independent FMA chains.
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
using quant::BlockQ6_K;
using quant::BlockQ8_K;
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
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
      return avx512_rows_dot_kernel(t);
    case DType::kQ4_K:
      return kernel<Q4_KFmt>(from_f32_q8_k);
    case DType::kQ6_K:
      return kernel<Q6_KFmt>(from_f32_q8_k);
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
