// Stage 12 (kernels): llama.cpp's flash-attention f16 helpers (attn_ggml_f16.h): the
// scalar references and their x86 twins (function-level target attributes; reached
// only after cpuid).
#include "backend/cpu/attn_ggml_f16.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/vec_dot.h"
#include "core/fp16.h"

// AVX512-FP16 intrinsics in a target("avx512fp16") function need GCC 12+ or a clang
// newer than Debian 12's clang 14 (which rejects _Float16 without the global flag);
// without them the f16 twins are the scalar references and cpu_has_avx512fp16() says
// false, so the backend and the twin tests take the scalar path (the same bits).
#if defined(__x86_64__) && (!defined(__clang__) || __clang_major__ >= 16)
#define MINFER_AVX512FP16_INTRIN 1
#else
#define MINFER_AVX512FP16_INTRIN 0
#endif

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace minfer::backend::cpu {

void ggml_scale_f16_scalar(int64_t n, uint16_t* y, float v) {
  const int64_t np = n & ~(kGgmlF16Step - 1);
  const float vh = fp16_to_fp32(fp32_to_fp16(v));
  for (int64_t i = 0; i < np; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * vh);
  for (int64_t i = np; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
}

void ggml_mad_f16_scalar(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const int64_t np = n & ~(kGgmlF16Step - 1);
  const uint16_t vh = fp32_to_fp16(v);
  for (int64_t i = 0; i < np; ++i) y[i] = fma_f16_exact(x[i], vh, y[i]);
  for (int64_t i = np; i < n; ++i) {
    y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
  }
}

void ggml_scale_f16_f32arith_scalar(int64_t n, uint16_t* y, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
}

void ggml_mad_f16_f32arith_scalar(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
  }
}

namespace {
// _mm512_reduce_add_ps's tree over 16 lanes: 8 + 8, 4 + 4, then (0 + 2) + (1 + 3).
float reduce16_tree(const float* x) {
  float a[8], b[4];
  for (int e = 0; e < 8; ++e) a[e] = x[8 + e] + x[e];
  for (int e = 0; e < 4; ++e) b[e] = a[4 + e] + a[e];
  return (b[0] + b[2]) + (b[1] + b[3]);
}
// ggml_vec_soft_max_f32's AVX2 tree over 8 lanes: 4 + 4, then (0 + 2) + (1 + 3).
float reduce8_tree(const float* x) {
  return (((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7])));
}
}  // namespace

void ggml_fa_tiled_row(int64_t hd, int64_t hd_v, const float* q, const uint16_t* k,
                       int64_t k_stride, const uint16_t* v, int64_t v_stride, const int32_t* cells,
                       int64_t n_cells, float scale, float* acc, float* out, bool lanes8) {
  float kq[kGgmlFaTileCells];
  std::fill(acc, acc + hd_v, 0.0f);
  float m = -INFINITY;
  float s = 0.0f;
  int64_t i = 0;
  while (i < n_cells) {
    const int64_t tile = cells[i] / kGgmlFaTileCells;
    int64_t j = i;
    while (j < n_cells && cells[j] / kGgmlFaTileCells == tile) ++j;
    std::fill(kq, kq + kGgmlFaTileCells, -INFINITY);  // masked and padded cells
    float tile_max = -INFINITY;
    for (int64_t c = i; c < j; ++c) {
      const uint16_t* kr = k + cells[c] * k_stride;
      float d = 0.0f;
      for (int64_t e = 0; e < hd; ++e) d = std::fma(fp16_to_fp32(kr[e]), q[e], d);
      d *= scale;
      kq[cells[c] % kGgmlFaTileCells] = d;
      tile_max = std::max(tile_max, d);
    }
    if (tile_max != -INFINITY) {
      const float mnew = std::fmax(m, tile_max);
      if (mnew > m) {
        const float ms = std::exp(m - mnew);
        for (int64_t e = 0; e < hd_v; ++e) acc[e] *= ms;
        s *= ms;
      }
      m = mnew;
      double sum = 0.0;
      if (lanes8) {
        for (int g = 0; g < static_cast<int>(kGgmlFaTileCells); g += 8) {
          for (int l = 0; l < 8; ++l) kq[g + l] = ggml_v_expf8_lane(kq[g + l] - mnew);
          sum += static_cast<double>(reduce8_tree(kq + g));
        }
      } else {
        for (int g = 0; g < static_cast<int>(kGgmlFaTileCells); g += 16) {
          for (int l = 0; l < 16; ++l) kq[g + l] = ggml_v_expf_lane(kq[g + l] - mnew);
          sum += static_cast<double>(reduce16_tree(kq + g));
        }
      }
      s = static_cast<float>(static_cast<double>(s) + sum);
      for (int64_t c = i; c < j; ++c) {
        const uint16_t* vr = v + cells[c] * v_stride;
        const float p = kq[cells[c] % kGgmlFaTileCells];
        for (int64_t e = 0; e < hd_v; ++e) acc[e] = std::fma(fp16_to_fp32(vr[e]), p, acc[e]);
      }
    }
    i = j;
  }
  const float inv = s == 0.0f ? 0.0f : 1.0f / s;
  for (int64_t e = 0; e < hd_v; ++e) out[e] = acc[e] * inv;
}

