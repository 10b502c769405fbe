// Stage 12 (kernels): AVX2 + FMA + F16C dot products (this file alone is compiled with
// -mavx2 -mfma -mf16c; callers reach it only after cpuid said yes, once, at startup).
// Invariants, per kernel, against the scalar twin (tests/backend/mul_mat_test.cpp):
//  - Q6_K: vec_dot_avx2_q6k.cpp.
//  - attention's F32 dot: 8 lanes, mul then add (no FMA), the scalar twin's tree →
//    bitwise (the F32 / F16 / BF16 weight dots: vec_dot_float_avx2.cpp). (Q2_K-Q5_K,
//    Q5_0, Q5_1: vec_dot_avx2_exact.cpp, bitwise too.)
//  - Q4_0, Q4_1, Q8_0: 8 float lanes with FMA per block (ggml-cpu's x86 shape) instead
//    of one scalar sum per block → equal within a named tolerance (float reassociation).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/attn_ggml_f16.h"
#include "backend/cpu/expf_glibc.h"
#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "backend/cpu/x86_simd.h"
#include "core/check.h"
#include "core/fp16.h"

namespace minfer::backend::cpu {
namespace {

using x86::h2f;
using x86::hsum_f32x8;
using x86::load256;

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

// 16 packed bytes → 32 bytes: low nibbles in the low lane, high nibbles in the high.
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// Σ pairs of u8·s8 → 8 int32 → float.
inline __m256 dot_us8_f32(__m256i u, __m256i s) {
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// Σ pairs of s8·s8 (sign moved onto the second operand, as maddubs needs u8 first).
inline __m256 dot_ss8_f32(__m256i a, __m256i b) {
  return dot_us8_f32(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// ggml's x86 order for Q4_0, Q4_1 and Q8_0 (--numerics llamacpp, avx2_ggml_dot): 8 f32
// lanes, an fma per block of the block's integer lanes scaled by d_w·d_x, one horizontal
// sum at the end (Q4_1's m·s terms summed apart and added last). The default numerics
// take the scalar reference's order instead (avx2_ref_legacy_dot).
float dot_q4_0_q8_0_lanes_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    const __m256i qw = _mm256_sub_epi8(unpack_nibbles(w[ib].qs), _mm256_set1_epi8(8));
    acc = _mm256_fmadd_ps(d, dot_ss8_f32(qw, load256(x[ib].qs)), acc);
  }
  return hsum_f32x8(acc);
}

float dot_q4_1_q8_1_lanes_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    summs += h2f(w[ib].m) * h2f(x[ib].s);
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    acc = _mm256_fmadd_ps(d, dot_us8_f32(unpack_nibbles(w[ib].qs), load256(x[ib].qs)), acc);
  }
  return hsum_f32x8(acc) + summs;
}

float dot_q8_0_q8_0_lanes_avx2(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const __m256 d = _mm256_set1_ps(h2f(w[ib].d) * h2f(x[ib].d));
    acc = _mm256_fmadd_ps(d, dot_ss8_f32(load256(w[ib].qs), load256(x[ib].qs)), acc);
  }
  return hsum_f32x8(acc);
}

// The register-blocked form of the three lane-order dots above (DotKernel::gemm): kR weight rows ×
// kC activation rows per pass over the blocks, each output with its own 8-lane
// accumulator taking its dot's operations in its dot's order — the same integer lanes, the
// same scale product, the same fma — so every output equals its vec_dot call bit for bit
// (decode and prefill alike, invariant 8). One dot is a chain of dependent FMAs; kR × kC
// of them side by side keep the FMA units busy and reuse each decoded weight block across
// kC activation rows. Batches only (gemv_rows_max 0): one decode row takes vec_dot, tile by
// tile, with mul_mat's prefetch (4 rows side by side measured slower there).
struct Q4_0Gemm {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr bool kMin = false;
  static __m256i codes(const WB& b) {
    return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8));
  }
  static __m256 lanes(__m256i qw, const XB& x) { return dot_ss8_f32(qw, load256(x.qs)); }
  static float min_term(const WB&, const XB&) { return 0.0f; }
};
struct Q8_0Gemm {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr bool kMin = false;
  static __m256i codes(const WB& b) { return load256(b.qs); }
  static __m256 lanes(__m256i qw, const XB& x) { return dot_ss8_f32(qw, load256(x.qs)); }
  static float min_term(const WB&, const XB&) { return 0.0f; }
};
struct Q4_1Gemm {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr bool kMin = true;
  static __m256i codes(const WB& b) { return unpack_nibbles(b.qs); }
  static __m256 lanes(__m256i qw, const XB& x) { return dot_us8_f32(qw, load256(x.qs)); }
  static float min_term(const WB& w, const XB& x) { return h2f(w.m) * h2f(x.s); }
};

