// Stage 12 (kernels): the mul_mat kernel table, after ggml-cpu's type_traits_cpu.
// kernel_table.cpp declares, once per weight type, the activation format it pairs with
// (vec_dot_type) and how an F32 row becomes that format; each ISA's file has one switch
// naming only its kernels for a type (scalar_dot, avx2_dot, avx512_dot, IsaDot below);
// the table joins them into the DotKernel mul_mat runs. Names: dot_<weight>_<act>
// [_<order>]_<isa> and gemm_<weight>_<act>_<isa>, where <order> names another
// accumulation order than ours (ggml, sgemm, tiled, repack_*: llama.cpp's).
// Invariants: an activation row is quantized alone (the same bytes alone or in a
// batch); a dot product has one fixed reduction order per ISA, whatever the caller;
// the scalar column is the reference every SIMD entry is tested against.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace minfer::backend::cpu {

// ggml's block_q8_1: Q8_0 plus s = d * Σq (the activation format of Q4_1 / Q5_1).
struct BlockQ8_1 {
  quant::Half d;
  quant::Half s;
  int8_t qs[quant::kQK];
};
static_assert(sizeof(BlockQ8_1) == 36);

// Quantizes / converts n F32 values (one activation row) into the vec_dot_type.
using FromF32Fn = void (*)(const float* x, void* y, int64_t n);
// Dot product of n elements: w (weight row, its own type) · x (vec_dot_type row).
using VecDotFn = float (*)(int64_t n, const void* w, const void* x);

// A block of dot products: y[j * y_stride + i] = vec_dot(k, w_i, x_j) for n_w weight
// rows w_i (w_stride bytes apart) and n_x activation rows x_j (x_stride bytes apart),
// every element computed with exactly the operations, in the order, of the same ISA's
// vec_dot (invariant 8: the prefill GEMM equals the decode GEMV bit for bit); only the
// loop nest differs, so a weight block is loaded once for several activation rows.
struct GemmArgs {
  int64_t k = 0;
  const void* w = nullptr;
  uint64_t w_stride = 0;
  int64_t n_w = 0;
  const void* x = nullptr;
  uint64_t x_stride = 0;
  int64_t n_x = 0;
  float* y = nullptr;
  int64_t y_stride = 0;  // in floats
};
using GemmFn = void (*)(const GemmArgs& a);

// One ISA's kernels for one weight type: what the ISA files return (nullptr dot: none).
// The fields mean what DotKernel's of the same names mean.
struct IsaDot {
  VecDotFn dot = nullptr;
  GemmFn gemm = nullptr;
  int64_t gemv_rows_max = 1;
  VecDotFn dot_batch = nullptr;
  int64_t batch_min_rows = 2;
  int64_t batch_w_rows_multiple = 1;
};

struct DotKernel {
  DType vec_dot_type = DType::kF32;
  FromF32Fn from_f32 = nullptr;
  VecDotFn vec_dot = nullptr;
  GemmFn gemm = nullptr;  // optional register-blocked form of vec_dot (nullptr: loop)
  // Only in the llamacpp-numerics table: the dot used when the activation has >= 2 rows,
  // as llama.cpp's batched sgemm accumulates in another order than its GEMV. It makes a
  // row's result depend on its batch (the one place that mode gives up invariant 8's
  // chunking clause, because llama.cpp itself does).
  VecDotFn vec_dot_batch = nullptr;
  // Activation rows `gemm` takes in one pass over the weights, each row's result
  // bitwise its GEMV (a small decode batch reads the weights once): mul_mat hands such
  // a batch the whole chunk of weight rows, as it does a single decode row. 0: `gemm`
  // serves batches only, tile by tile; one decode row takes vec_dot tile by tile, with the
  // next tile prefetched.
  int64_t gemv_rows_max = 1;
  // Only in the llamacpp-numerics repack table: nonzero, vec_dot_batch (and from_f32_batch,
  // when set) serve only the batch's rows in whole groups of batch_group from its first
  // (row j < m − m % batch_group), the rest take vec_dot / from_f32 — llama.cpp's repack
  // GEMM takes an ubatch's rows 4 at a time and its GEMV the remainder.
  int64_t batch_group = 0;
  FromF32Fn from_f32_batch = nullptr;
  // vec_dot_batch serves a batch of at least this many rows (llama.cpp's tiled K-quant
  // matmul starts at 8; its f16 sgemm at 2).
  int64_t batch_min_rows = 2;
  // vec_dot_batch serves only weights whose row count this divides (llamafile's tinyBLAS
  // declines others, which then take the GEMV's order).
  int64_t batch_w_rows_multiple = 1;
};

