// Stage 12 (kernels): scalar reference dot products of the k-quant weight types with
// Q8_K activations, and the per-super-block integer unpacking they share.
// Invariant: each super-block contributes `d·Σ(sc·Σq·y) − dmin·Σ(m·bsum)` computed in
// exact integers, combined in float in super-block order — the AVX2 twins compute the
// same integers and the same float expression, so they are bitwise equal.
#pragma once

#include <cstdint>

namespace minfer::backend::cpu {

float vec_dot_q2_k_q8_k(int64_t n, const void* w, const void* x);
float vec_dot_q3_k_q8_k(int64_t n, const void* w, const void* x);
float vec_dot_q4_k_q8_k(int64_t n, const void* w, const void* x);
float vec_dot_q5_k_q8_k(int64_t n, const void* w, const void* x);
float vec_dot_q6_k_q8_k(int64_t n, const void* w, const void* x);

// AVX2 twins (vec_dot_avx2_exact.cpp; Q4_K / Q6_K: vec_dot_avx2.cpp), bitwise equal to
// the above; only call on a CPU with AVX2 + F16C.
float avx2_dot_q2_k_q8_k(int64_t n, const void* w, const void* x);
float avx2_dot_q3_k_q8_k(int64_t n, const void* w, const void* x);
float avx2_dot_q5_k_q8_k(int64_t n, const void* w, const void* x);

// Q4_K / Q5_K packed 6-bit scale and min of sub-block j (ggml get_scale_min_k4).
inline void kquant_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace minfer::backend::cpu
