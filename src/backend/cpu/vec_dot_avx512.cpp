// Stage 12 (kernels): AVX-512 VNNI (256-bit EVEX forms: AVX512VL + AVX512_VNNI + BW,
// with F16C and FMA) Q6_K dot and its register-blocked GEMM, and the AVX-512 table
// (Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 come from vec_dot_avx512_rows.cpp and Q4_K / Q5_K from
// vec_dot_avx512_kquants.cpp, one f32 lane per weight row). These files alone are
// compiled with those flags; callers reach them only after cpuid said yes, once, at
// startup. Q6_K keeps ggml's x86 lane order (see Q6_KFmt), so it equals the scalar (and
// AVX2) twins bit for bit. Register blocking: gemm computes an NW × NX tile of outputs
// per pass over the super-blocks, each output with its own accumulator and exactly
// vec_dot's operations in vec_dot's order (invariant 8: prefill GEMM == decode GEMV,
// bitwise); NW weight rows per activation row give the decode GEMV independent chains.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"

namespace minfer::backend::cpu {
namespace {

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

// x86::q6_k_lanes with both 128-element halves of the super-block in one zmm (half 0 in
// the low 256 bits, half 1 in the high): the same 8 exact integer lanes once the two
// halves are added (lane l covers bytes 4l..4l+3 of every chunk in either half).
inline __m256i q6_k_lanes_zmm(const BlockQ6_K& b, const int8_t* y, __m256i bsums, __m256i sc16) {
  auto halves = [](const void* lo, const void* hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
  };
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m2 = _mm512_set1_epi8(0x03);
  const __m512i ql0 = halves(b.ql, b.ql + 64);
  const __m512i ql1 = halves(b.ql + 32, b.ql + 96);
  const __m512i qh = halves(b.qh, b.qh + 32);
  __m512i q[4];
  q[0] = _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4));
  q[1] = _mm512_or_si512(_mm512_and_si512(ql1, m4),
                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2), m2), 4));
  q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4),
                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m2), 4));
  q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4),
                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 6), m2), 4));
  const __m512i sc = _mm512_castsi256_si512(sc16);
  __m512i sumi = _mm512_setzero_si512();
  for (int k = 0; k < 4; ++k) {
    // int16 lanes 0-7: scale 2k, 8-15: 2k + 1 (half 0); 16-23: 8 + 2k, 24-31: 9 + 2k (half 1)
    const __m512i idx = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * k + 1)),
                                                _mm_set1_epi16(static_cast<int16_t>(2 * k)))),
        _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(9 + 2 * k)),
                         _mm_set1_epi16(static_cast<int16_t>(8 + 2 * k))),
        1);
    const __m512i p = _mm512_maddubs_epi16(q[k], halves(y + 32 * k, y + 128 + 32 * k));
    sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, _mm512_permutexvar_epi16(idx, sc)));
  }
  const __m256i s =
      _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
  return _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
}

// Q6_K: ggml's x86 lane order, as the AVX2 and scalar twins (bit-identical with them):
// per super-block 8 exact integer lanes, scaled into 8 f32 lanes by one fma; one
// reduction in finish().
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
    const __m256i sumi = q6_k_lanes_zmm(*w.b, x.qs, x.bsums, w.sc16);
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

void attn_axpy_rows_f32_avx512(int64_t n_cells, int64_t n, const float* p, const float* v,
                               int64_t v_stride, float* y) {
  constexpr int64_t kRegs = 4;  // 64 elements of y in registers across the cells
  int64_t i0 = 0;
  for (; i0 + 16 * kRegs <= n; i0 += 16 * kRegs) {
    __m512 acc[kRegs];
    for (int r = 0; r < kRegs; ++r) acc[r] = _mm512_loadu_ps(y + i0 + 16 * r);
    for (int64_t c = 0; c < n_cells; ++c) {
      const __m512 pc = _mm512_set1_ps(p[c]);
      const float* vc = v + c * v_stride + i0;
      for (int r = 0; r < kRegs; ++r) {
        acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(pc, _mm512_loadu_ps(vc + 16 * r)));
      }
    }
    for (int r = 0; r < kRegs; ++r) _mm512_storeu_ps(y + i0 + 16 * r, acc[r]);
  }
  if (i0 < n) {  // y[i] = y[i] + p · v[i] per element, as every form
    for (int64_t c = 0; c < n_cells; ++c)
      axpy_f32_avx2(n - i0, p[c], v + c * v_stride + i0, y + i0);
  }
}

namespace {

// F16 GEMM tile: NW weight rows × NP pairs of activation rows, a pair's two rows in the
// low and high 8 lanes of a zmm, the weight row's 8 values broadcast to both halves;
// each half accumulates exactly as avx2_dot_f16_f16 (mul then add per lane, element order).
template <int NW, int NP>
void f16_tile512(int64_t k, const float* w, const float* xp, float* y, int64_t ys) {
  const int64_t body = k / 8 * 8;
  __m512 acc[NW][NP];
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t i = 0; i < body; i += 8) {
    __m512 xv[NP];
    for (int p = 0; p < NP; ++p) xv[p] = _mm512_loadu_ps(xp + p * 2 * k + 2 * i);
    for (int r = 0; r < NW; ++r) {
      const __m512 wv = _mm512_castpd_ps(
          _mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(w + r * k + i))));
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_add_ps(acc[r][p], _mm512_mul_ps(wv, xv[p]));
    }
  }
  for (int r = 0; r < NW; ++r) {
    for (int p = 0; p < NP; ++p) {
      for (int h = 0; h < 2; ++h) {
        const __m256 half =
            h == 0 ? _mm512_castps512_ps256(acc[r][p])
                   : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][p]), 1));
        float s = hsum_f32x8(half);
        const float* xr = xp + p * 2 * k + body * 2;  // the tail: 2 rows × (k − body), row-major
        for (int64_t i = body; i < k; ++i) s += w[r * k + i] * xr[h * (k - body) + (i - body)];
        y[(2 * p + h) * ys + r] = s;
      }
    }
  }
}