// Activation converters, shared by every ISA so SIMD and scalar dots read identical
// activation bytes. Q8_0/Q8_1 follow ggml-cpu's x86 path (d = amax/127 stored as
// fp16, q = round-half-even(x · 127/amax)); Q8_K is ggml's quantize_row_q8_K_ref.
void from_f32_q8_0(const float* x, void* y, int64_t n);
void from_f32_q8_1(const float* x, void* y, int64_t n);
void from_f32_q8_k(const float* x, void* y, int64_t n);
void from_f32_f16(const float* x, void* y, int64_t n);
void from_f32_bf16(const float* x, void* y, int64_t n);
void from_f32_f32(const float* x, void* y, int64_t n);
// AVX2 forms of the Q8_0 / Q8_1 converters: the same bytes (ggml's x86 path is itself
// this AVX2 code), tested equal to the scalar ones.
void from_f32_q8_0_avx2(const float* x, void* y, int64_t n);
void from_f32_q8_1_avx2(const float* x, void* y, int64_t n);
// AVX2 form of the Q8_K converter (ggml's quantize_row_q8_K_ref), byte for byte.
void from_f32_q8_k_avx2(const float* x, void* y, int64_t n);
// F16C form of the F16 converter, byte for byte (vec_dot_float_avx2.cpp).
void from_f32_f16_avx2(const float* x, void* y, int64_t n);

// The kernel table's columns (kernel_table.cpp), each a DotKernel with vec_dot nullptr
// where the weight type has no kernel at that ISA. Scalar: the reference. AVX2 (+FMA,
// F16C) and AVX-512 (F, BW, VL, VNNI): only call on a CPU that has them (detect_isa).
DotKernel scalar_dot_kernel(DType weight_type);
DotKernel avx2_dot_kernel(DType weight_type);
DotKernel avx512_dot_kernel(DType weight_type);
// The AVX2 column where it has a kernel, else the scalar one; the AVX-512 column where it
// has one, else that. Chosen once per type: never a run-time fallback.
DotKernel avx2_or_scalar_dot_kernel(DType weight_type);
DotKernel avx512_or_avx2_dot_kernel(DType weight_type);

// Each ISA file's column: its kernels for a weight type, nothing about the pairing.
IsaDot scalar_dot(DType weight_type);  // vec_dot_scalar.cpp
IsaDot avx2_dot(DType weight_type);    // vec_dot_avx2.cpp
// AVX-512 (vec_dot_avx512.cpp): F32 / F16 / BF16 (float_dot_avx512), Q6_K, and the one-lane-per-row
// kernels of avx512_rows_dot (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: bitwise the scalar reference, any n_x)
// and avx512_kquant_dot (Q4_K, Q5_K).
IsaDot avx512_dot(DType weight_type);
IsaDot avx512_rows_dot(DType weight_type);    // vec_dot_avx512_rows.cpp
IsaDot avx512_kquant_dot(DType weight_type);  // vec_dot_avx512_kquants.cpp
// llama.cpp's own orders on AVX2 (vec_dot_avx2.cpp), for --numerics llamacpp: F16 and F32
// (ggml_vec_dot_* for one activation row, llamafile's tinyBLAS — one 16-lane FMA
// accumulator per output — from 2 rows, as its AVX-512 build computes them), Q5_0 and Q5_K (ggml's
// x86 lanes; Q5_K's tiled matmul from 8 rows), Q6_K (its tiled matmul from 8 rows); dot nullptr for
// the types whose AVX2 kernel already has llama.cpp's order.
IsaDot avx2_ggml_dot(DType weight_type);
// The same on llama.cpp's AVX2-only build: F32 and F16 in its 8-lane orders
// (ggml_vec_dot_* 4 × 8 lanes over steps of 32; tinyBLAS<8>), every other type as above.
IsaDot avx2_build_ggml_dot(DType weight_type);

