// Stage 12 (kernels): scalar reference dot products for the float and legacy block
// types, the activation converters, and the scalar column of the kernel table.
// Invariant: per-block integer sums combined in block order, as ggml-cpu's generic
// vec_dot_*; the float/bf16/f16 weight dots fma 16 lanes then a fixed tree, attention's
// f32 dot adds 8 lanes of products then a fixed tree (each its SIMD twins' order), so
// they are bitwise equal across ISAs.
#include <cmath>
#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ8_0;
using quant::kQK;

inline float h2f(quant::Half h) {
  return fp16_to_fp32(h);
}

// Absolute max of one 32-element block and the x86 q8 codes for it.
inline float quantize_block_q8(const float* x, int8_t* q, int32_t* sum) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t s = 0;
  for (int j = 0; j < kQK; ++j) {
    // nearbyint under the default rounding mode = round half to even, as
    // _mm256_round_ps(_MM_ROUND_NEAREST) in ggml's quantize_row_q8_0.
    const int v = static_cast<int>(std::nearbyint(x[j] * id));
    q[j] = static_cast<int8_t>(v);
    s += v;
  }
  if (sum) *sum = s;
  return d;
}

float dot_q4_0_q8_0_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int v0 = (w[ib].qs[j] & 0x0F) - 8;
      const int v1 = (w[ib].qs[j] >> 4) - 8;
      sumi += v0 * x[ib].qs[j] + v1 * x[ib].qs[j + kQK / 2];
    }
    sumf += static_cast<float>(sumi) * h2f(w[ib].d) * h2f(x[ib].d);
  }
  return sumf;
}

float dot_q4_1_q8_1_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (w[ib].qs[j] & 0x0F) * x[ib].qs[j] + (w[ib].qs[j] >> 4) * x[ib].qs[j + kQK / 2];
    }
    sumf += (h2f(w[ib].d) * h2f(x[ib].d)) * static_cast<float>(sumi) + h2f(w[ib].m) * h2f(x[ib].s);
  }
  return sumf;
}

inline uint32_t load_qh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

float dot_q5_0_q8_0_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const uint32_t qh = load_qh(w[ib].qh);
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int v0 = ((w[ib].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int v1 = ((w[ib].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += v0 * x[ib].qs[j] + v1 * x[ib].qs[j + kQK / 2];
    }
    sumf += (h2f(w[ib].d) * h2f(x[ib].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float dot_q5_1_q8_1_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* x = static_cast<const BlockQ8_1*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    const uint32_t qh = load_qh(w[ib].qh);
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int v0 = (w[ib].qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int v1 = (w[ib].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += v0 * x[ib].qs[j] + v1 * x[ib].qs[j + kQK / 2];
    }
    sumf += (h2f(w[ib].d) * h2f(x[ib].d)) * static_cast<float>(sumi) + h2f(w[ib].m) * h2f(x[ib].s);
  }
  return sumf;
}

float dot_q8_0_q8_0_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += w[ib].qs[j] * x[ib].qs[j];
    sumf += static_cast<float>(sumi) * (h2f(w[ib].d) * h2f(x[ib].d));
  }
  return sumf;
}

// 8 lanes then the fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) — the order of the
// AVX2 horizontal sum — then the scalar tail.
template <typename Load>
float lanes8_dot(int64_t n, Load load) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] = acc[l] + load(i + l);
  }
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += load(i);
  return s;
}

// The F32 / F16 / BF16 weight dot (default numerics, ARCHITECTURE §6): 16 lanes, lane l
// fma-accumulating elements i ≡ l (mod 16) of the 16-element body in order, lanes l and
// l + 8 added, those 8 reduced ((0+4)+(2+6))+((1+5)+(3+7)), then the n % 16 tail fma'd
// onto the sum in order. The AVX2 kernels carry lanes 0–7 and 8–15 in two registers, the
// AVX-512 ones in one; all give these bits (vec_dot_float_avx2.cpp, _avx512.cpp).
template <typename W, typename X>
float lanes16_fma_dot(int64_t n, W w, X x) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(w(i + l), x(i + l), acc[l]);
  }
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = acc[l] + acc[l + 8];
  float s = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
  for (; i < n; ++i) s = std::fma(w(i), x(i), s);
  return s;
}

float dot_f16_f16_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const uint16_t*>(vw);
  const auto* x = static_cast<const uint16_t*>(vx);
  return lanes16_fma_dot(
      n, [&](int64_t i) { return fp16_to_fp32(w[i]); },
      [&](int64_t i) { return fp16_to_fp32(x[i]); });
}

float dot_bf16_bf16_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const uint16_t*>(vw);
  const auto* x = static_cast<const uint16_t*>(vx);
  return lanes16_fma_dot(
      n, [&](int64_t i) { return bf16_to_fp32(w[i]); },
      [&](int64_t i) { return bf16_to_fp32(x[i]); });
}

float dot_f32_f32_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const float*>(vw);
  const auto* x = static_cast<const float*>(vx);
  return lanes16_fma_dot(
      n, [&](int64_t i) { return w[i]; }, [&](int64_t i) { return x[i]; });
}

}  // namespace

void from_f32_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    y[ib].d = fp32_to_fp16(quantize_block_q8(x + ib * kQK, y[ib].qs, nullptr));
  }
}

void from_f32_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(vy);
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sum = 0;
    const float d = quantize_block_q8(x + ib * kQK, y[ib].qs, &sum);
    y[ib].d = fp32_to_fp16(d);
    y[ib].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void from_f32_q8_k(const float* x, void* y, int64_t n) {
  quant::traits(DType::kQ8_K)->quantize_ref(x, y, n);
}

void from_f32_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

