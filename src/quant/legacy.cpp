// Stage 3 (quant): the legacy 32-element block formats Q4_0 Q4_1 Q5_0 Q5_1 Q8_0.
// Invariant: bit-exact with ggml's quantize_row_*_ref / dequantize_row_*
// (ggml/src/ggml-quants.c): the same float operations in the same order, the same
// truncating float→int conversions, compiled without FMA contraction
// (src/quant/CMakeLists.txt).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace minfer::quant::detail {
namespace {

// The element of largest magnitude in a block, sign kept (the first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// ggml's `(int8_t)v` and `(uint8_t)v` as compiled for x86: cvttss2si truncates to
// int32, a NaN or out-of-range value becomes INT32_MIN (the "integer indefinite"),
// and the narrowing keeps the low byte. In C++ a float→int8 conversion out of range is
// undefined (UBSan stops on it: a block of tiny values gives 1/d = inf), so the same
// bytes are computed with defined operations (int32→int8 is modular since C++20).
int32_t trunc_i32(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(v);
}
int8_t to_i8(float v) {
  return static_cast<int8_t>(trunc_i32(v));
}
uint8_t to_u8(float v) {
  return static_cast<uint8_t>(trunc_i32(v));
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

// ---- Q4_0: symmetric 4-bit. The scale maps the signed extreme to -8, so that value
// is exact and the other side may reach +7 (the +8 code is clipped to 15).
void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    const float d = signed_absmax(x, kQK) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // +8.5 then truncation = round half up into the unsigned code range.
      const int q0 = std::min(15, static_cast<int>(to_i8(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(to_i8(x[j + kQK / 2] * id + 8.5f)));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    float* y = dst + b * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

// ---- Q4_1: affine 4-bit, min and step (max - min) / 15.
void quantize_q4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(to_i8((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(to_i8((x[j + kQK / 2] - min) * id + 0.5f)));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    float* y = dst + b * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[b].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = static_cast<float>(x[b].qs[j] >> 4) * d + m;
    }
  }
}

// ---- Q5_0: symmetric 5-bit, extreme maps to -16 (as Q4_0 with one more bit).
void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    const float d = signed_absmax(x, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>(to_i8(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(to_i8(x[j + kQK / 2] * id + 16.5f)));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK / 2);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint32_t qh = load_u32(x[b].qh);
    float* y = dst + b * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1) << 4;
      const int h1 = static_cast<int>((qh >> (j + kQK / 2)) & 1) << 4;
      y[j] = static_cast<float>(((x[b].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + kQK / 2] = static_cast<float>(((x[b].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

// ---- Q5_1: affine 5-bit, step (max - min) / 31. No clip: the code of `max` rounds
// to 31 at most (ggml relies on the same).
void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const auto q0 = to_u8((x[j] - min) * id + 0.5f);
      const auto q1 = to_u8((x[j + kQK / 2] - min) * id + 0.5f);
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK / 2);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    const uint32_t qh = load_u32(x[b].qh);
    float* y = dst + b * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1) << 4;
      const int h1 = static_cast<int>((qh >> (j + kQK / 2)) & 1) << 4;
      y[j] = static_cast<float>((x[b].qs[j] & 0x0F) | h0) * d + m;
      y[j + kQK / 2] = static_cast<float>((x[b].qs[j] >> 4) | h1) * d + m;
    }
  }
}

// ---- Q8_0: symmetric 8-bit, step absmax / 127, round half away from zero (roundf).
void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = to_i8(std::round(x[j] * id));
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

}  // namespace minfer::quant::detail
