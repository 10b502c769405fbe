// Stage 7 (graph IR): GraphBuilder — the only way model code creates nodes.
// Invariants: every op checks its source shapes/dtypes (a mismatch is a builder bug,
// MINFER_CHECK with the shapes); nodes are appended in call order, so build order is
// topological by construction; a builder called with equal params builds equal graphs.
//
// Usage (a model builder, ggml style — every tensor line says type and shape):
//   GraphBuilder b;
//   NodeId ids = b.input(kInputTokenIds, DType::kI32, {n_tokens});  // I32 [n_tokens]
//   NodeId cur = b.get_rows(tok_embd, ids);                         // F32 [n_embd, n_tokens]
//   cur = b.mul(b.rms_norm(cur, eps), attn_norm_w);                 // F32 [n_embd, n_tokens]
//   b.name(cur, "attn_norm", il);                                   // "attn_norm-0"
//   ...
//   b.mark_output(logits);
//   ComputeGraph g = b.finish();
#pragma once

#include <string>
#include <string_view>

#include "graph/graph.h"

namespace minfer::graph {

struct BuilderOptions {
  BackendId backend = kBackendCpu;  // initial placement of every node
};

struct RopeParams {
  RopeMode mode = RopeMode::kNormal;
  int32_t n_rot = 0;  // rotated dims per head; 0 = the whole head
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
};

struct AttentionParams {
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  float scale = 0.0f;  // usually 1/sqrt(head_dim)
  bool causal = true;
  int32_t layer = -1;     // whose KV region the k/v sources store into
  bool ggml_f16 = false;  // AttnNumerics::kGgmlF16 (needs F16 regions)
};

class GraphBuilder {
 public:
  explicit GraphBuilder(BuilderOptions options = {});

  // ---- leaves --------------------------------------------------------------------
  // Per-step data. Names must be unique among inputs (fills address them by name).
  NodeId input(std::string_view name, DType dtype, Shape shape);
  // A model tensor bound by name at execution (GGUF name, e.g. "blk.0.attn_q.weight").
  NodeId weight(std::string_view name, DType dtype, Shape shape);
  // Layer `layer`'s persistent K or V region: shape [n_embd_kv, n_ctx]. The allocator
  // creates it once and keeps it across rebuilds; named "cache_k-<layer>"/"cache_v-…".
  NodeId kv_region(int32_t layer, KvKind kind, DType dtype, Shape shape);