#if defined(__x86_64__)

bool cpu_has_avx512fp16() {
  if (!MINFER_AVX512FP16_INTRIN) return false;  // the twins are not compiled in
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool isa = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) &&  // F, BW, VL
                   (d & (1u << 23));                                            // FP16
  if (!isa) return false;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (!__get_cpuid(1, &a1, &b1, &c1, &d1) || !(c1 & (1u << 27))) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6u) == 0xe6u;  // XMM, YMM, opmask, ZMM state
}

// ggml_dot_f16_vec_avx2_fa is ggml_vec_dot_f16's AVX2 form itself: vec_dot_avx2.cpp.

__attribute__((target("avx2,fma,f16c"))) void ggml_scale_f16_f32arith_avx2(int64_t n, uint16_t* y,
                                                                           float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto* p = reinterpret_cast<__m128i*>(y + i);
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(p));
    _mm_storeu_si128(p, _mm256_cvtps_ph(_mm256_mul_ps(a, vv), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
}

__attribute__((target("avx2,fma,f16c"))) void ggml_mad_f16_f32arith_avx2(int64_t n, uint16_t* y,
                                                                         const uint16_t* x,
                                                                         float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto* p = reinterpret_cast<__m128i*>(y + i);
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(p));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm_storeu_si128(p, _mm256_cvtps_ph(_mm256_fmadd_ps(b, vv, a), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
}

#if MINFER_AVX512FP16_INTRIN
__attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16"))) void ggml_scale_f16_avx512fp16(
    int64_t n, uint16_t* y, float v) {
  const int64_t np = n & ~(kGgmlF16Step - 1);
  const __m512h vh = _mm512_set1_ph(static_cast<_Float16>(v));
  for (int64_t i = 0; i < np; i += 32) {
    _mm512_storeu_ph(y + i, _mm512_mul_ph(_mm512_loadu_ph(y + i), vh));
  }
  for (int64_t i = np; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16"))) void ggml_mad_f16_avx512fp16(
    int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const int64_t np = n & ~(kGgmlF16Step - 1);
  const __m512h vh = _mm512_set1_ph(static_cast<_Float16>(v));
  for (int64_t i = 0; i < np; i += 32) {
    _mm512_storeu_ph(y + i, _mm512_fmadd_ph(_mm512_loadu_ph(x + i), vh, _mm512_loadu_ph(y + i)));
  }
  for (int64_t i = np; i < n; ++i) {
    y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
  }
}

#else
void ggml_scale_f16_avx512fp16(int64_t n, uint16_t* y, float v) {
  ggml_scale_f16_scalar(n, y, v);
}
void ggml_mad_f16_avx512fp16(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  ggml_mad_f16_scalar(n, y, x, v);
}
#endif

#else

bool cpu_has_avx512fp16() {
  return false;
}
float ggml_dot_f16_vec_avx2_fa(int64_t, const uint16_t*, const uint16_t*) {
  return NAN;
}
void ggml_scale_f16_avx512fp16(int64_t, uint16_t*, float) {}
void ggml_mad_f16_avx512fp16(int64_t, uint16_t*, const uint16_t*, float) {}
void ggml_scale_f16_f32arith_avx2(int64_t n, uint16_t* y, float v) {
  ggml_scale_f16_f32arith_scalar(n, y, v);
}
void ggml_mad_f16_f32arith_avx2(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  ggml_mad_f16_f32arith_scalar(n, y, x, v);
}

#endif

}  // namespace minfer::backend::cpu
