// Stage 12 (kernels): AVX-512 (F/BW/VL/VNNI, with F16C and FMA) kernels that are not
// one-lane-per-row — the Q6_K GEMV, attention's V rows — and the
// AVX-512 table (Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 come from vec_dot_avx512_rows.cpp,
// Q4_K / Q5_K and the Q6_K batch GEMM from vec_dot_avx512_kquants.cpp). These files
// alone are compiled with those flags; callers reach them only after cpuid said yes,
// once, at startup. Q6_K keeps ggml's x86 lane order (see Q6_KFmt), so it equals the
// scalar (and AVX2) twins bit for bit, and its batch GEMM does the same operations per
// output (invariant 8: prefill GEMM == decode GEMV, bitwise).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "backend/cpu/x86_simd.h"

namespace minfer::backend::cpu {
namespace {

using x86::h2f;
using x86::hsum_f32x8;
using x86::load256;

using quant::BlockQ6_K;
using quant::BlockQ8_K;
using quant::kQKK;

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
  static WP prep(const WB* b) {
    return {b, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales))),
            h2f(b->d)};
  }
  static XP prepx(const XB* pb) { return {pb->qs, load256(pb->bsums), pb->d}; }
  static void step(Acc& a, const WP& w, const XP& x) {
    const __m256i sumi = q6_k_lanes_zmm(*w.b, x.qs, x.bsums, w.sc16);
    a.acc = _mm256_fmadd_ps(_mm256_set1_ps(x.d * w.d), _mm256_cvtepi32_ps(sumi), a.acc);
  }
  static float finish(const Acc& a) { return hsum_f32x8(a.acc); }
};

// ---- the Q6_K GEMV ----

// y[i] for NW weight rows against one activation row: NW independent accumulators per
// pass over the super-blocks, the activation's operands prepared once per super-block.
// kPrefetch: every super-block also asks for the same bytes of the next NW rows, so the
// weight stream arrives spread over this tile's work (a burst would fill the line-fill
// buffers and stall).
template <int NW, bool kPrefetch>
void q6_k_rows(int64_t n, const uint8_t* w, uint64_t ws, const uint8_t* x, float* y) {
  using WB = Q6_KFmt::WB;
  const int64_t nb = n / kQKK;
  Q6_KFmt::Acc acc[NW];
  for (int i = 0; i < NW; ++i) Q6_KFmt::init(acc[i]);
  for (int64_t ib = 0; ib < nb; ++ib) {
    const Q6_KFmt::XP xp = Q6_KFmt::prepx(reinterpret_cast<const BlockQ8_K*>(x) + ib);
    if constexpr (kPrefetch) {
      for (int i = 0; i < NW; ++i) {
        const uint8_t* p = w + (i + NW) * ws + ib * static_cast<int64_t>(sizeof(WB));
        for (int64_t b = 0; b < static_cast<int64_t>(sizeof(WB)); b += 64)
          __builtin_prefetch(p + b, 0, 3);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      Q6_KFmt::step(acc[i], Q6_KFmt::prep(reinterpret_cast<const WB*>(w + i * ws) + ib), xp);
    }
  }
  for (int i = 0; i < NW; ++i) y[i] = Q6_KFmt::finish(acc[i]);
}

float dot_q6_k_q8_k_avx512(int64_t n, const void* w, const void* x) {
  float y;
  q6_k_rows<1, false>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(x), &y);
  return y;
}

// Decode: up to 8 rows per pass; a batch: one zmm per x86 lane of 16 rows
// (gemm_q6_k_q8_k_rows_avx512, the same operations per output).
void gemm_q6_k_q8_k_avx512(const GemmArgs& a) {
  if (a.n_x != 1) {
    gemm_q6_k_q8_k_rows_avx512(a);
    return;
  }
  using RowsFn = void (*)(int64_t, const uint8_t*, uint64_t, const uint8_t*, float*);
  static constexpr std::array<RowsFn, 8> kRows = {
      &q6_k_rows<1, true>, &q6_k_rows<2, true>, &q6_k_rows<3, true>, &q6_k_rows<4, true>,
      &q6_k_rows<5, true>, &q6_k_rows<6, true>, &q6_k_rows<7, true>, &q6_k_rows<8, true>};
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (int64_t i0 = 0; i0 < a.n_w; i0 += 8) {
    const int64_t nw = std::min<int64_t>(8, a.n_w - i0);
    kRows[static_cast<size_t>(nw - 1)](a.k, w + i0 * a.w_stride, a.w_stride,
                                       static_cast<const uint8_t*>(a.x), a.y + i0);
  }
}

}  // namespace

namespace {
// kRegs·16 elements of y in registers across the cells: y = y + p·v per element in cell
// order, whatever the block width.
template <int kRegs>
void axpy_rows_block(int64_t n_cells, const float* p, const float* v, int64_t v_stride, float* y) {
  __m512 acc[kRegs];
  for (int r = 0; r < kRegs; ++r) acc[r] = _mm512_loadu_ps(y + 16 * r);
  for (int64_t c = 0; c < n_cells; ++c) {
    const __m512 pc = _mm512_set1_ps(p[c]);
    const float* vc = v + c * v_stride;
    for (int r = 0; r < kRegs; ++r) {
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(pc, _mm512_loadu_ps(vc + 16 * r)));
    }
  }
  for (int r = 0; r < kRegs; ++r) _mm512_storeu_ps(y + 16 * r, acc[r]);
}

