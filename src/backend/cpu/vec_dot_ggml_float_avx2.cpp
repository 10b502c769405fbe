// Stage 12 (kernels): llama.cpp's F16 / F32 weight orders on x86, as AVX2 code (compiled
// with -mavx2 -mfma -mf16c; reached only after cpuid, under --numerics llamacpp and for the
// f16 Q·K of its flash attention): ggml_vec_dot_f16 / _f32 on its AVX-512 and AVX2 builds,
// and llamafile's tinyBLAS outputs. Each equals its portable scalar emulation bit for bit
// (tests/backend/mul_mat_test.cpp).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/attn_ggml_f16.h"
#include "backend/cpu/vec_dot.h"
#include "core/fp16.h"

namespace minfer::backend::cpu {
namespace {

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// _mm512_reduce_add_ps of the 16 lanes (lo = 0..7, hi = 8..15): 8, 4, then 2 + 2.
inline float reduce16(__m256 lo, __m256 hi) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

// ggml's 4 × 16-lane FMA body over steps of 64 (ggml_vec_dot_f16 / _f32 on AVX-512): the
// lanes folded 0+2, 1+3, then 0+1 and reduced as _mm512_reduce_add_ps. T is the element
// type (f16 widened exactly, or f32); the n % 64 tail is the caller's.
template <typename T>
inline __m256 load8(const T* p) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return load_f16x8(p);
  } else {
    return _mm256_loadu_ps(p);
  }
}

template <typename T>
float ggml_vec_body64(int64_t np, const T* w, const T* x) {
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; ++j) {
      const int64_t at = i + j * 16;
      lo[j] = _mm256_fmadd_ps(load8(w + at), load8(x + at), lo[j]);
      hi[j] = _mm256_fmadd_ps(load8(w + at + 8), load8(x + at + 8), hi[j]);
    }
  }
  const __m256 l = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
  const __m256 h = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
  return reduce16(l, h);
}

// ggml's 4 × 8-lane FMA body over steps of 32 (ggml_vec_dot_f16 / _f32 on its AVX2
// build), reduced as GGML_F32x8_REDUCE: 0+2, 1+3, then 0+1, the two halves added, two
// _mm_hadd_ps. T is the element type (f16 widened exactly, or f32); the n % 32 tail is the
// caller's.
template <typename T>
float ggml_vec_body32(int64_t np, const T* w, const T* x) {
  __m256 sum[4];
  for (int j = 0; j < 4; ++j) sum[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += 32) {
    for (int j = 0; j < 4; ++j) {
      sum[j] = _mm256_fmadd_ps(load8(w + i + 8 * j), load8(x + i + 8 * j), sum[j]);
    }
  }
  const __m256 a = _mm256_add_ps(_mm256_add_ps(sum[0], sum[2]), _mm256_add_ps(sum[1], sum[3]));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// llamafile's tinyBLAS output: one 16-lane FMA accumulator over steps of 16 (n % 16 == 0),
// then _mm512_reduce_add_ps.
template <typename T>
float tinyblas_dot16(int64_t n, const T* w, const T* x) {
  __m256 lo = _mm256_setzero_ps();
  __m256 hi = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    lo = _mm256_fmadd_ps(load8(w + i), load8(x + i), lo);
    hi = _mm256_fmadd_ps(load8(w + i + 8), load8(x + i + 8), hi);
  }
  return reduce16(lo, hi);
}

template <typename T>
float tinyblas_dot8(int64_t n, const T* w, const T* x) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load8(w + i), load8(x + i), acc);
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

}  // namespace

float dot_f16_f16_ggml_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const uint16_t*>(vw);
  const auto* x = static_cast<const uint16_t*>(vx);
  const int64_t np = n & ~int64_t{63};
  double sum = static_cast<double>(ggml_vec_body64(np, w, x));
  for (int64_t i = np; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(w[i]) * fp16_to_fp32(x[i]));
  }
  return static_cast<float>(sum);
}

