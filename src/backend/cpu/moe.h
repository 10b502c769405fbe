// Stage 12 (kernels): the mixture-of-experts kernels (qwen3moe) — expert selection
// (top_k), the normalised routing weights, the expert matmul that runs only the chosen
// experts' rows (mul_mat_id) and the weighted sum over the chosen experts. Internal.
// Invariants: each follows llama.cpp's CPU order (ggml argsort + view, get_rows +
// sum_rows + clamp + div, MUL_MAT_ID's per-element vec_dot, mul + adds in slot order),
// and every output element is computed by one thread in one fixed order, so results
// are bitwise independent of the thread count and of how rows are grouped by expert.
#pragma once

#include <cstdint>

#include "backend/cpu/ops.h"
#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {

// The operands of one mul_mat_id: w [K, N, n_expert] in its weight type (expert e's
// matrix at w + e · N · w_row bytes), x F32 [K, n_b, n_tokens], ids I32 [k, n_tokens]
// (each in [0, n_expert)), y F32 [N, k, n_tokens].
struct MulMatIdArgs {
  DType w_type = DType::kF32;
  int64_t k_dim = 0;  // K
  int64_t n_out = 0;  // N
  int64_t n_expert = 0;
  int64_t n_used = 0;  // k: slots per token
  int64_t n_b = 1;     // activation rows per token: 1 (shared by the slots) or k
  int64_t n_tokens = 0;
  const void* w = nullptr;
  const float* x = nullptr;
  const int32_t* ids = nullptr;
  float* y = nullptr;
};

// Scalar reference: y[n, s, t] = dk.vec_dot(w_{ids[s,t]} row n, from_f32(x[:, s % n_b, t]))
// element by element — the oracle of the grouped kernel (op_mul_mat_id).
void mul_mat_id_reference(const DotKernel& dk, const MulMatIdArgs& a);
// The grouped kernel behind op_mul_mat_id (ids already checked to be in range).
void mul_mat_id_grouped(const DotKernel& dk, const MulMatIdArgs& a, ThreadPool& pool,
                        Scratch& scratch);

// Row-wise references (also the kernels: k × n_tokens values, not worth SIMD):
// the k largest of x[0..n) in descending order, as ggml_argsort_top_k on the CPU
// (std::sort of all indices by x[a] > x[b], then the first k: ties resolve as there).
void top_k_row(int64_t n, const float* x, int64_t k, int32_t* idx_scratch, int32_t* out);
// w[s] = p[ids[s]] / max(Σ_s p[ids[s]] summed in double, 2^-14) for s < k
// (ggml get_rows, sum_rows via ggml_vec_sum_f32, clamp to the smallest normal f16, div).
void moe_weights_row(const float* p, const int32_t* ids, int64_t k, float* w);
// y = ((e_0 · w_0 + e_1 · w_1) + e_2 · w_2) + … over n elements, e_s = e + s · n
// (ggml_mul of the experts by their weights, then ggml_add of the slot views in order).
void moe_sum_row(int64_t n, const float* e, const float* w, int64_t k, float* y);

}  // namespace minfer::backend::cpu
