// Stage 12 (kernels): AVX-512 F32 / F16 / BF16 weight dots, their decode GEMV and their
// register-blocked prefill GEMM (compiled with AVX-512 flags; reached only after cpuid).
// Invariant (ARCHITECTURE §6, "float weights: 16 FMA lanes"): every output is the scalar
// reference's lanes16_fma_dot — lane l accumulates elements i ≡ l (mod 16) of the
// 16-element body by fma in element order, lanes l and l + 8 are added, the 8 sums reduced
// ((0+4)+(2+6))+((1+5)+(3+7)), the n % 16 tail fma'd onto that sum in order — whatever
// the kernel (dot, GEMV, GEMM tile) and the batch, so prefill equals decode bit for bit.
// f16 / bf16 → f32 widening is exact, so where it happens changes no bit.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/float_gemm.h"
#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {
namespace {

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) of the lanes-l-plus-(l+8) sums.
inline float tree16(__m512 acc) {
  const __m256 t =
      _mm256_add_ps(_mm512_castps512_ps256(acc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// tree16 of four accumulators at once, each add pairing the same operands in the same
// operand order as tree16 (so the same bits): out lane j = tree16(a_j).
inline __m128 tree16x4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  // lanes l + (l+8): [a0 | a1] and [a2 | a3], 8 sums each
  const __m512 p01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 p23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
  // t_j + t_(j+4): one 128-bit lane per accumulator, in order a0 a1 a2 a3
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(p01, p23, _MM_SHUFFLE(3, 1, 3, 1)));
  // s0 + s2, s1 + s3 (lanes 0 and 1 of each 128-bit lane), then their sum (lane 0)
  const __m512 r = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 t = _mm512_add_ps(r, _mm512_permute_ps(r, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

// Element formats: 16 elements widened to f32 (exact), one element, a row widened.
struct F32Fmt {
  using T = float;
  static constexpr bool kInPlace = true;  // the GEMM reads f32 weight rows unpacked
  static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
  static float one(float v) { return v; }
};
struct F16Fmt {
  using T = uint16_t;
  static constexpr bool kInPlace = false;
  static __m512 load16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float one(uint16_t v) { return _cvtsh_ss(v); }
};
struct BF16Fmt {
  using T = uint16_t;
  static constexpr bool kInPlace = false;
  static __m512 load16(const uint16_t* p) {
    const __m512i v =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  static float one(uint16_t v) {
    const uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class Fmt>
float dot16(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const typename Fmt::T*>(vw);
  const auto* x = static_cast<const typename Fmt::T*>(vx);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(Fmt::load16(w + i), Fmt::load16(x + i), acc);
  float s = tree16(acc);
  for (; i < n; ++i) s = std::fma(Fmt::one(w[i]), Fmt::one(x[i]), s);
  return s;
}

// Decode: NW weight rows against one activation row, one accumulator per row (NW
// independent fma chains), the weights widened as they stream in.
template <class Fmt, int NW>
void gemv_rows(int64_t k, const uint8_t* w, uint64_t w_stride, const typename Fmt::T* x, float* y) {
  const int64_t body = k / 16 * 16;
  const typename Fmt::T* wr[NW];
  for (int r = 0; r < NW; ++r)
    wr[r] = reinterpret_cast<const typename Fmt::T*>(w + static_cast<uint64_t>(r) * w_stride);
  __m512 acc[NW];
  for (int r = 0; r < NW; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < body; i += 16) {
    const __m512 xv = Fmt::load16(x + i);
    for (int r = 0; r < NW; ++r) acc[r] = _mm512_fmadd_ps(Fmt::load16(wr[r] + i), xv, acc[r]);
  }
  for (int r = 0; r < NW; ++r) {
    float s = tree16(acc[r]);
    for (int64_t i = body; i < k; ++i) s = std::fma(Fmt::one(wr[r][i]), Fmt::one(x[i]), s);
    y[r] = s;
  }
}

// Prefill tile: NW weight rows × NX activation rows over `steps` 16-element steps, row r
// of step s at wp + s·wss + r·wrs (xp likewise): packed step-major ([step][row][16] f32,
// two sequential streams) or f32 rows read in place, one 16-lane
// accumulator per output (4 × 6 = 24 of the 32 zmm registers); y gets each output's
// reduced body, the caller fma's a k % 16 tail onto it.
template <int NW, int NX>
void tile16(int64_t steps, const float* wp, int64_t wrs, int64_t wss, const float* xp, int64_t xrs,
            int64_t xss, float* y, int64_t ys, TileCarry carry) {
  __m512 acc[NW][NX];
  for (int r = 0; r < NW; ++r)
    for (int c = 0; c < NX; ++c)
      acc[r][c] = carry.load ? _mm512_loadu_ps(carry.acc + (r * NX + c) * 16) : _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    __m512 wv[NW];
    for (int r = 0; r < NW; ++r) wv[r] = _mm512_loadu_ps(wp + s * wss + r * wrs);
    for (int c = 0; c < NX; ++c) {
      const __m512 xv = _mm512_loadu_ps(xp + s * xss + c * xrs);
      for (int r = 0; r < NW; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
  if (carry.store) {  // a K block of a longer row: the lanes go on in the next call
    for (int r = 0; r < NW; ++r)
      for (int c = 0; c < NX; ++c) _mm512_storeu_ps(carry.acc + (r * NX + c) * 16, acc[r][c]);
    return;
  }
  if constexpr (NW == 4) {  // a column's four outputs are adjacent in y: reduced together
    for (int c = 0; c < NX; ++c) {
      _mm_storeu_ps(y + c * ys, tree16x4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
    }
  } else {
    for (int r = 0; r < NW; ++r)
      for (int c = 0; c < NX; ++c) y[c * ys + r] = tree16(acc[r][c]);
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                        float*, int64_t, TileCarry);
constexpr int kNW = 4;
constexpr int kNX = 6;

template <int NW, size_t... C>
constexpr std::array<TileFn, kNX> tile_row(std::index_sequence<C...>) {
  return {&tile16<NW, static_cast<int>(C) + 1>...};
}
constexpr std::array<std::array<TileFn, kNX>, kNW> kTiles = {
    tile_row<1>(std::make_index_sequence<kNX>{}), tile_row<2>(std::make_index_sequence<kNX>{}),
    tile_row<3>(std::make_index_sequence<kNX>{}), tile_row<4>(std::make_index_sequence<kNX>{})};

// n rows (stride bytes apart) of `steps` 16-element steps → [step][row][16] f32.
template <class Fmt>
void pack_rows(const uint8_t* src, uint64_t stride, int64_t n, int64_t steps, float* dst) {
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t r = 0; r < n; ++r) {
      const auto* row =
          reinterpret_cast<const typename Fmt::T*>(src + static_cast<uint64_t>(r) * stride);
      _mm512_storeu_ps(dst + (s * n + r) * 16, Fmt::load16(row + s * 16));
    }
  }
}

// This ISA's kernels for the shared drivers (float_gemm.h).
struct Kernels {
  static constexpr int kNW = ::minfer::backend::cpu::kNW;
  static constexpr int kNX = ::minfer::backend::cpu::kNX;
  static constexpr uint64_t kLoadBytes = 64;        // a zmm load: rows read in place start on these
  static constexpr int64_t kGemvShortRowBytes = 0;  // float_gemv
  static constexpr bool kWidensX = false;  // f16 / bf16 activations are packed to f32 per call
  template <class Fmt, int NW>
  static void rows(int64_t k, const uint8_t* w, uint64_t w_stride, const typename Fmt::T* x,
                   float* y) {
    gemv_rows<Fmt, NW>(k, w, w_stride, x, y);
  }
  template <class Fmt>
  static void pack(const uint8_t* src, uint64_t stride, int64_t n, int64_t steps, float* dst) {
    pack_rows<Fmt>(src, stride, n, steps, dst);
  }
  static void tile(int64_t nw, int64_t nx, int64_t steps, const float* wp, int64_t wrs, int64_t wss,
                   const float* xp, int64_t xrs, int64_t xss, float* y, int64_t ys,
                   TileCarry carry) {
    kTiles[static_cast<size_t>(nw - 1)][static_cast<size_t>(nx - 1)](steps, wp, wrs, wss, xp, xrs,
                                                                     xss, y, ys, carry);
  }
};

template <class Fmt>
void gemm16(const GemmArgs& a) {
  float_gemm<Kernels, Fmt>(a);
}

}  // namespace

IsaDot float_dot_avx512(DType t) {
  switch (t) {
    case DType::kF32:
      return {dot16<F32Fmt>, gemm16<F32Fmt>};
    case DType::kF16:
      return {dot16<F16Fmt>, gemm16<F16Fmt>};
    case DType::kBF16:
      return {dot16<BF16Fmt>, gemm16<BF16Fmt>};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