using F16Tile512 = void (*)(int64_t, const float*, const float*, float*, int64_t);
constexpr int kF16W = 4;
constexpr int kF16P = 3;
constexpr std::array<std::array<F16Tile512, kF16P>, kF16W> kF16Tiles512 = {{
    {&f16_tile512<1, 1>, &f16_tile512<1, 2>, &f16_tile512<1, 3>},
    {&f16_tile512<2, 1>, &f16_tile512<2, 2>, &f16_tile512<2, 3>},
    {&f16_tile512<3, 1>, &f16_tile512<3, 2>, &f16_tile512<3, 3>},
    {&f16_tile512<4, 1>, &f16_tile512<4, 2>, &f16_tile512<4, 3>},
}};

}  // namespace

void gemm_f16_avx512(const GemmArgs& a) {
  if (a.n_x == 1) {
    gemm_f16_avx2(a);
    return;
  }
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  const auto k = static_cast<size_t>(a.k);
  const int64_t body = a.k / 8 * 8;
  thread_local std::vector<float> wf, xf, row;  // grown once, per thread (prefill only)
  if (wf.size() < static_cast<size_t>(a.n_w) * k) wf.resize(static_cast<size_t>(a.n_w) * k);
  if (xf.size() < 2 * kF16P * k) xf.resize(2 * kF16P * k);
  if (row.size() < 2 * k) row.resize(2 * k);
  for (int64_t r = 0; r < a.n_w; ++r) {
    f16_to_f32_avx2(a.k,
                    reinterpret_cast<const uint16_t*>(w + r * static_cast<int64_t>(a.w_stride)),
                    wf.data() + static_cast<size_t>(r) * k);
  }
  for (int64_t j0 = 0; j0 < a.n_x; j0 += 2 * kF16P) {
    const int64_t nx = std::min<int64_t>(2 * kF16P, a.n_x - j0);
    const int64_t np = (nx + 1) / 2;
    for (int64_t p = 0; p < np; ++p) {  // pair p: rows 2p and 2p + 1 (the last repeated)
      for (int h = 0; h < 2; ++h) {
        const int64_t j = std::min(j0 + 2 * p + h, a.n_x - 1);
        f16_to_f32_avx2(a.k, reinterpret_cast<const uint16_t*>(x + j * a.x_stride),
                        row.data() + static_cast<size_t>(h) * k);
      }
      float* dst = xf.data() + static_cast<size_t>(p) * 2 * k;
      for (int64_t i = 0; i < body; i += 8) {
        std::memcpy(dst + 2 * i, row.data() + i, 32);
        std::memcpy(dst + 2 * i + 8, row.data() + k + i, 32);
      }
      for (int h = 0; h < 2; ++h) {
        std::memcpy(dst + 2 * body + h * (a.k - body), row.data() + h * k + body,
                    static_cast<size_t>(a.k - body) * 4);
      }
    }
    for (int64_t i0 = 0; i0 < a.n_w; i0 += kF16W) {
      const int64_t nw = std::min<int64_t>(kF16W, a.n_w - i0);
      if (nx % 2 == 0) {
        kF16Tiles512[static_cast<size_t>(nw - 1)][static_cast<size_t>(np - 1)](
            a.k, wf.data() + static_cast<size_t>(i0) * k, xf.data(), a.y + j0 * a.y_stride + i0,
            a.y_stride);
      } else {  // the last pair's second row is a repeat: its outputs go to a scratch row
        std::vector<float>& out = row;  // reused: rows were consumed above
        const int64_t ys = nw;
        kF16Tiles512[static_cast<size_t>(nw - 1)][static_cast<size_t>(np - 1)](
            a.k, wf.data() + static_cast<size_t>(i0) * k, xf.data(), out.data(), ys);
        for (int64_t j = 0; j < nx; ++j) {
          for (int64_t r = 0; r < nw; ++r)
            a.y[(j0 + j) * a.y_stride + i0 + r] = out[static_cast<size_t>(j * ys + r)];
        }
      }
    }
  }
}

DotKernel avx512_dot_kernel(DType t) {
  switch (t) {
    case DType::kQ4_0:  // one f32 lane per weight row (vec_dot_avx512_rows.cpp)
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
      return avx512_rows_dot_kernel(t);
    case DType::kQ4_K:  // one f32 lane per weight row (vec_dot_avx512_kquants.cpp)
    case DType::kQ5_K:
      return avx512_kquant_dot_kernel(t);
    case DType::kF16: {  // the AVX2 dot; batches two activation rows per zmm
      DotKernel k = avx2_dot_kernel(DType::kF16);
      k.gemm = gemm_f16_avx512;
      return k;
    }
    case DType::kQ6_K: {  // GEMV here; batches: one zmm per lane of 16 rows
      DotKernel k = kernel<Q6_KFmt>(from_f32_q8_k_avx2);
      k.gemm = [](const GemmArgs& a) {
        if (a.n_x == 1) {
          gemm<Q6_KFmt>(a);
        } else {
          avx512_q6_k_gemm_rows(a);
        }
      };
      return k;
    }
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