template <class P, int kR, int kC>
void gemm_tile_avx2(int64_t nb, const typename P::WB* const* w, const typename P::XB* const* x,
                    int nr, int nc, float* const* y) {
  __m256 acc[kR][kC];
  float mins[kR][kC];
  for (int r = 0; r < kR; ++r) {
    for (int c = 0; c < kC; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      mins[r][c] = 0.0f;
    }
  }
  for (int64_t ib = 0; ib < nb; ++ib) {
    for (int r = 0; r < kR; ++r) {
      if (r >= nr) break;
      const typename P::WB& wb = w[r][ib];
      const __m256i qw = P::codes(wb);
      const float dw = h2f(wb.d);
      for (int c = 0; c < kC; ++c) {
        if (c >= nc) break;
        const typename P::XB& xb = x[c][ib];
        if constexpr (P::kMin) mins[r][c] += P::min_term(wb, xb);
        const __m256 d = _mm256_set1_ps(dw * h2f(xb.d));
        acc[r][c] = _mm256_fmadd_ps(d, P::lanes(qw, xb), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < nr; ++r) {
    for (int c = 0; c < nc; ++c) {
      y[c][r] = P::kMin ? hsum_f32x8(acc[r][c]) + mins[r][c] : hsum_f32x8(acc[r][c]);
    }
  }
}

template <class P>
void gemm_rows_avx2(const GemmArgs& a) {
  constexpr int kR = 4;
  constexpr int kC = 2;
  const int64_t nb = a.k / kQK;
  register_tiles<typename P::WB, typename P::XB, kR, kC>(
      a, [nb](const typename P::WB* const* ws, const typename P::XB* const* xs, int nr, int nc,
              float* const* ys) {
        if (nr == kR && nc == kC) {
          gemm_tile_avx2<P, kR, kC>(nb, ws, xs, kR, kC, ys);
        } else {
          gemm_tile_avx2<P, kR, kC>(nb, ws, xs, nr, nc, ys);
        }
      });
}

}  // namespace

float dot_f32_avx2(int64_t n, const float* a, const float* b) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  float s = hsum_f32x8(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

namespace {
// glibc's expf (expf_glibc.h) four lanes at a time, in double.
inline __m256d bits_pd(uint64_t b) {
  return _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(b)));
}

inline __m128 expf4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d inv = bits_pd(glibc_expf::kInvLn2N);
  const __m256d shift = bits_pd(glibc_expf::kShift);
  __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, shift);
  const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
  __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(glibc_expf::kTab),
                                     _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
  const __m256d c =
      _mm256_fmadd_pd(bits_pd(glibc_expf::kPoly[0]), r, bits_pd(glibc_expf::kPoly[1]));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(bits_pd(glibc_expf::kPoly[2]), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(c, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}
}  // namespace

void attn_exp_f32_avx2(int64_t n, const float* s, float m, float* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 vm = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(s + i), vm);
    // glibc's special range: |x| >= 88 (overflow, underflow, ±inf) or NaN
    const int special = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), _mm256_set1_ps(88.0f), _CMP_NLT_UQ));
    const __m256 e =
        _mm256_set_m128(expf4(_mm256_extractf128_ps(v, 1)), expf4(_mm256_castps256_ps128(v)));
    if (special == 0) {
      _mm256_storeu_ps(out + i, e);
      continue;
    }
    alignas(32) float in[8], res[8];
    _mm256_store_ps(in, v);
    _mm256_store_ps(res, e);
    for (int j = 0; j < 8; ++j) out[i + j] = (special >> j & 1) != 0 ? std::exp(in[j]) : res[j];
  }
  for (; i < n; ++i) out[i] = std::exp(s[i] - m);
}

void axpy_f32_avx2(int64_t n, float a, const float* x, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(
        y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  }
  for (; i < n; ++i) y[i] = y[i] + a * x[i];
}

