// Stage 12 (kernels): GeGLU, AVX2 twin of geglu_scalar (geglu.h): F16C rounds 8 gates
// to f16 (round to nearest even, as fp32_to_fp16), a gather reads the same f32 table,
// and the ±10 clamps are blends — the same bits as the scalar loop.
#include <immintrin.h>

#include "backend/cpu/geglu.h"

namespace minfer::backend::cpu {

void geglu_avx2(int64_t n, const float* gate, const float* up, float* y, const float* table) {
  const __m256 lo = _mm256_set1_ps(-10.0f);
  const __m256 hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 g = _mm256_loadu_ps(up + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 t = _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(h), 4);
    __m256 v = _mm256_mul_ps(t, g);
    v = _mm256_blendv_ps(v, _mm256_mul_ps(x, g), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    v = _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) geglu_scalar(n - i, gate + i, up + i, y + i, table);
}

}  // namespace minfer::backend::cpu
