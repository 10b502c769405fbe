// Stage 12 (kernels): GeGLU, AVX2 twin of geglu_scalar (geglu.h): F16C rounds 8 gates
// to f16 (round to nearest even, as fp32_to_fp16), a gather reads the same f32 table,
// and the ±10 clamps are blends — the same bits as the scalar loop.
#include <immintrin.h>

#include "backend/cpu/geglu.h"

namespace minfer::backend::cpu {

namespace {
template <bool kUp>
void geglu_avx2_t(int64_t n, const float* gate, const float* up, float* y, const float* table) {
  const __m256 lo = _mm256_set1_ps(-10.0f);
  const __m256 hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 v = _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(h), 4);
    v = _mm256_blendv_ps(v, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    if constexpr (kUp) v = _mm256_mul_ps(v, _mm256_loadu_ps(up + i));
    v = _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) geglu_scalar(n - i, gate + i, kUp ? up + i : nullptr, y + i, table);
}
}  // namespace

void geglu_avx2(int64_t n, const float* gate, const float* up, float* y, const float* table) {
  if (up != nullptr) {
    geglu_avx2_t<true>(n, gate, up, y, table);
  } else {
    geglu_avx2_t<false>(n, gate, nullptr, y, table);
  }
}

}  // namespace minfer::backend::cpu
