// Stage 12 (kernels): scalar reference dot products of the k-quant weight types with
// Q8_K activations, and the per-super-block integer unpacking they share.
// Invariant: each super-block contributes `d·Σ(sc·Σq·y) − dmin·Σ(m·bsum)` computed in
// exact integers, combined in float in super-block order — the AVX2 twins compute the
// same integers and the same float expression, so they are bitwise equal.
#pragma once

#include <cstdint>
#include <cstring>

namespace minfer::backend::cpu {

float dot_q2_k_q8_k_scalar(int64_t n, const void* w, const void* x);
float dot_q3_k_q8_k_scalar(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k_scalar(int64_t n, const void* w, const void* x);
float dot_q5_k_q8_k_scalar(int64_t n, const void* w, const void* x);
float dot_q6_k_q8_k_scalar(int64_t n, const void* w, const void* x);

// AVX2 twins (vec_dot_avx2_kquants.cpp; Q6_K: vec_dot_avx2_q6k.cpp), bitwise equal to
// the above; only call on a CPU with AVX2 + F16C.
float dot_q2_k_q8_k_avx2(int64_t n, const void* w, const void* x);
float dot_q3_k_q8_k_avx2(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k_avx2(int64_t n, const void* w, const void* x);
float dot_q5_k_q8_k_avx2(int64_t n, const void* w, const void* x);

// All 8 scales and mins of a Q4_K / Q5_K super-block at once, word-parallel: bytes 0-7
// of the result are sc[0..7], bytes 8-15 m[0..7] (kquant_scale_min below, for every j).
// Scales and mins 0-3 are the low 6 bits of bytes 0-3 and 4-7; those of 4-7 take their
// low nibble (scale) or high nibble (min) from bytes 8-11 and their top 2 bits from the
// top 2 bits of bytes 0-3 (scale) or 4-7 (min).
static inline void kquant_scales_mins(const uint8_t* q, uint8_t out[16]) {
  uint32_t b0, b1, b2;
  std::memcpy(&b0, q, 4);
  std::memcpy(&b1, q + 4, 4);
  std::memcpy(&b2, q + 8, 4);
  constexpr uint32_t kLow6 = 0x3F3F3F3Fu, kLow4 = 0x0F0F0F0Fu, kLow2 = 0x03030303u;
  const uint32_t w[4] = {b0 & kLow6, (b2 & kLow4) | (((b0 >> 6) & kLow2) << 4), b1 & kLow6,
                         ((b2 >> 4) & kLow4) | (((b1 >> 6) & kLow2) << 4)};
  std::memcpy(out, w, 16);
}

// Q4_K / Q5_K packed 6-bit scale and min of sub-block j (ggml get_scale_min_k4).
static inline void kquant_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace minfer::backend::cpu