// axpy_rows_block for NQ query rows at once: each cell's V slice loaded once, NQ · kRegs
// independent y = y + p·v chains.
template <int kRegs, int NQ>
void axpy_rows_block_multi(int64_t n_cells, const float* const* p, const float* v, int64_t v_stride,
                           float* const* y, int64_t i0) {
  __m512 acc[NQ][kRegs];
  for (int j = 0; j < NQ; ++j)
    for (int r = 0; r < kRegs; ++r) acc[j][r] = _mm512_loadu_ps(y[j] + i0 + 16 * r);
  for (int64_t c = 0; c < n_cells; ++c) {
    const float* vc = v + c * v_stride + i0;
    __m512 vv[kRegs];
    for (int r = 0; r < kRegs; ++r) vv[r] = _mm512_loadu_ps(vc + 16 * r);
    for (int j = 0; j < NQ; ++j) {
      const __m512 pc = _mm512_set1_ps(p[j][c]);
      for (int r = 0; r < kRegs; ++r)
        acc[j][r] = _mm512_add_ps(acc[j][r], _mm512_mul_ps(pc, vv[r]));
    }
  }
  for (int j = 0; j < NQ; ++j)
    for (int r = 0; r < kRegs; ++r) _mm512_storeu_ps(y[j] + i0 + 16 * r, acc[j][r]);
}

// Groups of NQ queries, the remainder in one narrower group.
template <int kRegs, int NQ>
void axpy_rows_groups(int64_t nq, int64_t n_cells, const float* const* p, const float* v,
                      int64_t v_stride, float* const* y, int64_t i0) {
  int64_t j = 0;
  for (; j + NQ <= nq; j += NQ)
    axpy_rows_block_multi<kRegs, NQ>(n_cells, p + j, v, v_stride, y + j, i0);
  if constexpr (NQ > 1) {
    if (j < nq) axpy_rows_groups<kRegs, NQ - 1>(nq - j, n_cells, p + j, v, v_stride, y + j, i0);
  }
}
}  // namespace

void attn_axpy_rows_f32_multi_avx512(int64_t nq, int64_t n_cells, int64_t n, const float* const* p,
                                     const float* v, int64_t v_stride, float* const* y) {
  int64_t i0 = 0;  // the blocks of attn_axpy_rows_f32_avx512, each element's chain its own
  for (; i0 + 64 <= n; i0 += 64) axpy_rows_groups<4, 4>(nq, n_cells, p, v, v_stride, y, i0);
  if (i0 + 32 <= n) {
    axpy_rows_groups<2, 8>(nq, n_cells, p, v, v_stride, y, i0);
    i0 += 32;
  }
  if (i0 + 16 <= n) {
    axpy_rows_groups<1, 8>(nq, n_cells, p, v, v_stride, y, i0);
    i0 += 16;
  }
  if (i0 < n) {
    for (int64_t j = 0; j < nq; ++j)
      for (int64_t c = 0; c < n_cells; ++c)
        axpy_f32_avx2(n - i0, p[j][c], v + c * v_stride + i0, y[j] + i0);
  }
}

void attn_axpy_rows_f32_avx512(int64_t n_cells, int64_t n, const float* p, const float* v,
                               int64_t v_stride, float* y) {
  int64_t i0 = 0;
  for (; i0 + 64 <= n; i0 += 64) axpy_rows_block<4>(n_cells, p, v + i0, v_stride, y + i0);
  // Head sizes under 64 (an encoder's 32) or a remainder: narrower register blocks.
  if (i0 + 32 <= n) {
    axpy_rows_block<2>(n_cells, p, v + i0, v_stride, y + i0);
    i0 += 32;
  }
  if (i0 + 16 <= n) {
    axpy_rows_block<1>(n_cells, p, v + i0, v_stride, y + i0);
    i0 += 16;
  }
  if (i0 < n) {  // y[i] = y[i] + p · v[i] per element, as every form
    for (int64_t c = 0; c < n_cells; ++c)
      axpy_f32_avx2(n - i0, p[c], v + c * v_stride + i0, y + i0);
  }
}

IsaDot avx512_dot(DType t) {
  switch (t) {
    case DType::kQ4_0:  // one f32 lane per weight row (vec_dot_avx512_rows.cpp)
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
      return avx512_rows_dot(t);
    case DType::kQ4_K:  // one f32 lane per weight row (vec_dot_avx512_kquants.cpp)
    case DType::kQ5_K:
      return avx512_kquant_dot(t);
    case DType::kF32:  // 16 FMA lanes (vec_dot_float_avx512.cpp)
    case DType::kF16:
    case DType::kBF16:
      return float_dot_avx512(t);
    case DType::kQ6_K:
      return {dot_q6_k_q8_k_avx512, gemm_q6_k_q8_k_avx512};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
