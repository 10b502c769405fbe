// Stage 12 (kernels): AVX2 F32 / F16 / BF16 weight dots, their decode GEMV and their
// register-blocked prefill GEMM (compiled with -mavx2 -mfma -mf16c; reached only after
// cpuid). Invariant (ARCHITECTURE §6, "float weights: 16 FMA lanes"): the 16 lanes of the
// scalar reference's lanes16_fma_dot carried in two registers (lanes 0–7 and 8–15), each
// fma'd in element order, added lane by lane, reduced ((0+4)+(2+6))+((1+5)+(3+7)), the
// n % 16 tail fma'd on in order — the AVX-512 kernels' bits, and the reference's, in
// every kernel (dot, GEMV, GEMM tile), so prefill equals decode bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/cpu/float_gemm.h"
#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {
namespace {

inline float tree16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Element formats: 8 elements widened to f32 (exact), one element.
struct F32Fmt {
  using T = float;
  static constexpr bool kInPlace = true;  // the GEMM reads f32 weight rows unpacked
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(float v) { return v; }
};
struct F16Fmt {
  using T = uint16_t;
  static constexpr bool kInPlace = false;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float one(uint16_t v) { return _cvtsh_ss(v); }
};
struct BF16Fmt {
  using T = uint16_t;
  static constexpr bool kInPlace = false;
  static __m256 load8(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float one(uint16_t v) {
    const uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// NW weight rows against one activation row (the single dot is NW = 1).
template <class Fmt, int NW>
void gemv_rows(int64_t k, const uint8_t* w, uint64_t w_stride, const typename Fmt::T* x, float* y) {
  const int64_t body = k / 16 * 16;
  const typename Fmt::T* wr[NW];
  for (int r = 0; r < NW; ++r)
    wr[r] = reinterpret_cast<const typename Fmt::T*>(w + static_cast<uint64_t>(r) * w_stride);
  __m256 lo[NW], hi[NW];
  for (int r = 0; r < NW; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < body; i += 16) {
    const __m256 xl = Fmt::load8(x + i);
    const __m256 xh = Fmt::load8(x + i + 8);
    for (int r = 0; r < NW; ++r) {
      lo[r] = _mm256_fmadd_ps(Fmt::load8(wr[r] + i), xl, lo[r]);
      hi[r] = _mm256_fmadd_ps(Fmt::load8(wr[r] + i + 8), xh, hi[r]);
    }
  }
  for (int r = 0; r < NW; ++r) {
    float s = tree16(lo[r], hi[r]);
    for (int64_t i = body; i < k; ++i) s = std::fma(Fmt::one(wr[r][i]), Fmt::one(x[i]), s);
    y[r] = s;
  }
}

template <class Fmt>
float dot16(int64_t n, const void* w, const void* x) {
  float y = 0.0f;
  gemv_rows<Fmt, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const typename Fmt::T*>(x),
                    &y);
  return y;
}

// A loaded vector kept in a register: the compiler otherwise folds the load into each fma
// that reads it (one load per use, which makes the tile load-bound).
inline __m256 in_register(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// Prefill tile: NW weight rows × NX activation rows over `steps` 16-element steps, row r
// of step s at wp + s·wss + r·wrs (xp likewise, in elements of XFmt): weights packed
// step-major ([step][row][16] f32, a sequential stream) or f32 rows read in place;
// activations f32 (packed or in place) or f16 / bf16 rows read in place and widened as
// loaded (exact), so a call never packs them. Two accumulators per output (2 × 3 × 2 = 12
// of the 16 ymm registers); y gets each output's reduced body, the caller fma's a k % 16
// tail onto it.
template <class XFmt, int NW, int NX>
void tile16(int64_t steps, const float* wp, int64_t wrs, int64_t wss, const typename XFmt::T* xp,
            int64_t xrs, int64_t xss, float* y, int64_t ys, TileCarry carry) {
  __m256 lo[NW][NX], hi[NW][NX];
  for (int r = 0; r < NW; ++r)
    for (int c = 0; c < NX; ++c) {
      lo[r][c] = hi[r][c] = _mm256_setzero_ps();
      if (carry.load) {
        lo[r][c] = _mm256_loadu_ps(carry.acc + (r * NX + c) * 16);
        hi[r][c] = _mm256_loadu_ps(carry.acc + (r * NX + c) * 16 + 8);
      }
    }
  // Each half step (lanes 0-7, then 8-15) loads the NX activation vectors once and each
  // weight vector once: NX + NW loads for NW x NX fmas (12 accumulators, NX + 1 more
  // registers), where a whole 16-element step per weight row reloads every activation.
  for (int64_t s = 0; s < steps; ++s) {
    __m256 xv[NX];
    for (int c = 0; c < NX; ++c) xv[c] = in_register(XFmt::load8(xp + s * xss + c * xrs));
    for (int r = 0; r < NW; ++r) {
      const __m256 wl = in_register(_mm256_loadu_ps(wp + s * wss + r * wrs));
      for (int c = 0; c < NX; ++c) lo[r][c] = _mm256_fmadd_ps(wl, xv[c], lo[r][c]);
    }
    for (int c = 0; c < NX; ++c) xv[c] = in_register(XFmt::load8(xp + s * xss + c * xrs + 8));
    for (int r = 0; r < NW; ++r) {
      const __m256 wh = in_register(_mm256_loadu_ps(wp + s * wss + r * wrs + 8));
      for (int c = 0; c < NX; ++c) hi[r][c] = _mm256_fmadd_ps(wh, xv[c], hi[r][c]);
    }
  }
  if (carry.store) {  // a K block of a longer row: the lanes go on in the next call
    for (int r = 0; r < NW; ++r)
      for (int c = 0; c < NX; ++c) {
        _mm256_storeu_ps(carry.acc + (r * NX + c) * 16, lo[r][c]);
        _mm256_storeu_ps(carry.acc + (r * NX + c) * 16 + 8, hi[r][c]);
      }
    return;
  }
  for (int r = 0; r < NW; ++r)
    for (int c = 0; c < NX; ++c) y[c * ys + r] = tree16(lo[r][c], hi[r][c]);
}

template <class XFmt>
using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const typename XFmt::T*, int64_t,
                        int64_t, float*, int64_t, TileCarry);
constexpr int kNW = 2;
constexpr int kNX = 3;
template <class XFmt>
constexpr std::array<std::array<TileFn<XFmt>, kNX>, kNW> kTiles = {{
    {&tile16<XFmt, 1, 1>, &tile16<XFmt, 1, 2>, &tile16<XFmt, 1, 3>},
    {&tile16<XFmt, 2, 1>, &tile16<XFmt, 2, 2>, &tile16<XFmt, 2, 3>},
}};

// n rows (stride bytes apart) of `steps` 16-element steps → [step][row][16] f32.
template <class Fmt>
void pack_rows(const uint8_t* src, uint64_t stride, int64_t n, int64_t steps, float* dst) {
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t r = 0; r < n; ++r) {
      const auto* row =
          reinterpret_cast<const typename Fmt::T*>(src + static_cast<uint64_t>(r) * stride);
      _mm256_storeu_ps(dst + (s * n + r) * 16, Fmt::load8(row + s * 16));
      _mm256_storeu_ps(dst + (s * n + r) * 16 + 8, Fmt::load8(row + s * 16 + 8));
    }
  }
}

// This ISA's kernels for the shared drivers (float_gemm.h).
struct Kernels {
  static constexpr int kNW = ::minfer::backend::cpu::kNW;
  static constexpr int kNX = ::minfer::backend::cpu::kNX;
  static constexpr uint64_t kLoadBytes = 32;  // a ymm load: rows read in place start on these
  template <class Fmt, int NW>
  static void rows(int64_t k, const uint8_t* w, uint64_t w_stride, const typename Fmt::T* x,
                   float* y) {
    gemv_rows<Fmt, NW>(k, w, w_stride, x, y);
  }
  template <class Fmt>
  static void pack(const uint8_t* src, uint64_t stride, int64_t n, int64_t steps, float* dst) {
    pack_rows<Fmt>(src, stride, n, steps, dst);
  }
  // f16 / bf16 activation rows are read in place by the tiles (tile_narrow).
  static constexpr int64_t kGemvShortRowBytes = 4096;  // float_gemv
  static constexpr bool kWidensX = true;
  static void tile(int64_t nw, int64_t nx, int64_t steps, const float* wp, int64_t wrs, int64_t wss,
                   const float* xp, int64_t xrs, int64_t xss, float* y, int64_t ys,
                   TileCarry carry) {
    kTiles<F32Fmt>[static_cast<size_t>(nw - 1)][static_cast<size_t>(nx - 1)](
        steps, wp, wrs, wss, xp, xrs, xss, y, ys, carry);
  }
  template <class Fmt>
  static void tile_narrow(int64_t nw, int64_t nx, int64_t steps, const float* wp, int64_t wrs,
                          int64_t wss, const typename Fmt::T* xp, int64_t xrs, int64_t xss,
                          float* y, int64_t ys, TileCarry carry) {
    kTiles<Fmt>[static_cast<size_t>(nw - 1)][static_cast<size_t>(nx - 1)](steps, wp, wrs, wss, xp,
                                                                          xrs, xss, y, ys, carry);
  }
};

template <class Fmt>
void gemm16(const GemmArgs& a) {
  float_gemm<Kernels, Fmt>(a);
}

}  // namespace

// F16C's round-to-nearest-even conversion: the scalar converter's bits for every
// non-NaN input (both are IEEE rounding); a group of 8 holding a NaN goes through the
// scalar form, which writes the canonical quiet NaN where F16C would keep the payload.
void from_f32_f16_avx2(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      from_f32_f16(x + i, y + i, 8);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (i < n) from_f32_f16(x + i, y + i, n - i);
}

IsaDot float_dot_avx2(DType t) {
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