namespace {
// hsum_f32x8 of eight accumulators at once (each add pairs the same operands in the same
// operand order, so the same bits): lane j = hsum_f32x8(a[j]).
inline __m256 hsum_f32x8x8(const __m256* a) {
  __m256 p[4];
  for (int i = 0; i < 4; ++i) {  // lanes j + (j+4): [a(2i) | a(2i+1)]
    p[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
  }
  // s0 + s2, s1 + s3: [a0 a0 a2 a2 | a1 a1 a3 a3] and [a4 a4 a6 a6 | a5 a5 a7 a7]
  const __m256 q0 = _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 q1 = _mm256_add_ps(_mm256_shuffle_ps(p[2], p[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(p[2], p[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // (s0 + s2) + (s1 + s3): [a0 a2 a4 a6 | a1 a3 a5 a7]
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(q0, q1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(q0, q1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
}  // namespace

void attn_scores_f32_avx2(int64_t n_cells, int64_t hd, const float* q, const float* k,
                          int64_t k_stride, float scale, float* out) {
  const int64_t body = hd / 8 * 8;
  int64_t c = 0;
  for (; c + 8 <= n_cells; c += 8) {  // eight cells in flight, reduced together
    const float* kc = k + c * k_stride;
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < body; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      for (int j = 0; j < 8; ++j) {
        a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(qv, _mm256_loadu_ps(kc + j * k_stride + i)));
      }
    }
    const __m256 sums = hsum_f32x8x8(a);
    if (body == hd) {
      _mm256_storeu_ps(out + c, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
      continue;
    }
    alignas(32) float s[8];
    _mm256_store_ps(s, sums);
    for (int j = 0; j < 8; ++j) {
      const float* kr = kc + j * k_stride;
      for (int64_t i = body; i < hd; ++i) s[j] += q[i] * kr[i];
      out[c + j] = s[j] * scale;
    }
  }
  for (; c + 4 <= n_cells; c += 4) {  // four cells in flight, each dot_f32_avx2's order
    const float* k0 = k + c * k_stride;
    const float* k1 = k0 + k_stride;
    const float* k2 = k1 + k_stride;
    const float* k3 = k2 + k_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < body; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, _mm256_loadu_ps(k0 + i)));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, _mm256_loadu_ps(k1 + i)));
      a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, _mm256_loadu_ps(k2 + i)));
      a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, _mm256_loadu_ps(k3 + i)));
    }
    float s0 = hsum_f32x8(a0), s1 = hsum_f32x8(a1), s2 = hsum_f32x8(a2), s3 = hsum_f32x8(a3);
    for (int64_t i = body; i < hd; ++i) {
      s0 += q[i] * k0[i];
      s1 += q[i] * k1[i];
      s2 += q[i] * k2[i];
      s3 += q[i] * k3[i];
    }
    out[c] = s0 * scale;
    out[c + 1] = s1 * scale;
    out[c + 2] = s2 * scale;
    out[c + 3] = s3 * scale;
  }
  for (; c < n_cells; ++c) out[c] = dot_f32_avx2(hd, q, k + c * k_stride) * scale;
}

namespace {
// kRegs·8 elements of y in registers across the cells (y = y + p·v per element in cell
// order, as axpy_f32_avx2).
template <int kRegs>
void axpy_rows_block(int64_t n_cells, const float* p, const float* v, int64_t v_stride, float* y) {
  __m256 acc[kRegs];
  for (int r = 0; r < kRegs; ++r) acc[r] = _mm256_loadu_ps(y + 8 * r);
  for (int64_t c = 0; c < n_cells; ++c) {
    const __m256 pc = _mm256_set1_ps(p[c]);
    const float* vc = v + c * v_stride;
    for (int r = 0; r < kRegs; ++r) {
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(pc, _mm256_loadu_ps(vc + 8 * r)));
    }
  }
  for (int r = 0; r < kRegs; ++r) _mm256_storeu_ps(y + 8 * r, acc[r]);
}
}  // namespace

void attn_axpy_rows_f32_avx2(int64_t n_cells, int64_t n, const float* p, const float* v,
                             int64_t v_stride, float* y) {
  int64_t i0 = 0;
  for (; i0 + 64 <= n; i0 += 64) axpy_rows_block<8>(n_cells, p, v + i0, v_stride, y + i0);
  // Head sizes under 64 (an encoder's 32) or a remainder: narrower register blocks.
  if (i0 + 32 <= n) {
    axpy_rows_block<4>(n_cells, p, v + i0, v_stride, y + i0);
    i0 += 32;
  }
  if (i0 + 16 <= n) {
    axpy_rows_block<2>(n_cells, p, v + i0, v_stride, y + i0);
    i0 += 16;
  }
  if (i0 + 8 <= n) {
    axpy_rows_block<1>(n_cells, p, v + i0, v_stride, y + i0);
    i0 += 8;
  }
  if (i0 < n) {  // the rest: per cell, as axpy_f32_avx2 (same per-element expression)
    for (int64_t c = 0; c < n_cells; ++c)
      axpy_f32_avx2(n - i0, p[c], v + c * v_stride + i0, y + i0);
  }
}

