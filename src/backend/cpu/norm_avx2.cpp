// Stage 12 (kernels): the norms' row sums on AVX2 (ops_norm.cpp), reached only after
// cpuid (detect_isa). Bitwise the scalar row_sums_f64_scalar (vec_dot_scalar.cpp).
#include <immintrin.h>

#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {

// Eight rows' chains side by side: an 8 × 8 block (8 elements of each row) transposed so a
// register holds one element of every row, then added lane-wise in element order, the low
// four rows in one register of doubles and the high four in another.
void row_sums_f64_avx2(const float* const* rows, int nr, int64_t n, RowSum t, const float* c,
                       double* out) {
  if (nr < 2) {
    row_sums_f64_scalar(rows, nr, n, t, c, out);
    return;
  }
  const float* p[8];
  float cr[8] = {};
  for (int r = 0; r < 8; ++r) {
    p[r] = rows[r < nr ? r : 0];  // lanes past nr repeat row 0 and are dropped
    if (t == RowSum::kCentredSquares) cr[r] = c[r < nr ? r : 0];
  }
  const __m256 centre = _mm256_loadu_ps(cr);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r0 = _mm256_loadu_ps(p[0] + i), r1 = _mm256_loadu_ps(p[1] + i);
    const __m256 r2 = _mm256_loadu_ps(p[2] + i), r3 = _mm256_loadu_ps(p[3] + i);
    const __m256 r4 = _mm256_loadu_ps(p[4] + i), r5 = _mm256_loadu_ps(p[5] + i);
    const __m256 r6 = _mm256_loadu_ps(p[6] + i), r7 = _mm256_loadu_ps(p[7] + i);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    // column j: element i + j of rows 0..7 (lane = row)
    const __m256 col[8] = {
        _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
        _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
        _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
        _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    for (const __m256 x : col) {
      __m256 v = x;
      if (t == RowSum::kCentredSquares) v = _mm256_sub_ps(v, centre);
      if (t != RowSum::kSum) v = _mm256_mul_ps(v, v);
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
  }
  double sums[8];
  _mm256_storeu_pd(sums, lo);
  _mm256_storeu_pd(sums + 4, hi);
  for (int r = 0; r < nr; ++r) {  // the tail, one by one, on the same chain
    double sum = sums[r];
    for (int64_t k = i; k < n; ++k) sum += row_sum_term(t, p[r][k], cr[r]);
    out[r] = sum;
  }
}

}  // namespace minfer::backend::cpu
