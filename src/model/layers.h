// Stage 6 (weights + topology): the building blocks the Llama-family graph builders
// share — per-step inputs, the attention half of a block, the SwiGLU FFN, the head.
// Invariant: each helper is a pure function of its arguments (no hidden state), so a
// builder made of them stays deterministic in GraphParams; every intermediate gets a
// llama.cpp-style name ("Qcur-3", "ffn_out-3") so traces and dumps line up with ggml's.
#pragma once

#include "graph/builder.h"
#include "graph/params.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace minfer::model {

// The per-step input nodes (graph/input_names.h). Shapes depend on params only.
struct StepInputs {
  graph::NodeId token_ids = graph::kNoNode;      // I32 [n_tokens]
  graph::NodeId positions = graph::kNoNode;      // I32 [n_tokens]
  graph::NodeId kv_cells = graph::kNoNode;       // I32 [n_tokens]
  graph::NodeId kv_window = graph::kNoNode;      // I32 [2 * n_runs, n_tokens]
  graph::NodeId tail_ids = graph::kNoNode;       // I32 [n_out], only when n_out < n_tokens
  graph::NodeId kv_window_swa = graph::kNoNode;  // I32 [2 * n_runs, n_tokens], hp.n_swa > 0
};
StepInputs declare_step_inputs(graph::GraphBuilder& b, const HParams& hp,
                               const graph::GraphParams& p);

// llama.cpp's rotation of a quantized KV cache (llama_kv_cache's attn_rot_k/attn_rot_v,
// on unless LLAMA_ATTN_ROT_DISABLE): when c.kv_rotation is set and the head size is a
// multiple of 64, a q8_0/q4_0 K rotates Q and K (after RoPE) by the Walsh-Hadamard
// matrix of the largest power of two >= 64 dividing the head size, and a q8_0/q4_0 V
// rotates V before it is stored and the attention output back (the matrix is its own
// inverse) by the 64-order one. Q·K and the V mix are unchanged in exact arithmetic;
// the rotation spreads outliers over a block before the cache quantizes it.
// Block lengths, 0 where that half is not rotated (f16/f32 halves never are).
struct KvRotation {
  int32_t k = 0;  // Q and K
  int32_t v = 0;  // V and the attention output
};
KvRotation kv_rotation(const HParams& hp, const graph::CParams& c);

// rms_norm(x) * w, named `<name>-<il>`.  F32 [n_embd, rows]
graph::NodeId norm(graph::GraphBuilder& b, graph::NodeId x, const WeightRef& w, float eps,
                   const char* name, int il);

// Self-attention of block `il` on the normed input `cur` F32 [n_embd, n_tokens]: Q/K/V
// projections (+ biases when present; phi3's fused tensors arrive as row slices), per-head
// RMSNorm of Q and K when attn_q_norm/attn_k_norm are bound (qwen3, gemma3), RoPE (the
// sliding-window base on sliding layers), K/V stored into the layer's persistent
// regions at the kv_cells input, attention over the kv_window input (kv_window_swa on
// sliding layers), output projection. hp.attn_scale != 0 scales Q by it before
// attention, as llama.cpp's gemma3 graph does (so f16-rounded Q matches), else the
// kernel scales by 1/sqrt(n_embd_head). Returns F32 [n_embd, n_tokens].
graph::NodeId attention(graph::GraphBuilder& b, const HParams& hp, const LayerWeights& lw,
                        const StepInputs& in, const graph::GraphParams& p, graph::NodeId cur,
                        int il);

// SwiGLU feed-forward: down(silu(gate(x)) * up(x)). F32 [n_embd, rows]
graph::NodeId ffn_swiglu(graph::GraphBuilder& b, const LayerWeights& lw, graph::NodeId cur, int il);
// GeGLU feed-forward (gemma): down(gelu_tanh(gate(x)) * up(x)). F32 [n_embd, rows]
// llamacpp_table: the gelu table of llama.cpp's native build (--numerics llamacpp).
graph::NodeId ffn_geglu(graph::GraphBuilder& b, const LayerWeights& lw, graph::NodeId cur, int il,
                        bool llamacpp_table = false);

// Mixture-of-experts feed-forward (llama.cpp's build_moe_ffn as qwen3moe calls it:
// softmax gating, top-k, weights normalised to sum 1, SwiGLU experts): router logits
// (ffn_gate_inp), softmax, the top hp.n_expert_used experts per row, their weights
// divided by their sum, gate/up/down of only those experts (mul_mat_id), the weighted
// sum in slot order. F32 [n_embd, rows]
graph::NodeId ffn_moe(graph::GraphBuilder& b, const HParams& hp, const LayerWeights& lw,
                      graph::NodeId cur, int il);

// Final norm and LM head, marked as the graph output: F32 [n_vocab, n_out]. A tied
// output reads `tok_embd`, the embedding's own weight node. hp.final_logit_softcap
// c > 0 caps the logits: c · tanh(logits / c) (gemma2-style soft-capping).
graph::NodeId output_head(graph::GraphBuilder& b, const HParams& hp, const ModelWeights& w,
                          graph::NodeId tok_embd, graph::NodeId cur);

// Binds the tensors every Llama-family model has (token_embd, output_norm, output or
// tied, and per block: norms, Q/K/V/O, gate/up/down); Q/K/V biases when `qkv_bias`.
// With FfnKind::kMoe the blocks bind the router and the 3-D expert tensors
// (ffn_gate_inp [n_embd, n_expert], ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert],
// ffn_down_exps [n_ff_exp, n_embd, n_expert]) instead of ffn_gate/up/down.
enum class QkvBias : uint8_t { kNone, kRequired };
enum class FfnKind : uint8_t { kDense, kMoe };
Result<ModelWeights> bind_llama_family(const WeightBinder& binder, const HParams& hp, QkvBias bias,
                                       FfnKind ffn = FfnKind::kDense);
// Binds a required F32 norm weight of `n` elements (an error names a wrong type).
Result<WeightRef> require_f32(const WeightBinder& binder, const std::string& name, int64_t n);

// The llama-family forward graph (llama.cpp's llm_build_llama / llm_build_qwen2): pre-norm
// blocks of attention and SwiGLU FFN added to the residual stream, the last block cut to
// the n_out tail rows in prefill. Architectures differ only in what adjust/bind set up
// (rope mode, Q/K/V biases, QK-norm, a bound router = the MoE FFN), so llama, qwen2,
// qwen3 and qwen3moe share it. Pure function of GraphParams.
graph::ComputeGraph build_llama_family(const HParams& hp, const ModelWeights& w,
                                       const graph::GraphParams& p);

}  // namespace minfer::model