namespace {

// One block of 32: codes rounded half-to-even from x · (127 / amax), d = amax / 127,
// and the sum of the codes (as ggml's quantize_row_q8_0/1 on x86).
inline float quantize_block_q8_avx2(const float* x, int8_t* q, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
  }
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float max_scalar = _mm_cvtss_f32(m4);
  const float d = max_scalar / 127.0f;
  const float id = max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f;
  const __m256 mul = _mm256_set1_ps(id);
  __m256i iv[4];
  for (int k = 0; k < 4; ++k) {
    iv[k] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[k], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (sum != nullptr) {
    const __m256i s =
        _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum = _mm_cvtsi128_si32(h);
  }
  const __m256i p01 = _mm256_packs_epi32(iv[0], iv[1]);
  const __m256i p23 = _mm256_packs_epi32(iv[2], iv[3]);
  const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p);
  return d;
}

}  // namespace

// ggml's quantize_row_q8_K_ref, 8 lanes at a time and byte for byte: the first element
// of largest magnitude sets iscale = −127 / it (NaN never wins, as in the scalar loop);
// codes are nearest_int(iscale · x) by the same 1.5·2^23 trick, capped at 127 and
// truncated to 8 bits; bsums are the sums of each 16 codes; d = 1 / iscale.
void from_f32_q8_k_avx2(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t ib = 0; ib < n / kQKK; ++ib) {
    const float* xb = x + ib * kQKK;
    BlockQ8_K& o = y[ib];
    __m256 amax8 = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8) {  // a NaN first operand returns the second
      amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)), amax8);
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax8, 1), _mm256_castps256_ps128(amax8));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (!(amax > 0.0f)) {
      o.d = 0;
      std::memset(o.qs, 0, sizeof(o.qs));
      std::memset(o.bsums, 0, sizeof(o.bsums));
      continue;
    }
    float max = 0.0f;
    const __m256 am = _mm256_set1_ps(amax);
    for (int j = 0; j < kQKK; j += 8) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)), am, _CMP_EQ_OQ));
      if (hit != 0) {
        max = xb[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff);
    const __m256i bias = _mm256_set1_epi32(0x00400000);
    const __m256i cap = _mm256_set1_epi32(127);
    const __m256i low8 = _mm256_set1_epi32(0xFF);
    for (int j = 0; j < kQKK; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(xb + j + 8 * k)), magic);
        const __m256i r = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), bias);
        q[k] = _mm256_and_si256(_mm256_min_epi32(r, cap), low8);  // int8 truncation below
      }
      // 0..255 values pack without saturation; undo the per-lane interleave
      const __m256i p =
          _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
      const __m256i codes =
          _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs + j), codes);
      // sums of codes j..j+15 and j+16..j+31
      const __m256i s32 =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), codes), _mm256_set1_epi16(1));
      const __m256i h = _mm256_hadd_epi32(s32, s32);
      const __m256i h2 = _mm256_hadd_epi32(h, h);
      o.bsums[j / 16] = static_cast<int16_t>(_mm256_extract_epi32(h2, 0));
      o.bsums[j / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(h2, 4));
    }
    o.d = 1 / iscale;
  }
}

void from_f32_q8_0_avx2(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    y[ib].d = fp32_to_fp16(quantize_block_q8_avx2(x + ib * kQK, y[ib].qs, nullptr));
  }
}

void from_f32_q8_1_avx2(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(vy);
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sum = 0;
    const float d = quantize_block_q8_avx2(x + ib * kQK, y[ib].qs, &sum);
    y[ib].d = fp32_to_fp16(d);
    y[ib].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void silu_poly_avx2(int64_t n, const float* x, const float* up, float* y) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 a = _mm256_sub_ps(_mm256_setzero_ps(), xv);  // e^(−x)
    const __m256 z = _mm256_fmadd_ps(a, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 nn = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(nn, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(nn, _mm256_set1_ps(0x1.62e4p-1f), a));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, one));
    // 2^n exactly as float bits while n stays in [−126, 127] (then j·2^n rounds as
    // scalef does); rarer lanes go through the scalar form.
    const __m256 lim = _mm256_set1_ps(126.0f);
    const __m256 out_of_range = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), nn), lim,
                                              _CMP_NLE_UQ);  // |n| > 126 or NaN
    if (_mm256_movemask_ps(out_of_range) != 0) {
      silu_poly_scalar(8, x + i, up != nullptr ? up + i : nullptr, y + i);
      continue;
    }
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nn), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(j, _mm256_castsi256_ps(bits));
    __m256 v = _mm256_div_ps(xv, _mm256_add_ps(one, e));
    if (up != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) silu_poly_scalar(n - i, x + i, up != nullptr ? up + i : nullptr, y + i);
}