// F32 / F16 / BF16 weights (default numerics): 16 fma lanes per output, lanes l and l + 8
// added, then ((0+4)+(2+6))+((1+5)+(3+7)), the n % 16 tail fma'd on in order — the
// scalar column's lanes16_fma_dot. Each ISA's dot, GEMV (n_x 1: four rows' fma chains
// at once, or on AVX2 one short row at a time) and GEMM (weights widened to f32 once per call, 4 ×
// 6 outputs per AVX-512 tile, 2 × 3 per AVX2 tile) give those bits (vec_dot_float_avx2.cpp,
// _avx512.cpp).
IsaDot float_dot_avx2(DType weight_type);
IsaDot float_dot_avx512(DType weight_type);
// AVX2 Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 for the default numerics (vec_dot_avx2_exact.cpp):
// the scalar reference's exact integers and float expression per block, bitwise equal to
// it (and to the AVX-512 rows kernels); the dot, and a GEMV / GEMM of 8 outputs per tile.
IsaDot avx2_ref_legacy_dot(DType weight_type);
// Q4_K / Q5_K (vec_dot_avx2_kquants.cpp): such tiles over super-blocks, bitwise
// dot_q4_k_q8_k_avx2 / dot_q5_k_q8_k_avx2.
void gemm_q4_k_q8_k_avx2(const GemmArgs& a);
void gemm_q5_k_q8_k_avx2(const GemmArgs& a);
// AVX2 Q6_K (vec_dot_avx2_q6k.cpp): ggml's x86 lane order (8 exact integer lanes per
// super-block, an fma each into 8 f32 lanes, one tree at the end), the scalar twin's
// bits; the batch GEMM (n_x >= 2) decodes each super-block once for 8 activation rows.
float dot_q6_k_q8_k_avx2(int64_t n, const void* w, const void* x);
void gemm_q6_k_q8_k_avx2(const GemmArgs& a);
// AVX-512 VNNI Q6_K batch GEMM (n_x >= 2) with one zmm per x86 lane of 16 rows: bitwise
// the Q6_K GEMV of avx512_dot (ggml's x86 lane order).
void gemm_q6_k_q8_k_rows_avx512(const GemmArgs& a);

// F32 · F32 dot of n elements (attention scores); scalar and AVX2 variants.
float dot_f32_scalar(int64_t n, const float* a, const float* b);
float dot_f32_avx2(int64_t n, const float* a, const float* b);
// y += a · x over n elements; scalar and AVX2 variants (attention V accumulation).
void axpy_f32_scalar(int64_t n, float a, const float* x, float* y);
void axpy_f32_avx2(int64_t n, float a, const float* x, float* y);

// Attention over a chunk of f32 cells, each bitwise a loop of the per-cell forms above:
// scores: out[c] = dot_f32(hd, q, k + c · k_stride) · scale for c < n_cells;
// axpy rows: for c < n_cells in order, y += p[c] · v_c (v_c = v + c · v_stride).
// The SIMD forms keep several cells' dots in flight and y in registers across cells.
void attn_scores_f32_scalar(int64_t n_cells, int64_t hd, const float* q, const float* k,
                            int64_t k_stride, float scale, float* out);
void attn_scores_f32_avx2(int64_t n_cells, int64_t hd, const float* q, const float* k,
                          int64_t k_stride, float scale, float* out);
void attn_scores_f32_avx512(int64_t n_cells, int64_t hd, const float* q, const float* k,
                            int64_t k_stride, float scale, float* out);
