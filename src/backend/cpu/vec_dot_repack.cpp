// Stage 12 (kernels): scalar references of llama.cpp's CPU "repack" float orders (its
// extra weight buffer, on by default on x86 with AVX2: ggml-cpu repack.cpp re-lays Q4_0
// and Q4_K matmul weights into 8-row interleaved blocks at load and multiplies them with
// its q4_0_8x8 / q4_K_8x8 GEMV and GEMM), and of ggml's plain x86 Q5_0 order. Each
// output row of those kernels is an exact integer sum per block (or per pair of Q4_K
// sub-blocks) added by one fma into that row's own f32 lane; the weights need no
// repacking here to get the same bits. Also the two orders llama.cpp takes for the K-quants
// it does not repack on x86 (Q5_K, Q6_K): ggml's plain x86 GEMV lanes and its tiled K-quant
// matmul. The AVX2 and AVX-512 forms are bitwise twins (tests/backend/mul_mat_test.cpp).
#include <cmath>
#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQKK;

inline float h2f(quant::Half h) {
  return fp16_to_fp32(h);
}

// One Q4_K super-block as plain integers: per sub-block j (32 elements) the exact
// Σ q·y, its 6-bit scale and min, and the activation's Σ y over it (two bsums).
struct Q4KParts {
  int32_t dot[8];
  int32_t sc[8];
  int32_t m[8];
  int32_t bsum[8];
};

Q4KParts q4_k_parts(const BlockQ4_K& w, const BlockQ8_K& x) {
  Q4KParts p{};
  for (int c = 0; c < 4; ++c) {  // element 64c + 32h + l: nibble h of qs[32c + l]
    int32_t lo = 0, hi = 0;
    for (int l = 0; l < 32; ++l) {
      lo += (w.qs[32 * c + l] & 0xF) * x.qs[64 * c + l];
      hi += (w.qs[32 * c + l] >> 4) * x.qs[64 * c + 32 + l];
    }
    p.dot[2 * c] = lo;
    p.dot[2 * c + 1] = hi;
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    kquant_scale_min(j, w.scales, &s, &m);
    p.sc[j] = s;
    p.m[j] = m;
    p.bsum[j] = x.bsums[2 * j] + x.bsums[2 * j + 1];
  }
  return p;
}

// The 5-bit code of element e (0..255) of a Q5_K super-block: nibble (e / 32) % 2 of
// qs[32 · (e / 64) + e % 32], bit e / 32 of qh[e % 32] on top (dequantize_row_q5_K).
inline int q5_k_code(const BlockQ5_K& w, int e) {
  const int s = e / 32, l = e % 32;
  return ((w.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0xF) | (((w.qh[l] >> s) & 1) << 4);
}

// Σ_j m_j · (bsums[2j] + bsums[2j + 1]): the mins' exact integer of a Q4_K / Q5_K
// super-block (sm: kquant_scales_mins).
inline int32_t kquant_min_sum(const uint8_t sm[16], const BlockQ8_K& x) {
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += sm[8 + j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  return s;
}

}  // namespace

bool llamacpp_repacks(DType t, int64_t n_rows) {
  // ggml_repack_get_optimal_repack_type on an AVX2 CPU (the types minfer runs): Q4_0 →
  // q4_0_8x8 and Q4_K → q4_K_8x8 when ne[1] % 8 == 0. (Its Q2_K 8x8 needs AVX-512 and
  // IQ4_NL / MXFP4 are not minfer weight types; those stay unlisted.)
  return (t == DType::kQ4_0 || t == DType::kQ4_K) && n_rows > 0 && n_rows % 8 == 0;
}

float dot_q4_0_q8_0_repack_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int v0 = (w[ib].qs[j] & 0x0F) - 8;
      const int v1 = (w[ib].qs[j] >> 4) - 8;
      sumi += v0 * x[ib].qs[j] + v1 * x[ib].qs[j + kQK / 2];
    }
    acc = std::fma(static_cast<float>(sumi), h2f(w[ib].d) * h2f(x[ib].d), acc);
  }
  return acc;
}

float dot_q4_k_q8_k_repack_gemv_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f, accm = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const Q4KParts p = q4_k_parts(w[i], x[i]);
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      sumi += p.sc[j] * p.dot[j];
      summ += p.m[j] * p.bsum[j];
    }
    acc = std::fma(static_cast<float>(sumi), h2f(w[i].d) * x[i].d, acc);
    accm = std::fma(static_cast<float>(summ), h2f(w[i].dmin) * x[i].d, accm);
  }
  return acc - accm;
}

float dot_q4_k_q8_k_repack_gemm_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f, accm = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const Q4KParts p = q4_k_parts(w[i], x[i]);
    const float d = h2f(w[i].d) * x[i].d;
    const float dmin = h2f(w[i].dmin) * x[i].d;
    for (int sb = 0; sb < 4; ++sb) {  // sub-blocks 2sb and 2sb + 1
      const int32_t sumi = p.sc[2 * sb] * p.dot[2 * sb] + p.sc[2 * sb + 1] * p.dot[2 * sb + 1];
      const int32_t summ = p.m[2 * sb] * p.bsum[2 * sb] + p.m[2 * sb + 1] * p.bsum[2 * sb + 1];
      acc = std::fma(static_cast<float>(sumi), d, acc);
      accm = std::fma(static_cast<float>(summ), dmin, accm);
    }
  }
  return acc - accm;
}

