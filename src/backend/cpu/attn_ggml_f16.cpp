// Stage 12 (kernels): llama.cpp's flash-attention f16 helpers (attn_ggml_f16.h): the
// scalar references and their x86 twins (function-level target attributes; reached
// only after cpuid).
#include "backend/cpu/attn_ggml_f16.h"

#include <cmath>

#include "core/fp16.h"

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

#if defined(__x86_64__)

bool cpu_has_avx512fp16() {
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

namespace {
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
}  // namespace

__attribute__((target("avx2,fma,f16c"))) float ggml_dot_f16_vec_avx2_fa(int64_t n,
                                                                        const uint16_t* x,
                                                                        const uint16_t* y) {
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; ++j) {
      const int64_t at = i + j * 16;
      lo[j] = _mm256_fmadd_ps(load_f16x8(x + at), load_f16x8(y + at), lo[j]);
      hi[j] = _mm256_fmadd_ps(load_f16x8(x + at + 8), load_f16x8(y + at + 8), hi[j]);
    }
  }
  // a[e] = (lane0 + lane2) + (lane1 + lane3); then a[8 + e] + a[e], 4 + 4, 2 + 2.
  const __m256 l = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
  const __m256 h = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
  const __m256 t8 = _mm256_add_ps(h, l);
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  const __m128 t2 = _mm_add_ps(t4, _mm_shuffle_ps(t4, t4, _MM_SHUFFLE(1, 0, 3, 2)));
  double sum = static_cast<double>(_mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2))));
  for (int64_t i = np; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  }
  return static_cast<float>(sum);
}

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

bool cpu_has_avx512fp16() {
  return false;
}
float ggml_dot_f16_vec_avx2_fa(int64_t, const uint16_t*, const uint16_t*) {
  return NAN;
}
void ggml_scale_f16_avx512fp16(int64_t, uint16_t*, float) {}
void ggml_mad_f16_avx512fp16(int64_t, uint16_t*, const uint16_t*, float) {}

#endif

}  // namespace minfer::backend::cpu
