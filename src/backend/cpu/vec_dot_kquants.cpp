// Stage 12 (kernels): scalar k-quant · Q8_K dot products. Each super-block is unpacked
// into plain integers (codes, sub-block scales, mins) and reduced exactly; layouts are
// documented on the block structs (quant/blocks.h). Q6_K keeps ggml's x86 lane order (8
// integer lanes scaled into 8 f32 lanes per super-block, one reduction at the end: it
// then equals llama.cpp's Q6_K rows bit for bit); the others add d·Σ(sc·Σq·y) −
// dmin·Σ(m·bsum) per super-block, an expression a 16-rows-per-register kernel can keep.
// The AVX2 and AVX-512 kernels are their bitwise twins.
#include "backend/cpu/vec_dot_kquants.h"

#include <cmath>

#include "core/fp16.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_K;
using quant::kQKK;

inline float h2f(quant::Half h) {
  return fp16_to_fp32(h);
}

// The x86 horizontal sum of 8 f32 lanes (ggml's hsum_float_8): 4 + 4, then 2 + 2.
inline float hsum8_x86(const float a[8]) {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

// Σ over sub-blocks of `len` elements: scale[s] · Σ q·y (exact in int32: |q| <= 63,
// |y| <= 127, |scale| <= 63 over 256 elements stays below 2^31).
inline int32_t scaled_isum(const int8_t* q, const int8_t* y, const int32_t* scale, int len) {
  int32_t total = 0;
  for (int s = 0; s < kQKK / len; ++s) {
    int32_t sum = 0;
    for (int l = 0; l < len; ++l) sum += q[s * len + l] * y[s * len + l];
    total += scale[s] * sum;
  }
  return total;
}

}  // namespace

float dot_q2_k_q8_k_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ2_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float sumf = 0.0f;
  int8_t q[kQKK];
  int32_t sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 4; ++s) {
        for (int l = 0; l < 32; ++l) {
          q[128 * h + 32 * s + l] = static_cast<int8_t>((w[i].qs[32 * h + l] >> (2 * s)) & 3);
        }
      }
    }
    int32_t summ = 0;
    for (int j = 0; j < 16; ++j) {
      sc[j] = w[i].scales[j] & 0xF;
      summ += (w[i].scales[j] >> 4) * x[i].bsums[j];
    }
    const int32_t sumi = scaled_isum(q, x[i].qs, sc, 16);
    const float dall = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += dall * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q3_k_q8_k_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ3_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float sumf = 0.0f;
  int8_t q[kQKK];
  int32_t sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 4; ++s) {
        for (int l = 0; l < 32; ++l) {
          const int e = 128 * h + 32 * s + l;
          const int low = (w[i].qs[32 * h + l] >> (2 * s)) & 3;
          const int hi = (w[i].hmask[l] >> (e / 32)) & 1;
          q[e] = static_cast<int8_t>(low + 4 * hi - 4);
        }
      }
    }
    for (int j = 0; j < 16; ++j) {
      const int low4 = j < 8 ? (w[i].scales[j] & 0xF) : (w[i].scales[j - 8] >> 4);
      const int high2 = (w[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      sc[j] = (low4 | (high2 << 4)) - 32;
    }
    const int32_t sumi = scaled_isum(q, x[i].qs, sc, 16);
    sumf += (x[i].d * h2f(w[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float dot_q4_k_q8_k_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float sumf = 0.0f;
  int8_t q[kQKK];
  int32_t sc[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = static_cast<int8_t>(w[i].qs[32 * c + l] & 0xF);
        q[64 * c + 32 + l] = static_cast<int8_t>(w[i].qs[32 * c + l] >> 4);
      }
    }
    int32_t summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      kquant_scale_min(j, w[i].scales, &s, &m);
      sc[j] = s;
      summ += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    const int32_t sumi = scaled_isum(q, x[i].qs, sc, 32);
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q5_k_q8_k_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float sumf = 0.0f;
  int8_t q[kQKK];
  int32_t sc[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int hb0 = (w[i].qh[l] >> (2 * c)) & 1;
        const int hb1 = (w[i].qh[l] >> (2 * c + 1)) & 1;
        q[64 * c + l] = static_cast<int8_t>((w[i].qs[32 * c + l] & 0xF) | (hb0 << 4));
        q[64 * c + 32 + l] = static_cast<int8_t>((w[i].qs[32 * c + l] >> 4) | (hb1 << 4));
      }
    }
    int32_t summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      kquant_scale_min(j, w[i].scales, &s, &m);
      sc[j] = s;
      summ += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    const int32_t sumi = scaled_isum(q, x[i].qs, sc, 32);
    const float d = x[i].d * h2f(w[i].d);
    const float dmin = x[i].d * h2f(w[i].dmin);
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q6_k_q8_k_scalar(int64_t n, const void* vw, const void* vx) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* x = static_cast<const BlockQ8_K*>(vx);
  float acc[8] = {};
  uint8_t code[kQKK];  // 0..63; the −32 offset comes off per lane from the bsums
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[i].ql + 64 * h;
      const uint8_t* qh = w[i].qh + 32 * h;
      uint8_t* o = code + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = static_cast<uint8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
        o[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        o[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        o[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    const float d = x[i].d * h2f(w[i].d);
    for (int l = 0; l < 8; ++l) {  // lane l: bytes 4l..4l+3 of every 32-byte chunk
      int32_t lane = 0;
      for (int v = 0; v < 8; ++v) {  // chunk v = 4h + k, sub-block scales 2v, 2v + 1
        int32_t sum = 0;
        for (int b = 4 * l; b < 4 * l + 4; ++b) sum += code[32 * v + b] * x[i].qs[32 * v + b];
        lane += w[i].scales[2 * v + (l >= 4 ? 1 : 0)] * sum;
      }
      lane -= 32 * (x[i].bsums[2 * l] * w[i].scales[2 * l] +
                    x[i].bsums[2 * l + 1] * w[i].scales[2 * l + 1]);
      acc[l] = std::fma(d, static_cast<float>(lane), acc[l]);
    }
  }
  return hsum8_x86(acc);
}

}  // namespace minfer::backend::cpu