float dot_f16_f16_sgemm_avx2(int64_t n, const void* vw, const void* vx) {
  if (n % 16 != 0) return dot_f16_f16_ggml_avx2(n, vw, vx);  // tinyBLAS declines: GEMV
  return tinyblas_dot16(n, static_cast<const uint16_t*>(vw), static_cast<const uint16_t*>(vx));
}

// llama.cpp's F32 weight matmul (ggml-cpu mul_mat on its AVX-512 build): one activation
// row goes through ggml_vec_dot_f32 — four 16-lane FMA accumulators over steps of 64,
// folded 0+2, 1+3, then 0+1, _mm512_reduce_add_ps, the tail added one fused product at a
// time (GCC contracts `sumf += x[i]*y[i]`) in f32 —, two or more through llamafile's
// tinyBLAS: one 16-lane FMA accumulator per output over steps of 16, then
// _mm512_reduce_add_ps; tinyBLAS declines a row length that 16 does not divide.
float dot_f32_f32_ggml_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const float*>(vw);
  const auto* x = static_cast<const float*>(vx);
  const int64_t np = n & ~int64_t{63};
  float sum = ggml_vec_body64(np, w, x);
  for (int64_t i = np; i < n; ++i) sum = std::fma(w[i], x[i], sum);
  return sum;
}

float dot_f32_f32_sgemm_avx2(int64_t n, const void* vw, const void* vx) {
  if (n % 16 != 0) return dot_f32_f32_ggml_avx2(n, vw, vx);  // tinyBLAS declines: GEMV
  return tinyblas_dot16(n, static_cast<const float*>(vw), static_cast<const float*>(vx));
}

// The same two on llama.cpp's AVX2 build (no AVX-512): ggml_vec_dot_f32 as four 8-lane
// accumulators over steps of 32 (GGML_F32x8_REDUCE, the tail fused into the f32 sum one
// product at a time); tinyBLAS<8> one 8-lane accumulator per output over steps of 8,
// reduced by llamafile's hsum — the halves added, then (0+2) + (1+3) — and declining a row
// length that 8 does not divide. The f16 GEMV is ggml_dot_f16_vec8_avx2.
float dot_f32_f32_ggml8_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const float*>(vw);
  const auto* x = static_cast<const float*>(vx);
  const int64_t np = n & ~int64_t{31};
  float sum = ggml_vec_body32(np, w, x);
  for (int64_t i = np; i < n; ++i) sum = std::fma(w[i], x[i], sum);
  return sum;
}

float dot_f32_f32_sgemm8_avx2(int64_t n, const void* vw, const void* vx) {
  if (n % 8 != 0) return dot_f32_f32_ggml8_avx2(n, vw, vx);  // tinyBLAS declines: GEMV
  return tinyblas_dot8(n, static_cast<const float*>(vw), static_cast<const float*>(vx));
}

float dot_f16_f16_sgemm8_avx2(int64_t n, const void* vw, const void* vx) {
  if (n % 8 != 0) return dot_f16_f16_ggml8_avx2(n, vw, vx);  // tinyBLAS declines: GEMV
  return tinyblas_dot8(n, static_cast<const uint16_t*>(vw), static_cast<const uint16_t*>(vx));
}

float ggml_dot_f16_vec8_avx2(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~int64_t{31};
  double s = static_cast<double>(ggml_vec_body32(np, x, y));
  for (int64_t i = np; i < n; ++i)
    s += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return static_cast<float>(s);
}

float dot_f16_f16_ggml8_avx2(int64_t n, const void* vw, const void* vx) {
  return ggml_dot_f16_vec8_avx2(n, static_cast<const uint16_t*>(vw),
                                static_cast<const uint16_t*>(vx));
}
// The Q·K dot of llama.cpp's flash attention (attn_ggml_f16.h) is ggml_vec_dot_f16, the
// same lanes and tree as the f16 GEMV above (x · y = y · x exactly in f32).
float ggml_dot_f16_vec_avx2_fa(int64_t n, const uint16_t* x, const uint16_t* y) {
  return dot_f16_f16_ggml_avx2(n, x, y);
}

}  // namespace minfer::backend::cpu
