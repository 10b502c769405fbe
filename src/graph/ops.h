// Stage 7 (graph IR): the op set, tensor shapes and per-op parameters.
// Invariants: ops are pure descriptions (no data, no kernels); OpParams is a small
// trivially copyable POD compared by value, so structural equality is plain `==`.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/dtype.h"

namespace minfer::graph {

// Index of a node in its graph's build order. Build order is also a valid
// topological order and the execution order (sources always precede consumers).
using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

// Which backend executes a node / owns its memory. Ids are small integers handed out
// by the backend registry (src/sched/); the graph never knows what a backend is.
using BackendId = int16_t;
inline constexpr BackendId kBackendCpu = 0;

// The op set of a Llama/Qwen2-style forward. Leaves (kInput, kWeight, kKvRegion)
// have no sources; everything else is computed. Values are stable (they appear in
// JSON exports); append new ops before kCount.
enum class Op : uint8_t {
  kInput,       // per-step data filled after allocation (token ids, positions, windows)
  kWeight,      // model tensor owned outside the graph (mmap), bound by name
  kKvRegion,    // persistent KV region of one layer (K or V), allocated once at n_ctx
  kGetRows,     // rows of src0 (any dtype) selected by I32 ids src1 → F32
  kRmsNorm,     // x / sqrt(mean(x²) + eps) over ne0
  kMul,         // elementwise a * b, b broadcast over dims where b.ne == 1
  kAdd,         // elementwise a + b, b broadcast
  kMulMat,      // w [K, N] (any quant dtype) × x F32 [K, M] → F32 [N, M]
  kRope,        // rotary embedding of x [head_dim, n_head, n_tokens] by I32 positions
  kKvStore,     // write rows into a kv region at I32 cells; result aliases the region
  kAttention,   // softmax(scale·QKᵀ)V over the cells listed by a window input (GQA)
  kSilu,        // x · sigmoid(x)
  kSwiglu,      // silu(gate) · up (fused by construction, not by the pass)
  kSoftmax,     // softmax over ne0 of (scale · x)
  kScale,       // x · scale
  kCont,        // contiguous copy of src0 (cpy/cont)
  kReshape,     // same elements, new shape; aliases src0
  kView,        // contiguous window of src0 at an element offset; aliases src0
  kRmsNormMul,  // fused rms_norm(x) * w, produced only by the fusion pass
  kGeglu,       // gelu_tanh(gate) · up, gelu as ggml's CPU table (f16 in, f16 out)
  kTanh,        // tanh(x) (logit soft-capping: cap · tanh(x / cap))
  // Mixture of experts (qwen3moe; llama.cpp's build_moe_ffn):
  kTopK,        // I32 indices of the k largest of each F32 row, descending (argsort_top_k)
  kMoeWeights,  // probs[ids] of each row divided by their sum (norm_topk_prob)
  kMulMatId,    // per (slot, token): expert ids[slot, token]'s matrix × its row (mul_mat_id)
  kMoeSum,      // Σ over slots, in slot order, of expert row · its weight
  // Encoders (bert; llama.cpp's build_norm LLM_NORM / build_ffn LLM_FFN_GELU):
  kNorm,  // (x − mean(x)) / sqrt(var(x) + eps) over ne0 (LayerNorm without its affine)
  kGelu,  // gelu_tanh(x) through ggml's CPU table (f16 in, f16 out), as kGeglu's gate
  // Quantized-KV rotation (llama.cpp's attn_rot, llama_mul_mat_hadamard):
  kHadamard,  // each n_rot-element block of x times the orthonormal Walsh-Hadamard matrix
  kCount,
};

std::string_view op_name(Op op);

// Leaves take no sources and get no kernel.
inline bool op_is_leaf(Op op) {
  return op == Op::kInput || op == Op::kWeight || op == Op::kKvRegion;
}
// Ops whose result is a window onto another node's memory (no buffer of their own).
inline bool op_is_alias(Op op) {
  return op == Op::kReshape || op == Op::kView || op == Op::kKvStore;
}

// Rotary embedding layouts (llama.cpp LLAMA_ROPE_TYPE_NORM / _NEOX): kNormal rotates
// adjacent pairs (x[2i], x[2i+1]) — llama; kNeox rotates (x[i], x[i + n_rot/2]) — qwen2.
enum class RopeMode : uint8_t { kNormal = 0, kNeox = 2 };

// Which half of a layer's KV a region / store holds.
enum class KvKind : uint8_t { kK = 0, kV = 1 };

// Tensor shape in ggml order: ne[0] is the contiguous (innermost) dimension, so a
// comment `[n_embd, n_tokens]` means n_tokens rows of n_embd elements. Unused
// trailing dims are 1. n_dims is the declared rank (1..4), kept for export only.
struct Shape {
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  int32_t n_dims = 1;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);  // 1..4 dims, each >= 1 (MINFER_CHECK)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::string str() const;  // "[4096, 7]"
  bool operator==(const Shape&) const = default;
};

// Bytes of a contiguous tensor. Quantized types pack ne[0] in blocks, so ne[0] must
// be a multiple of the block size (MINFER_CHECK: a builder asking otherwise is a bug).
uint64_t tensor_bytes(DType dtype, const Shape& shape);

// Per-op parameters: one flat POD rather than a variant so nodes stay trivially
// comparable and copyable. Each field names the ops that read it; others leave the
// default, so two nodes of the same op compare equal exactly when their params do.
struct OpParams {
  float eps = 0.0f;         // rms_norm, rms_norm_mul
  float scale = 1.0f;       // scale, softmax (pre-scale), attention (KQ scale)
  float freq_base = 0.0f;   // rope: θ base (10000 llama, 1e6 qwen2)
  float freq_scale = 0.0f;  // rope: linear position scale (1 = none)
  int32_t n_rot = 0;        // rope: leading dims of each head that rotate (<= head_dim);
                            // hadamard: block length (a power of two)
  RopeMode rope_mode = RopeMode::kNormal;
  KvKind kv_kind = KvKind::kK;  // kv_region, kv_store
  uint8_t causal = 0;           // attention: window was built causally (documentation
                                // and identity only; the window input is the truth)
  uint8_t ggml_f16 = 0;         // attention: AttnNumerics::kGgmlF16 accumulation;
                                // geglu: the gelu table of llama.cpp's native build
  int32_t n_head = 0;           // attention: query heads
  int32_t n_head_kv = 0;        // attention: KV heads (n_head % n_head_kv == 0, GQA)
  int32_t layer = -1;           // kv_region, kv_store, attention: whose region
  int64_t offset = 0;           // view: element offset into src0

  bool operator==(const OpParams&) const = default;
};
static_assert(std::is_trivially_copyable_v<OpParams>);
static_assert(sizeof(OpParams) <= 48, "OpParams must stay small: it is copied per node");

}  // namespace minfer::graph