// Row sums in double, each row's terms added one by one in element order (ggml_float, as
// ggml-cpu's rms_norm_f32 and norm_f32): out[r] = Σ_i t(rows[r][i]) for nr ≤ 8 rows of n,
// t = double(x) (kSum), double(x · x) (kSquares: the product in f32) or
// double((x − c[r]) · (x − c[r])) (kCentredSquares: difference and product in f32). The
// SIMD form runs the rows' chains side by side, one lane each, with the scalar's bits.
enum class RowSum : uint8_t { kSum, kSquares, kCentredSquares };
// One term of such a sum (c: the row's centre, read by kCentredSquares only). Static: each
// translation unit keeps its own copy, compiled for its own ISA (no AVX2 copy shared by
// the linker with code that runs before cpuid says AVX2 is there).
static inline double row_sum_term(RowSum t, float x, float c) {
  const float v = t == RowSum::kCentredSquares ? x - c : x;
  return static_cast<double>(t == RowSum::kSum ? v : v * v);
}
void row_sums_f64_scalar(const float* const* rows, int nr, int64_t n, RowSum t, const float* c,
                         double* out);
void row_sums_f64_avx2(const float* const* rows, int nr, int64_t n, RowSum t, const float* c,
                       double* out);
// A chunk's softmax weights: out[i] = expf(s[i] − m) (the subtraction in f32, then
// glibc's expf; the SIMD forms are that expf's algorithm, bit for bit, in double lanes:
// expf_glibc.h — four per step on AVX2, eight on AVX-512).
void attn_exp_f32_scalar(int64_t n, const float* s, float m, float* out);
void attn_exp_f32_avx2(int64_t n, const float* s, float m, float* out);
void attn_exp_f32_avx512(int64_t n, const float* s, float m, float* out);
// Two query heads that share a KV head over the same cells: bitwise two calls of
// attn_scores_f32 (out0 for q0, out1 for q1); each cell's K row is loaded once for both.
void attn_scores2_f32_scalar(int64_t n_cells, int64_t hd, const float* q0, const float* q1,
                             const float* k, int64_t k_stride, float scale, float* out0,
                             float* out1);
void attn_scores2_f32_avx512(int64_t n_cells, int64_t hd, const float* q0, const float* q1,
                             const float* k, int64_t k_stride, float scale, float* out0,
                             float* out1);
void attn_axpy_rows_f32_scalar(int64_t n_cells, int64_t n, const float* p, const float* v,
                               int64_t v_stride, float* y);
void attn_axpy_rows_f32_avx2(int64_t n_cells, int64_t n, const float* p, const float* v,
                             int64_t v_stride, float* y);
void attn_axpy_rows_f32_avx512(int64_t n_cells, int64_t n, const float* p, const float* v,
                               int64_t v_stride, float* y);
// Several query rows (a block's tokens, heads of one KV head) over the same chunk of f32
// cells: bitwise nq calls of the single-query form above (q[j] → out[j]; p[j], y[j]); each
// K or V row is loaded once for all of them, and their sums run as independent chains.
void attn_scores_f32_multi_avx512(int64_t nq, const float* const* q, int64_t n_cells, int64_t hd,
                                  const float* k, int64_t k_stride, float scale, float* const* out);
void attn_axpy_rows_f32_multi_avx512(int64_t nq, int64_t n_cells, int64_t n, const float* const* p,
                                     const float* v, int64_t v_stride, float* const* y);