void from_f32_q8_k_mat4(const float* x, void* vy, int64_t n) {
  from_f32_q8_k(x, vy, n);
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* xb = x + i * kQKK;
    float amax = 0.0f;
    int first = -1;  // the reference's choice: first element of largest magnitude
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        first = j;
      }
    }
    if (first < 0 || xb[first] > 0.0f) continue;  // reference scale already negative
    bool pos_max = false;
    for (int j = 0; j < kQKK && !pos_max; ++j) pos_max = xb[j] == amax;
    if (!pos_max) continue;
    // −amax came first and +amax is present too: the 4-row quantizer negates the scale.
    const float iscale = -127.0f / amax;
    for (int j = 0; j < kQKK; ++j) {
      // _mm256_round_ps nearest (half to even), then packs saturating to int8
      const float v = std::nearbyint(iscale * xb[j]);
      y[i].qs[j] = static_cast<int8_t>(std::fmax(-128.0f, std::fmin(127.0f, v)));
    }
    for (int b = 0; b < kQKK / 16; ++b) {
      int32_t s = 0;
      for (int j = 0; j < 16; ++j) s += y[i].qs[16 * b + j];
      y[i].bsums[b] = static_cast<int16_t>(s);
    }
    y[i].d = 1.0f / iscale;
  }
}

float dot_q6_k_q8_k_tiled_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const quant::BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint8_t* ql = w[i].ql;
    const uint8_t* qh = w[i].qh;
    const int8_t* sc = w[i].scales;
    const int8_t* y = x[i].qs;
    int32_t sumi = 0;
    for (int h = 0; h < 2; ++h) {  // ggml's dequantize_row_q6_K element order
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        sumi += sc[is] * q1 * y[l] + sc[is + 2] * q2 * y[l + 32] + sc[is + 4] * q3 * y[l + 64] +
                sc[is + 6] * q4 * y[l + 96];
      }
      ql += 64;
      qh += 32;
      sc += 8;
      y += 128;
    }
    acc = std::fma(static_cast<float>(sumi) * h2f(w[i].d), x[i].d, acc);
  }
  return acc;
}

float dot_q5_k_q8_k_ggml_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float lane[8] = {};
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sm[16];
    kquant_scales_mins(w[i].scales, sm);
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = -x[i].d * h2f(w[i].dmin);
    summs = std::fma(dmin, static_cast<float>(kquant_min_sum(sm, x[i])), summs);
    for (int l = 0; l < 8; ++l) {  // lane l: elements 4l..4l+3 of every 32-element sub-block
      int32_t s = 0;
      for (int j = 0; j < 8; ++j) {
        int32_t q = 0;
        for (int e = 32 * j + 4 * l; e < 32 * j + 4 * l + 4; ++e)
          q += q5_k_code(w[i], e) * x[i].qs[e];
        s += sm[j] * q;
      }
      lane[l] = std::fma(d, static_cast<float>(s), lane[l]);
    }
  }
  const float s0 = lane[0] + lane[4], s1 = lane[1] + lane[5], s2 = lane[2] + lane[6],
              s3 = lane[3] + lane[7];
  return ((s0 + s2) + (s1 + s3)) + summs;
}

float dot_q5_k_q8_k_tiled_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sm[16];
    kquant_scales_mins(w[i].scales, sm);
    int32_t s1 = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t q = 0;
      for (int e = 32 * j; e < 32 * j + 32; ++e) q += q5_k_code(w[i], e) * x[i].qs[e];
      s1 += sm[j] * q;
    }
    const float t = h2f(w[i].d) * static_cast<float>(s1);
    const float r = std::fma(-h2f(w[i].dmin), static_cast<float>(kquant_min_sum(sm, x[i])), t);
    acc = std::fma(r, x[i].d, acc);
  }
  return acc;
}

float dot_q5_0_q8_0_ggml_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  float lane[8] = {};
  for (int64_t ib = 0; ib < n / kQK; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, w[ib].qh, 4);
    const float d = h2f(w[ib].d) * h2f(x[ib].d);
    for (int l = 0; l < 8; ++l) {
      int32_t s = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) {  // element e: nibble e % 16 of half e / 16
        const int nib = e < 16 ? (w[ib].qs[e] & 0x0F) : (w[ib].qs[e - 16] >> 4);
        s += ((nib | static_cast<int>(((qh >> e) & 1) << 4)) - 16) * x[ib].qs[e];
      }
      lane[l] = std::fma(d, static_cast<float>(s), lane[l]);
    }
  }
  // hsum_float_8: 4 + 4, then 2 + 2, then 1 + 1
  const float s0 = lane[0] + lane[4], s1 = lane[1] + lane[5], s2 = lane[2] + lane[6],
              s3 = lane[3] + lane[7];
  return (s0 + s2) + (s1 + s3);
}

}  // namespace minfer::backend::cpu
