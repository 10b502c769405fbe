// Stage 6 (weights + topology): model tensors bound by their GGUF names.
// Invariants: a WeightRef is a non-owning view into the gguf::Model's mmap (which must
// outlive it); every bound tensor's type is one we compute with and its shape is the
// one the architecture expects — checked at load, so a graph never sees a bad weight.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "gguf/gguf.h"
#include "graph/builder.h"
#include "graph/ops.h"

namespace minfer::model {

struct WeightRef {
  std::string name;  // GGUF tensor name, also the graph weight node's name
  DType dtype = DType::kF32;
  graph::Shape shape;  // ggml order: ne[0] contiguous
  const void* data = nullptr;
  uint64_t bytes = 0;

  bool present() const { return data != nullptr; }
};

// The tensors of one Llama-family block. Biases are absent (data == nullptr) for
// architectures without them.
struct LayerWeights {
  WeightRef attn_norm;   // F32 [n_embd]
  WeightRef wq;          // [n_embd, n_embd_q]
  WeightRef wk;          // [n_embd, n_embd_kv]
  WeightRef wv;          // [n_embd, n_embd_kv]
  WeightRef wo;          // [n_embd_q, n_embd]
  WeightRef bq, bk, bv;  // F32 [n_embd_q] / [n_embd_kv] (qwen2)
  WeightRef ffn_norm;    // F32 [n_embd]
  WeightRef ffn_gate;    // [n_embd, n_ff]
  WeightRef ffn_up;      // [n_embd, n_ff]
  WeightRef ffn_down;    // [n_ff, n_embd]
  // Optional per architecture (absent: data == nullptr).
  WeightRef attn_q_norm, attn_k_norm;    // F32 [n_embd_head]: QK-norm (qwen3, gemma3)
  WeightRef attn_post_norm;              // F32 [n_embd]: gemma3 post-attention norm
  WeightRef ffn_post_norm;               // F32 [n_embd]: gemma3 post-FFN norm
  WeightRef ffn_gate_inp;                // [n_embd, n_expert]: MoE router (qwen3moe)
  WeightRef ffn_gate_exps, ffn_up_exps;  // [n_embd, n_ff_exp, n_expert]
  WeightRef ffn_down_exps;               // [n_ff_exp, n_embd, n_expert]
  // Encoders (bert): output/FFN biases and the post-sublayer LayerNorms (weight, bias).
  WeightRef bo;                                // F32 [n_embd]
  WeightRef ffn_up_b, ffn_down_b;              // F32 [n_ff] / [n_embd]
  WeightRef attn_out_norm, attn_out_norm_b;    // F32 [n_embd]
  WeightRef layer_out_norm, layer_out_norm_b;  // F32 [n_embd]
};

struct ModelWeights {
  WeightRef tok_embd;     // [n_embd, n_vocab]
  WeightRef output_norm;  // F32 [n_embd]
  WeightRef output;       // [n_embd, n_vocab]; == tok_embd when tied
  bool output_tied = false;
  // Encoders (bert): absolute position and token-type embeddings, the embedding LayerNorm.
  WeightRef pos_embd;              // [n_embd, n_ctx_train]
  WeightRef type_embd;             // [n_embd, n_token_types]
  WeightRef tok_norm, tok_norm_b;  // F32 [n_embd]
  // A cross-encoder's classification head (llama.cpp's cls / cls.output): the pooler's
  // dense layer (optional; tanh follows) and the score projection.
  WeightRef cls, cls_b;          // [n_embd, n_embd], F32 [n_embd]
  WeightRef cls_out, cls_out_b;  // [n_embd, n_cls_out], F32 [n_cls_out]
  std::vector<LayerWeights> layers;

  // Every distinct tensor once (a tied output is not repeated), for binding.
  void for_each(const std::function<void(const WeightRef&)>& fn) const;
};

// Looks tensors up by name and checks them. Errors name the tensor, the expected and
// the actual shape/type.
class WeightBinder {
 public:
  explicit WeightBinder(const gguf::Model& file) : file_(file) {}

  // The tensor `name` with exactly `shape` (ggml order).
  Result<WeightRef> require(std::string_view name, std::initializer_list<int64_t> shape) const;
  // Same, but an absent tensor yields an empty WeightRef instead of an error.
  Result<WeightRef> optional(std::string_view name, std::initializer_list<int64_t> shape) const;
  bool has(std::string_view name) const { return file_.find_tensor(name) != nullptr; }

 private:
  const gguf::Model& file_;
};

// Rows [r0, r0 + n) of a 2-D weight `w` [K, N] as a weight of its own, [K, n]: a view
// into the same mmap (rows are whole quant blocks, so any row range is a valid tensor),
// named "<w.name>#<tag>". Fused tensors (phi3's attn_qkv, ffn_up holding gate and up)
// bind as their pieces this way; each piece's dot products are those of the fused
// matmul's rows, so the split costs no numerics.
Result<WeightRef> weight_rows(const WeightRef& w, int64_t r0, int64_t n, std::string_view tag);

// "blk.<il>.<suffix>" — llama.cpp's per-block tensor names.
std::string blk(int il, std::string_view suffix);

// The graph weight node for a bound tensor (name, dtype and shape from the ref).
graph::NodeId weight_node(graph::GraphBuilder& b, const WeightRef& w);

}  // namespace minfer::model