namespace {

// ggml_v_expf as its AVX2 build compiles it (vec.h, __AVX2__ && __FMA__): the polynomial
// without its constant term, then j·2^n + 2^n in one fma; |n| > 126 scaled in two steps.
inline __m256 ggml_v_expf8(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g =
      _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                       _mm256_set1_epi32(static_cast<int32_t>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i d = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(
          _mm256_castsi256_ps(d),
          _mm256_or_ps(
              _mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
              _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

}  // namespace

void silu_poly8_avx2(int64_t n, const float* x, const float* up, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 e = ggml_v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), xv));
    __m256 v = _mm256_div_ps(xv, _mm256_add_ps(one, e));
    if (up != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) silu_poly8_scalar(n - i, x + i, up != nullptr ? up + i : nullptr, y + i);
}

void f16_to_f32_avx2(int64_t n, const uint16_t* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

// The AVX2 columns of the kernel table (kernel_table.cpp pairs each with its activation
// format): llama.cpp's orders (--numerics llamacpp), then the default kernels.
IsaDot avx2_ggml_dot(DType t) {
  switch (t) {
    case DType::kF16:  // ggml_vec_dot_f16 and, from 2 activation rows, tinyBLAS's sgemm
      return {.dot = dot_f16_f16_ggml_avx2, .dot_batch = dot_f16_f16_sgemm_avx2};
    case DType::kF32:  // tinyBLAS::matmul declines m % 4 != 0
      return {.dot = dot_f32_f32_ggml_avx2,
              .dot_batch = dot_f32_f32_sgemm_avx2,
              .batch_w_rows_multiple = 4};
    case DType::kQ5_0:  // ggml's x86 lanes (Q5_0 is not repacked on x86)
      return {.dot = dot_q5_0_q8_0_ggml_avx2};
    case DType::kQ4_0:  // ggml's x86 lanes (the repacked form: llamacpp_repack_dot_kernel)
      return {
          .dot = dot_q4_0_q8_0_lanes_avx2, .gemm = gemm_rows_avx2<Q4_0Gemm>, .gemv_rows_max = 0};
    case DType::kQ4_1:
      return {
          .dot = dot_q4_1_q8_1_lanes_avx2, .gemm = gemm_rows_avx2<Q4_1Gemm>, .gemv_rows_max = 0};
    case DType::kQ8_0:
      return {
          .dot = dot_q8_0_q8_0_lanes_avx2, .gemm = gemm_rows_avx2<Q8_0Gemm>, .gemv_rows_max = 0};
    case DType::kQ5_K:  // ggml's x86 lanes; its tiled K-quant matmul from 8 rows
      return {.dot = dot_q5_k_q8_k_ggml_avx2,
              .dot_batch = dot_q5_k_q8_k_tiled_avx2,
              .batch_min_rows = 8};
    case DType::kQ6_K:  // our AVX2 GEMV is ggml's x86 order; its tiled matmul from 8 rows
      return {
          .dot = dot_q6_k_q8_k_avx2, .dot_batch = dot_q6_k_q8_k_tiled_avx2, .batch_min_rows = 8};
    default:
      return {};
  }
}

IsaDot avx2_build_ggml_dot(DType t) {
  switch (t) {
    case DType::kF16:
      return {.dot = dot_f16_f16_ggml8_avx2, .dot_batch = dot_f16_f16_sgemm8_avx2};
    case DType::kF32:
      return {.dot = dot_f32_f32_ggml8_avx2,
              .dot_batch = dot_f32_f32_sgemm8_avx2,
              .batch_w_rows_multiple = 4};
    default:
      return avx2_ggml_dot(t);
  }
}

IsaDot avx2_dot(DType t) {
  switch (t) {
    case DType::kF32:  // 16 FMA lanes (vec_dot_float_avx2.cpp)
    case DType::kF16:
    case DType::kBF16:
      return float_dot_avx2(t);
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
      return avx2_ref_legacy_dot(t);
    case DType::kQ2_K:
      return {dot_q2_k_q8_k_avx2};
    case DType::kQ3_K:
      return {dot_q3_k_q8_k_avx2};
    case DType::kQ4_K:
      return {.dot = dot_q4_k_q8_k_avx2, .gemm = gemm_q4_k_q8_k_avx2};
    case DType::kQ5_K:
      return {.dot = dot_q5_k_q8_k_avx2, .gemm = gemm_q5_k_q8_k_avx2};
    case DType::kQ6_K:
      return {.dot = dot_q6_k_q8_k_avx2, .gemm = gemm_q6_k_q8_k_avx2, .gemv_rows_max = 0};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