// llama.cpp's f16 dot orders (its AVX-512 build), each bit-exact:
//  vec:   ggml_vec_dot_f16 — 4 × 16 f32 lanes fused-multiply-added over 64-element steps,
//         lanes folded (0+2, 1+3, 0+1), reduced 8/4/2/1 as _mm512_reduce_add_ps, tail
//         (n % 64) added in double. Scalar (portable) and AVX2 forms.
//  sgemm: llamafile's tinyBLAS (prefill, n % 16 == 0) — one 16-lane accumulator over
//         16-element steps, then the same 8/4/2/1 reduction.
float ggml_dot_f16_vec_scalar(int64_t n, const uint16_t* x, const uint16_t* y);
// e^x as one lane of ggml's vectorised expf (ggml_v_expf, AVX-512 form).
float ggml_v_expf_lane(float x);
// The same two on llama.cpp's AVX2 build (no AVX-512), each bit-exact:
//  ggml_vec_dot_f16 — 4 × 8 f32 lanes fused-multiply-added over 32-element steps, folded
//  (0+2) + (1+3), the two halves added, two _mm_hadd_ps, the tail (n % 32) in double;
//  ggml_v_expf — the polynomial without its constant term, then fma(j, 2^n, 2^n) (the
//  AVX-512 form adds the 1 inside the polynomial and scales by scalef), |n| > 126 in two
//  scaling steps, |n| > 192 to 0 / inf.
float ggml_dot_f16_vec8_scalar(int64_t n, const uint16_t* x, const uint16_t* y);
float ggml_dot_f16_vec8_avx2(int64_t n, const uint16_t* x, const uint16_t* y);
// llama.cpp's F16 / F32 weight dots as AVX2 code (vec_dot_ggml_float_avx2.cpp): ggml_vec_dot
// and tinyBLAS's output order of its AVX-512 build (…_ggml / …_sgemm) and of its AVX2
// build (…_ggml8 / …_sgemm8); a tinyBLAS form falls back to its GEMV where tinyBLAS
// declines the row length.
float dot_f16_f16_ggml_avx2(int64_t n, const void* w, const void* x);
float dot_f16_f16_sgemm_avx2(int64_t n, const void* w, const void* x);
float dot_f32_f32_ggml_avx2(int64_t n, const void* w, const void* x);
float dot_f32_f32_sgemm_avx2(int64_t n, const void* w, const void* x);
float dot_f16_f16_ggml8_avx2(int64_t n, const void* w, const void* x);
float dot_f16_f16_sgemm8_avx2(int64_t n, const void* w, const void* x);
float dot_f32_f32_ggml8_avx2(int64_t n, const void* w, const void* x);
float dot_f32_f32_sgemm8_avx2(int64_t n, const void* w, const void* x);
float ggml_v_expf8_lane(float x);
// llama.cpp's CPU "repack" extra buffer (on by default, x86 with AVX2): at load it re-lays
// the MUL_MAT weights of some types whose row count is a multiple of 8 into 8-row
// interleaved blocks (llamacpp_repacks) and multiplies them with its own GEMV / GEMM
// (ggml-cpu repack.cpp), whose float order per output row is (scalar references in
// vec_dot_repack.cpp; Σ are exact integers):
//  Q4_0 (q4_0_8x8, GEMV and GEMM alike): acc = fma(float(Σ_block q·y), d_w·d_x, acc) from 0,
//   block after block.
//  Q4_K (q4_K_8x8): two accumulators, result acc − accm. GEMV, per super-block:
//   acc = fma(float(Σ_j sc_j·Σq·y), d_w·d_x, acc), accm = fma(float(Σ_j m_j·bsum_j), dmin_w·d_x,
//   accm); GEMM (rows in whole groups of 4): the same per pair of sub-blocks (4 per
//   super-block), on activations from quantize_mat_q8_K_4x8 (from_f32_q8_k_mat4).
// The token embedding is not repacked (llama.cpp places it for get_rows), nor is a type or
// shape outside llamacpp_repacks; those keep the plain llamacpp kernels.
bool llamacpp_repacks(DType weight_type, int64_t n_rows);
float dot_q4_0_q8_0_repack_scalar(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k_repack_gemv_scalar(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k_repack_gemm_scalar(int64_t n, const void* w, const void* x);
// quantize_mat_q8_K_4x8 per row: quantize_row_q8_K_ref's bytes except the scale's sign —
// negative when any element equals +amax (the reference takes the first element of
// largest magnitude), so only a ±amax tie differs.
void from_f32_q8_k_mat4(const float* x, void* y, int64_t n);
// ggml's x86 Q5_0 · Q8_0 order (its plain kernel; Q5_0 is not repacked on x86): per block an
// fma of d_w·d_x into 8 f32 lanes, lane l the exact sum of elements 4l..4l+3, then
// hsum_float_8.
float dot_q5_0_q8_0_ggml_scalar(int64_t n, const void* w, const void* x);
// ggml-cpu's tiled K-quant matmul (ggml-cpu/tiled, on by default) takes a MUL_MAT of >= 8
// activation rows whose weight is a K-quant outside the repack buffer; its AVX-512 VNNI
// microkernel adds, per super-block in order, acc = fma(float(Σ sc·(q − 32)·y) · d_w, d_x, acc)
// for Q6_K (its add of the product to the tile compiles to an fma).
float dot_q6_k_q8_k_tiled_scalar(int64_t n, const void* w, const void* x);
float dot_q6_k_q8_k_tiled_avx2(int64_t n, const void* w, const void* x);  // vec_dot_avx2_q6k.cpp
// Q5_K (not repacked on x86), per super-block from exact s1 = Σ_j sc_j·Σq·y and
// s2 = Σ_j m_j·bsum_j:
//  GEMV (ggml_vec_dot_q5_K_q8_K's x86 form, the same in its AVX2 and AVX-512 builds): 8 f32
//   lanes, lane l = fma(d_x·d_w, float(Σ_j sc_j·Σ of elements 4l..4l+3 of sub-block j), lane l);
//   beside them summs = fma(−d_x·dmin_w, float(s2), summs); the result hsum_float_8 + summs.
//  tiled (>= 8 activation rows): r = fma(−dmin_w, float(s2), d_w·float(s1)), then
//   acc = fma(r, d_x, acc) — its AVX2 and AVX-512 VNNI microkernels alike.
float dot_q5_k_q8_k_ggml_scalar(int64_t n, const void* w, const void* x);
float dot_q5_k_q8_k_tiled_scalar(int64_t n, const void* w, const void* x);
// AVX2 forms (vec_dot_llamacpp_avx2.cpp), bitwise equal to the above.
float dot_q4_0_q8_0_repack_avx2(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k_repack_gemv_avx2(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k_repack_gemm_avx2(int64_t n, const void* w, const void* x);
float dot_q5_0_q8_0_ggml_avx2(int64_t n, const void* w, const void* x);
float dot_q5_k_q8_k_ggml_avx2(int64_t n, const void* w, const void* x);
float dot_q5_k_q8_k_tiled_avx2(int64_t n, const void* w, const void* x);
// The AVX-512 one-lane-per-row Q4_0 with the repack expression (vec_dot_avx512_rows.cpp).
IsaDot avx512_rows_q4_0_repack_dot();
// The llamacpp-numerics tables (kernel_table.cpp). Plain: llama.cpp's orders where
// avx2_ggml_dot has them, else the AVX2 column (else scalar). Repack: a kernel for the
// types llamacpp_repacks names on this CPU (AVX-512 rows where detect_isa() says so, else
// AVX2); vec_dot nullptr otherwise.
DotKernel llamacpp_dot_kernel(DType weight_type);
DotKernel llamacpp_avx2_build_dot_kernel(DType weight_type);  // avx2_build_ggml_dot's
DotKernel llamacpp_repack_dot_kernel(DType weight_type);

// y[i] = silu(x[i]) (· up[i] when up is not null) with ggml's vectorised e^x (the Arm
// optimized-routines polynomial, scaled by 2^n as _mm512_scalef_ps): llama.cpp's CPU
// silu/swiglu on a row's 16-aligned body. Both forms give the same bits.
void silu_poly_scalar(int64_t n, const float* x, const float* up, float* y);
void silu_poly_avx2(int64_t n, const float* x, const float* up, float* y);
// ... and as llama.cpp's AVX2 build computes it (ggml_v_expf8_lane; 8-lane row bodies).
void silu_poly8_scalar(int64_t n, const float* x, const float* up, float* y);
void silu_poly8_avx2(int64_t n, const float* x, const float* up, float* y);
// f16 → f32 widening of n elements (exact, so both variants give the same bits).
void f16_to_f32_scalar(int64_t n, const uint16_t* x, float* y);
void f16_to_f32_avx2(int64_t n, const uint16_t* x, float* y);
// Q8_0 / Q4_0 blocks → f32, n a multiple of 32: d · q per element, one rounding, so the
// bits of quant::dequantize (the KV cache's read of a quantized row).
void q8_0_to_f32_avx2(const void* x, float* y, int64_t n);
void q4_0_to_f32_avx2(const void* x, float* y, int64_t n);

}  // namespace minfer::backend::cpu