float ggml_dot_f16_vec_scalar(int64_t n, const uint16_t* x, const uint16_t* y) {
  float lane[4][16] = {};
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; ++j) {
      for (int e = 0; e < 16; ++e) {
        const int64_t at = i + j * 16 + e;
        lane[j][e] = std::fma(fp16_to_fp32(x[at]), fp16_to_fp32(y[at]), lane[j][e]);
      }
    }
  }
  float a[16];
  for (int e = 0; e < 16; ++e) a[e] = (lane[0][e] + lane[2][e]) + (lane[1][e] + lane[3][e]);
  float b8[8];
  for (int e = 0; e < 8; ++e) b8[e] = a[8 + e] + a[e];
  float b4[4];
  for (int e = 0; e < 4; ++e) b4[e] = b8[4 + e] + b8[e];
  double sum = static_cast<double>((b4[0] + b4[2]) + (b4[1] + b4[3]));
  for (int64_t i = np; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  }
  return static_cast<float>(sum);
}

float ggml_dot_f16_vec8_scalar(int64_t n, const uint16_t* x, const uint16_t* y) {
  float lane[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    for (int j = 0; j < 4; ++j) {
      for (int e = 0; e < 8; ++e) {
        const int64_t at = i + j * 8 + e;
        lane[j][e] = std::fma(fp16_to_fp32(x[at]), fp16_to_fp32(y[at]), lane[j][e]);
      }
    }
  }
  float a[8];
  for (int e = 0; e < 8; ++e) a[e] = (lane[0][e] + lane[2][e]) + (lane[1][e] + lane[3][e]);
  const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  double sum = static_cast<double>((t0 + t1) + (t2 + t3));  // _mm_hadd_ps twice
  for (int64_t i = np; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  }
  return static_cast<float>(sum);
}

float ggml_v_expf8_lane(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  uint32_t zb;
  std::memcpy(&zb, &z, 4);
  const uint32_t e = zb << 23;
  const uint32_t one_bits = 0x3f800000u;
  auto from_bits = [](uint32_t v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  };
  const float k = from_bits(e + one_bits);  // 2^n while |n| <= 126
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);  // also NaN
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = from_bits(g + 0x7f000000u);
  const float s2 = from_bits(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

void silu_poly8_scalar(int64_t n, const float* x, const float* up, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / (1.0f + ggml_v_expf8_lane(0.0f - x[i]));
    y[i] = up != nullptr ? v * up[i] : v;
  }
}

namespace {

// e^x as ggml's vectorised expf, one lane.
inline float expf_poly(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;  // round(x / ln 2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::isnan(n)) return n;
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));  // = scalef(j, n), correctly rounded
}

}  // namespace

float ggml_v_expf_lane(float x) {
  return expf_poly(x);
}

void silu_poly_scalar(int64_t n, const float* x, const float* up, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / (1.0f + expf_poly(-x[i]));
    y[i] = up != nullptr ? v * up[i] : v;
  }
}

void f16_to_f32_scalar(int64_t n, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void from_f32_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

void from_f32_f32(const float* x, void* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

float dot_f32_scalar(int64_t n, const float* a, const float* b) {
  return lanes8_dot(n, [&](int64_t i) { return a[i] * b[i]; });
}

void axpy_f32_scalar(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];
}

void attn_scores_f32_scalar(int64_t n_cells, int64_t hd, const float* q, const float* k,
                            int64_t k_stride, float scale, float* out) {
  for (int64_t c = 0; c < n_cells; ++c) out[c] = dot_f32_scalar(hd, q, k + c * k_stride) * scale;
}

void row_sums_f64_scalar(const float* const* rows, int nr, int64_t n, RowSum t, const float* c,
                         double* out) {
  for (int r = 0; r < nr; ++r) {
    const float* x = rows[r];
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
      sum += row_sum_term(t, x[i], t == RowSum::kCentredSquares ? c[r] : 0.0f);
    out[r] = sum;
  }
}

void attn_exp_f32_scalar(int64_t n, const float* s, float m, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(s[i] - m);
}

void attn_scores2_f32_scalar(int64_t n_cells, int64_t hd, const float* q0, const float* q1,
                             const float* k, int64_t k_stride, float scale, float* out0,
                             float* out1) {
  attn_scores_f32_scalar(n_cells, hd, q0, k, k_stride, scale, out0);
  attn_scores_f32_scalar(n_cells, hd, q1, k, k_stride, scale, out1);
}

void attn_axpy_rows_f32_scalar(int64_t n_cells, int64_t n, const float* p, const float* v,
                               int64_t v_stride, float* y) {
  for (int64_t c = 0; c < n_cells; ++c) axpy_f32_scalar(n, p[c], v + c * v_stride, y);
}

IsaDot scalar_dot(DType t) {
  switch (t) {
    case DType::kF32:
      return {dot_f32_f32_scalar};
    case DType::kF16:
      return {dot_f16_f16_scalar};
    case DType::kBF16:
      return {dot_bf16_bf16_scalar};
    case DType::kQ4_0:
      return {dot_q4_0_q8_0_scalar};
    case DType::kQ4_1:
      return {dot_q4_1_q8_1_scalar};
    case DType::kQ5_0:
      return {dot_q5_0_q8_0_scalar};
    case DType::kQ5_1:
      return {dot_q5_1_q8_1_scalar};
    case DType::kQ8_0:
      return {dot_q8_0_q8_0_scalar};
    case DType::kQ2_K:
      return {dot_q2_k_q8_k_scalar};
    case DType::kQ3_K:
      return {dot_q3_k_q8_k_scalar};
    case DType::kQ4_K:
      return {dot_q4_k_q8_k_scalar};
    case DType::kQ5_K:
      return {dot_q5_k_q8_k_scalar};
    case DType::kQ6_K:
      return {dot_q6_k_q8_k_scalar};
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
