// Stage 12 (kernels): GeGLU — gelu_tanh(gate) · up — as ggml's CPU computes it.
// Invariant: every variant gives the same bits (the SIMD twin gathers from the same
// table the scalar kernel indexes), so the result depends on the inputs alone.
//
// ggml (ggml-cpu/vec.h, GGML_GELU_FP16, on for every CPU build) does not evaluate the
// tanh formula per element: it rounds x to f16 and looks the answer up in a 65536-entry
// table of f16 gelu values computed once at start-up; x <= -10 gives 0 and x >= 10
// gives x. Gemma's FFN runs through it in llama.cpp, so minfer uses the same table for
// every numerics mode: one kernel, llama.cpp's bits.
#pragma once

#include <cstdint>

namespace minfer::backend::cpu {

// 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))) in f32, each product rounded (no FMA):
// the formula the table is built from (Hendrycks & Gimpel 2016, tanh approximation).
float gelu_tanh_f32(float x);
// The table as f32: entry h = f16(gelu_tanh_f32(f16→f32(h))) widened back to f32.
const float* gelu_f16_table();
// y[i] = gelu(gate[i]) · up[i] through the table (ggml_vec_geglu_f32).
void geglu_scalar(int64_t n, const float* gate, const float* up, float* y);
void geglu_avx2(int64_t n, const float* gate, const float* up, float* y);

}  // namespace minfer::backend::cpu
