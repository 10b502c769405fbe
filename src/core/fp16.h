// Stage 1 (core): IEEE half and bfloat16 conversions, bit-exact with ggml's
// reference (round-to-nearest-even; NaN stays NaN; bf16 NaN quieted).
#pragma once

#include <cstdint>
#include <cstring>

namespace minfer {

inline float fp32_from_bits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline uint32_t fp32_to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
}

// Half → float, exact for every input (the classic branch-free construction of
// Maratea's FP16 library: scale the exponent with float multiplies).
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = fp32_from_bits(0x7800000u);  // 0x1.0p-112f
  const float normalized = fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? fp32_to_bits(denormalized) : fp32_to_bits(normalized));
  return fp32_from_bits(result);
}

// Float → half with round-to-nearest-even, same construction.
inline uint16_t fp32_to_fp16(float f) {
  const float scale_to_inf = fp32_from_bits(0x77800000u);   // 0x1.0p+112f
  const float scale_to_zero = fp32_from_bits(0x08800000u);  // 0x1.0p-110f
  float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
  const uint32_t w = fp32_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = fp32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = fp32_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// Half fused multiply-add a·b + c with one rounding to half (nearest-even), as x86's
// AVX512-FP16 vfmadd*ph computes it, denormals included. a·b is exact in double (22
// significant bits); the sum s = a·b + c is rounded, with its error e from TwoSum, so
// the exact value is s + e. It is rounded to float toward odd (float keeps more than
// half's 11 bits + 2, so the final float → half rounding cannot double-round).
inline uint16_t fma_f16_exact(uint16_t a, uint16_t b, uint16_t c) {
  const double p = static_cast<double>(fp16_to_fp32(a)) * static_cast<double>(fp16_to_fp32(b));
  const double q = static_cast<double>(fp16_to_fp32(c));
  const double s = p + q;
  const double bv = s - p;
  const double e = (p - (s - bv)) + (q - bv);  // s + e = p + q exactly
  float t = static_cast<float>(s);
  const double dt = static_cast<double>(t);
  if (s - s == 0.0 && (dt != s || e != 0.0)) {  // finite and inexact (inf/NaN pass through)
    // t − (s + e): dt − s is exact (Sterbenz) and, when nonzero, a double ulp of s or
    // more, which |e| (at most half of one) cannot outweigh.
    const bool above = dt != s ? dt > s : e < 0.0;  // t above the exact value
    uint32_t bits = fp32_to_bits(t);
    if (t != 0.0f && (t > 0.0f) == above) --bits;  // toward zero: |t| truncated
    t = fp32_from_bits(bits | 1u);
  }
  return fp32_to_fp16(t);
}

inline float bf16_to_fp32(uint16_t h) {
  return fp32_from_bits(static_cast<uint32_t>(h) << 16);
}

inline uint16_t fp32_to_bf16(float f) {
  uint32_t u = fp32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

}  // namespace minfer
