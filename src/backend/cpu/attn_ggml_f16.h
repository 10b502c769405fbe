// Stage 12 (kernels): the f16 vector helpers of llama.cpp's CPU flash attention
// (ggml-cpu vec.h / vec.cpp) in its two x86 forms — f16 arithmetic (a native build on a
// CPU with AVX512-FP16) and f32 arithmetic on widened halves (every other x86 build: a
// GGML_NATIVE=OFF build, the PyPI wheels, a native build on a CPU without AVX512-FP16)
// — for AttnNumerics::kGgmlF16 (ops_attention.cpp).
// Invariant: every variant gives the scalar reference's bits; the x86 ones are reached
// only after cpuid and are twin-tested against it.
#pragma once

#include <cstdint>

namespace minfer::backend::cpu {

// Elements per f16-arithmetic step of ggml's AVX512-FP16 helpers (32 halves × 4
// registers); the n % 128 leftovers run in f32.
inline constexpr int64_t kGgmlF16Step = 128;

// y = f16(y · v): f16(y · f16(v)) on the f16 steps (one rounding: the product of two
// halves is exact in f32), f16(y · v) on the leftovers.
void ggml_scale_f16_scalar(int64_t n, uint16_t* y, float v);
// y = f16(x · v + y), the accumulator rounded to f16 every call: on the f16 steps the
// fused f16 multiply-add x · f16(v) + y with one rounding (fma_f16_exact), on the
// leftovers the f32 fma rounded to half.
void ggml_mad_f16_scalar(int64_t n, uint16_t* y, const uint16_t* x, float v);

// The same two helpers as ggml's x86 builds without __AVX512FP16__ run them (simd-mappings.h
// GGML_F32Cx16 / GGML_F32Cx8: halves widened to f32, f32 arithmetic, _mm*_cvtps_ph rounding
// to nearest), every element alike whatever the vector width: y = f16(y · v) and
// y = f16(fma(x, v, y)) — v is never rounded to f16.
void ggml_scale_f16_f32arith_scalar(int64_t n, uint16_t* y, float v);
void ggml_mad_f16_f32arith_scalar(int64_t n, uint16_t* y, const uint16_t* x, float v);
// AVX2 / F16C / FMA twins of the two above (bitwise equal to them).
void ggml_scale_f16_f32arith_avx2(int64_t n, uint16_t* y, float v);
void ggml_mad_f16_f32arith_avx2(int64_t n, uint16_t* y, const uint16_t* x, float v);

// llama.cpp's tiled flash attention (ggml-cpu ops.cpp, flash_attn_ext_tiled: a ubatch of
// >= kGgmlFaTileRows query rows over an F16 cache), one query row: the cells it sees cut
// into tiles of kGgmlFaTileCells at fixed cell indices (cell / 64), per tile the f32
// scores (one sequential fma chain over the head dims, Q unrounded, K widened), the
// tile max, the online rescale (expf), ggml's vector expf and 16-lane tree sums added
// in double, and the V accumulator in f32 (one fma chain per dim, cell after cell).
// `cells`: the visible cells, ascending. out[hd_v] = the row's attention output.
// lanes8: the softmax as its AVX2 build runs it (ggml_v_expf8_lane, 8-lane tree sums).
inline constexpr int64_t kGgmlFaTileRows = 64;
inline constexpr int64_t kGgmlFaTileCells = 64;
void ggml_fa_tiled_row(int64_t hd, int64_t hd_v, const float* q, const uint16_t* k,
                       int64_t k_stride, const uint16_t* v, int64_t v_stride, const int32_t* cells,
                       int64_t n_cells, float scale, float* acc, float* out, bool lanes8 = false);

// llama.cpp's KV view: the used cells padded to kGgmlKvPad, at least kGgmlKvPad
// (llama-kv-cache.cpp get_n_kv); a one-token ubatch over a view of >= kGgmlFaSplitKvMin
// cells takes its split-KV flash attention (ops.cpp, use_split_kv_path).
inline constexpr int64_t kGgmlKvPad = 256;
inline constexpr int64_t kGgmlFaSplitKvMin = 512;

// AVX2 twin of ggml_dot_f16_vec_scalar (vec_dot.h: ggml_vec_dot_f16's 4 × 16 f32 lanes
// over 64-element steps, _mm512_reduce_add_ps's tree, the tail in double).
float ggml_dot_f16_vec_avx2_fa(int64_t n, const uint16_t* x, const uint16_t* y);
// AVX512-FP16 twins of the two helpers above (the instructions llama.cpp's build uses).
void ggml_scale_f16_avx512fp16(int64_t n, uint16_t* y, float v);
void ggml_mad_f16_avx512fp16(int64_t n, uint16_t* y, const uint16_t* x, float v);
// cpuid: AVX-512 F/BW/VL and AVX512-FP16 (and the OS saves the zmm state).
bool cpu_has_avx512fp16();

}  // namespace minfer::backend::cpu
