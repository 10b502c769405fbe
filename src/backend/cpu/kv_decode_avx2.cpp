// Stage 12 (kernels): a quantized KV row (Q8_0 / Q4_0 blocks) decoded to f32 with AVX2
// for the attention's read; d · q per element, one rounding, so quant::dequantize's bits.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/vec_dot.h"
#include "core/fp16.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {

void q8_0_to_f32_avx2(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const quant::BlockQ8_0*>(vx);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const __m256 d = _mm256_set1_ps(fp16_to_fp32(x[b].d));
    for (int j = 0; j < 32; j += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + j));
      _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d));
    }
  }
}

void q4_0_to_f32_avx2(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const quant::BlockQ4_0*>(vx);
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const __m256 d = _mm256_set1_ps(fp16_to_fp32(x[b].d));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);  // elements 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);  // 16..31
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; ++j) {
      _mm256_storeu_ps(y + 8 * j,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[j])), d));
    }
  }
}

}  // namespace minfer::backend::cpu