  // ---- compute -------------------------------------------------------------------
  // table [n_embd, n_rows] (any dtype), ids I32 [n] → F32 [n_embd, n]
  NodeId get_rows(NodeId table, NodeId ids);
  // F32 x → same shape; normalises over ne0
  NodeId rms_norm(NodeId x, float eps);
  // LayerNorm without its affine: (x − mean) / sqrt(var + eps) per row. F32 → same shape
  // llamacpp: llama.cpp's AVX-512 reduction order (--numerics llamacpp), else sums in double.
  NodeId layer_norm(NodeId x, float eps, bool llamacpp = false);
  // F32 a, b broadcastable to a → shape of a
  NodeId mul(NodeId a, NodeId b);
  NodeId add(NodeId a, NodeId b);
  // w [K, N] (any dtype), x F32 [K, M, ...] → F32 [N, M, ...]
  NodeId mul_mat(NodeId w, NodeId x);
  // x F32 [head_dim, n_head, n_tokens], positions I32 [n_tokens] → same shape as x
  NodeId rope(NodeId x, NodeId positions, const RopeParams& p);
  // region [n_embd_kv, n_ctx], rows F32 [n_embd_kv, n_tokens] (any shape with that
  // many elements), cells I32 [n_tokens] → aliases the region (consumers of the
  // result are ordered after the write)
  NodeId kv_store(NodeId region, NodeId rows, NodeId cells);
  // q F32 [head_dim, n_head, n_tokens]; k, v: kv_store results of one layer
  // ([head_dim * n_head_kv, n_ctx]); window I32 [2 * n_runs, n_tokens]
  // → F32 [head_dim_v * n_head, n_tokens]
  NodeId attention(NodeId q, NodeId k, NodeId v, NodeId window, const AttentionParams& p);
  NodeId silu(NodeId x);                  // F32 → same shape
  NodeId swiglu(NodeId gate, NodeId up);  // F32, equal shapes → same shape
  // F32, equal shapes → same shape; llamacpp_table: the gelu table llama.cpp's native
  // (FMA-contracted) build computes (backend/cpu/geglu.h), else the uncontracted one.
  NodeId geglu(NodeId gate, NodeId up, bool llamacpp_table = false);
  NodeId tanh(NodeId x);  // F32 → same shape
  // gelu_tanh(x) through ggml's f16 table (geglu's gelu without the up factor); llamacpp_table
  // as geglu. F32 → same shape
  NodeId gelu(NodeId x, bool llamacpp_table = false);
  // Mixture of experts (llama.cpp's build_moe_ffn, CPU order):
  // x F32 [n, rows] → I32 [k, rows]: per row the indices of its k largest values, in
  // descending order (ggml_argsort_top_k: std::sort of all indices by >, first k).
  NodeId top_k(NodeId x, int64_t k);
  // probs F32 [n_expert, rows], ids I32 [k, rows] → F32 [k, rows]:
  // w[s] = probs[ids[s]] / max(Σ_s probs[ids[s]], 2^-14), the sum in double.
  NodeId moe_weights(NodeId probs, NodeId ids);
  // w [K, N, n_expert] (any mul_mat dtype), x F32 [K, n_b, rows] (n_b = 1: the row is
  // shared by every slot; n_b = k: one row per slot), ids I32 [k, rows]
  // → F32 [N, k, rows]: y[:, s, t] = w[:, :, ids[s, t]] · x[:, s % n_b, t], each element
  // the vec_dot of mul_mat's decode GEMV; only the chosen experts' rows are read.
  NodeId mul_mat_id(NodeId w, NodeId x, NodeId ids);
  // experts F32 [n, k, rows], weights F32 [k, rows] → F32 [n, rows]:
  // ((e_0·w_0 + e_1·w_1) + e_2·w_2) + … (each product and sum rounded to f32).
  NodeId moe_sum(NodeId experts, NodeId weights);
  NodeId softmax(NodeId x, float scale = 1.0f);  // over ne0
  // x F32 (contiguous, n_elements a multiple of n) → same shape: every block of n
  // consecutive elements multiplied by the orthonormal Walsh-Hadamard matrix of order n
  // (a power of two ≥ 2; symmetric, its own inverse) as ggml's CPU fast transform
  // computes it: x·(1/sqrtf(n)) first, then log2(n) butterfly passes (u+v, u−v) of
  // growing span (backend/cpu/hadamard.h). llama.cpp's quantized-KV rotation.
  NodeId hadamard(NodeId x, int32_t n);
  NodeId scale(NodeId x, float s);
  NodeId cont(NodeId x);                  // contiguous copy (cpy/cont)
  NodeId reshape(NodeId x, Shape shape);  // same element count; aliases x
  // contiguous window of n_elements(shape) starting at element `offset`; aliases x
  NodeId view(NodeId x, Shape shape, int64_t offset);

  // ---- naming and bookkeeping ----------------------------------------------------
  // Names an intermediate, llama.cpp `cb(cur, "attn_norm", il)` style: "attn_norm-3"
  // for il >= 0, "result_norm" otherwise. Also tags the node with layer il.
  void name(NodeId id, std::string_view base, int32_t il = -1);
  // Tags every node created from now on with this block index (-1: none).
  void set_layer(int32_t il) { layer_ = il; }
  void mark_output(NodeId id);

  const Node& node(NodeId id) const { return graph_.node(id); }
  // Moves the finished graph out (MINFER_CHECK: at least one output, well formed).
  ComputeGraph finish();

 private:
  NodeId push(Node n);
  Node make(Op op, std::initializer_list<NodeId> srcs, Shape shape, DType dtype) const;
  const Node& src(NodeId id) const;
  void check_f32(NodeId id, const char* op) const;

  BuilderOptions options_;
  ComputeGraph graph_;
  int32_t layer_ = -1;
  bool finished_ = false;
};

}  // namespace minfer::graph
