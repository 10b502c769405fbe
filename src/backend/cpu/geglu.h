// Stage 12 (kernels): GeGLU — gelu_tanh(gate) · up — as ggml's CPU computes it.
// Invariant: every variant gives the same bits (the SIMD twin gathers from the same
// table the scalar kernel indexes), so the result depends on the inputs alone.
//
// ggml (ggml-cpu/vec.h, GGML_GELU_FP16, on for every CPU build) does not evaluate the
// tanh formula per element: it rounds x to f16 and looks the answer up in a 65536-entry
// table of f16 gelu values computed once at start-up; x <= -10 gives 0 and x >= 10
// gives x. Gemma's FFN runs through it in llama.cpp, so minfer uses such a table in
// every numerics mode. Which table: ggml builds it from C that GCC contracts on an FMA
// target (its default native x86 build), 1 + 0.044715·x·x becoming one fma; that table
// differs from the uncontracted one in one entry (x = -1.999, 0xbfff). The default
// numerics keep the uncontracted table; --numerics llamacpp takes the contracted one.
#pragma once

#include <cstdint>

namespace minfer::backend::cpu {

// 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))) in f32, each product rounded (no FMA):
// the formula the table is built from (Hendrycks & Gimpel 2016, tanh approximation).
float gelu_tanh_f32(float x);
// The same with 1 + 0.044715·x·x as fma(0.044715·x, x, 1): ggml's expression as GCC
// contracts it for an FMA target (-ffp-contract=fast, the C default), llama.cpp's native build.
float gelu_tanh_f32_fma(float x);
// The table as f32: entry h = f16(gelu(f16→f32(h))) widened back to f32, gelu being
// gelu_tanh_f32 (fma = false) or gelu_tanh_f32_fma (fma = true).
const float* gelu_f16_table(bool fma = false);
// y[i] = gelu(gate[i]) · up[i] through `table` (ggml_vec_geglu_f32), one of gelu_f16_table's;
// with up == nullptr, y[i] = gelu(gate[i]) (ggml_vec_gelu_f32: the same clamps, no product).
void geglu_scalar(int64_t n, const float* gate, const float* up, float* y, const float* table);
void geglu_avx2(int64_t n, const float* gate, const float* up, float* y, const float* table);

}  // namespace minfer::backend::cpu
