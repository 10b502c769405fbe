// Stage 12 (kernels): the CPU op kernels behind CpuBackend::execute, one family per
// file (ops_elementwise, ops_norm, ops_rows, ops_rope, ops_attention, mul_mat). Internal.
// Invariants: a kernel validates its data (ids, cells, windows) before any thread
// writes, so an Error leaves outputs untouched; threads split output rows / heads by
// (ith, nth) and never one reduction, so every result is independent of nth.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/vec_dot.h"
#include "core/result.h"
#include "graph/graph.h"

namespace minfer::backend::cpu {

// The kernel set of one ISA, fixed when the backend is created.
struct IsaKernels {
  DotKernel (*dot_kernel)(DType weight_type) = nullptr;  // mul_mat table
  // llamacpp numerics with llama.cpp's CPU_REPACK buffer: the table for the weights it
  // repacks (llamacpp_repacks, not the token embedding); nullptr: none are.
  DotKernel (*repack_dot_kernel)(DType weight_type) = nullptr;
  float (*dot_f32)(int64_t n, const float* a, const float* b) = nullptr;
  void (*axpy_f32)(int64_t n, float a, const float* x, float* y) = nullptr;
  // attention over a chunk of f32 cells (vec_dot.h): bitwise loops of dot_f32 / axpy_f32
  void (*attn_scores_f32)(int64_t n_cells, int64_t hd, const float* q, const float* k,
                          int64_t k_stride, float scale, float* out) = nullptr;
  // two query heads of one KV head at once: bitwise two attn_scores_f32 calls; nullptr:
  // the op calls attn_scores_f32 per head
  void (*attn_scores2_f32)(int64_t n_cells, int64_t hd, const float* q0, const float* q1,
                           const float* k, int64_t k_stride, float scale, float* out0,
                           float* out1) = nullptr;
  void (*attn_axpy_rows_f32)(int64_t n_cells, int64_t n, const float* p, const float* v,
                             int64_t v_stride, float* y) = nullptr;
  // several query rows over the same cells (vec_dot.h): bitwise loops of the two above;
  // nullptr: the op loops
  void (*attn_scores_f32_multi)(int64_t nq, const float* const* q, int64_t n_cells, int64_t hd,
                                const float* k, int64_t k_stride, float scale,
                                float* const* out) = nullptr;
  void (*attn_axpy_rows_f32_multi)(int64_t nq, int64_t n_cells, int64_t n, const float* const* p,
                                   const float* v, int64_t v_stride, float* const* y) = nullptr;
  // out[i] = expf(s[i] − m): a chunk's softmax weights (bitwise std::exp per element)
  void (*attn_exp_f32)(int64_t n, const float* s, float m, float* out) = attn_exp_f32_scalar;
  void (*f16_to_f32)(int64_t n, const uint16_t* x, float* y) = nullptr;  // exact widening
  // a quantized KV row → f32 (quant::dequantize's bits); nullptr: quant::dequantize
  void (*q8_0_to_f32)(const void* x, float* y, int64_t n) = nullptr;
  void (*q4_0_to_f32)(const void* x, float* y, int64_t n) = nullptr;
  void (*silu_poly)(int64_t n, const float* x, const float* up, float* y) = nullptr;
  // the row body silu_poly takes: a multiple of this many elements (ggml's vector width:
  // 16 on its AVX-512 build, 8 on its AVX2 build); glibc's expf on the rest
  int64_t silu_lanes = 16;
  void (*geglu)(int64_t n, const float* gate, const float* up, float* y,
                const float* table) = nullptr;  // geglu.h
  // AttnNumerics::kGgmlF16 (attn_ggml_f16.h): twins of the scalar helpers; nullptr = scalar.
  float (*ggml_fa_dot_f16)(int64_t n, const uint16_t* x, const uint16_t* y) = nullptr;
  void (*ggml_fa_mad_f16)(int64_t n, uint16_t* y, const uint16_t* x, float v) = nullptr;
  void (*ggml_fa_scale_f16)(int64_t n, uint16_t* y, float v) = nullptr;
  // the tiled flash attention's softmax as llama.cpp's AVX2 build runs it (8 lanes, its
  // AVX2 expf) instead of its AVX-512 build (16 lanes)
  bool ggml_fa_tiled_lanes8 = false;
  // ggml_norm's centred squares reduced 8 at a time (its AVX2 build's ggml_vec_cvar_f32)
  // instead of 16 (its AVX-512 build)
  bool ggml_norm_lanes8 = false;
  // norms' per-row sums in double, in element order (vec_dot.h), up to 8 rows a call
  void (*row_sums_f64)(const float* const* rows, int nr, int64_t n, RowSum t, const float* c,
                       double* out) = row_sums_f64_scalar;
};
IsaKernels scalar_kernels();
IsaKernels avx2_kernels();
IsaKernels avx512_kernels();
// AVX2 + llama.cpp's orders (± its repack; its flash attention in f16 or f32 arithmetic;
// the vector width of its build: AVX-512, or AVX2 only)
IsaKernels llamacpp_kernels(bool repack, bool fa_f16_arith, bool avx2_build = false);

// Growable per-backend work memory: resized only when a node needs more than any
// before it, so the steady-state decode step allocates nothing.
struct Scratch {
  std::vector<uint8_t> bytes;
  uint8_t* get(size_t n) {
    if (bytes.size() < n) bytes.resize(n);
    return bytes.data();
  }
};

struct OpCtx {
  const graph::ComputeGraph& graph;
  const NodeData& data;
  ThreadPool& pool;
  const IsaKernels& k;
  Scratch& scratch;
};

// What the CPU kernels accept (CpuBackend::supports_op).
bool cpu_supports(const graph::Node& node, std::span<const DType> src_dtypes);

// add mul scale silu swiglu geglu tanh cont
Status op_elementwise(const OpCtx& c, graph::NodeId id);
Status op_norm(const OpCtx& c, graph::NodeId id);  // rms_norm rms_norm_mul softmax
Status op_get_rows(const OpCtx& c, graph::NodeId id);
Status op_kv_store(const OpCtx& c, graph::NodeId id);
Status op_rope(const OpCtx& c, graph::NodeId id);
Status op_attention(const OpCtx& c, graph::NodeId id);
Status op_mul_mat(const OpCtx& c, graph::NodeId id);
Status op_mul_mat_id(const OpCtx& c, graph::NodeId id);  // mul_mat_id.cpp
Status op_moe(const OpCtx& c, graph::NodeId id);         // top_k moe_weights moe_sum
Status op_hadamard(const OpCtx& c, graph::NodeId id);    // hadamard.cpp

// Even split of [0, n) into nth contiguous ranges: thread ith gets [*lo, *hi).
inline void split_range(int64_t n, int32_t ith, int32_t nth, int64_t* lo, int64_t* hi) {
  *lo = n * ith / nth;
  *hi = n * (ith + 1) / nth;
}

// Work of [0, n) items in chunks of at least `min_items` (small ops run inline on the
// caller: waking a worker costs more than they do), at most kChunksPerThread per
// thread so a preempted worker leaves the rest to the others; split work comes in a
// multiple of the thread count (3 chunks on 2 threads would leave one thread twice the
// other's rows). body(lo, hi, thread) sees a contiguous item range; which thread runs it
// never changes what it computes.
constexpr int64_t kChunksPerThread = 4;
template <typename F>
void parallel_range(ThreadPool& pool, int64_t n, int64_t min_items, F&& body) {
  if (n <= 0) return;
  const int64_t nth = pool.n_threads();
  const int64_t max_chunks = nth * kChunksPerThread;
  int64_t n_chunks = std::clamp<int64_t>(n / std::max<int64_t>(1, min_items), 1, max_chunks);
  if (n_chunks > 1) n_chunks = std::min((n_chunks + nth - 1) / nth * nth, std::min(n, max_chunks));
  auto chunk = [&](int64_t i, int32_t thread) {
    int64_t lo, hi;
    split_range(n, static_cast<int32_t>(i), static_cast<int32_t>(n_chunks), &lo, &hi);
    if (lo < hi) body(lo, hi, thread);
  };
  pool.for_each(n_chunks, chunk);
}

}  // namespace minfer::backend::cpu
