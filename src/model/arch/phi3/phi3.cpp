// Stage 6 (architectures): phi3, after llama.cpp's phi3 builder (src/models/phi3.cpp):
// the llama block with one fused QKV projection (attn_qkv: Q rows, then K, then V), a
// fused up projection whose first n_ff rows are the SwiGLU gate and the next n_ff the up
// (ggml_swiglu on one tensor), NEOX rope, and Q·1/sqrt(head size) before attention.
// phi3.attention.sliding_window is ignored, as llama.cpp ignores it (its Phi SWA is
// disabled: the converters' window metadata is not trusted); the 128k models'
// rope_factors_long/short (longrope) are refused by name.
#include "model/arch/phi3/phi3.h"

#include <fmt/format.h>

#include <cmath>

namespace minfer::model::phi3 {

Status adjust(const gguf::Model& /*file*/, HParams& hp) {
  hp.rope_mode = graph::RopeMode::kNeox;
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head));
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& wb, const HParams& hp) {
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (wb.has(t) || wb.has(blk(0, t))) {
      return make_error(
          fmt::format("tensor '{}' (Phi-3 128k longrope factors) is not supported yet", t));
    }
  }
  const int64_t n_embd = hp.n_embd;
  const int64_t n_embd_q = int64_t{hp.n_embd_head} * hp.n_head;
  const int64_t n_embd_kv = hp.n_embd_kv();
  const int64_t n_ff = hp.n_ff;
  const int64_t n_vocab = hp.n_vocab;
  ModelWeights w;
  MINFER_TRY(w.tok_embd, wb.require("token_embd.weight", {n_embd, n_vocab}));
  MINFER_TRY(w.output_norm, require_f32(wb, "output_norm.weight", n_embd));
  if (wb.has("output.weight")) {
    MINFER_TRY(w.output, wb.require("output.weight", {n_embd, n_vocab}));
  } else {
    w.output = w.tok_embd;
    w.output_tied = true;
  }
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    MINFER_TRY(l.attn_norm, require_f32(wb, blk(il, "attn_norm.weight"), n_embd));
    if (wb.has(blk(il, "attn_qkv.weight"))) {
      MINFER_TRY(const WeightRef qkv,
                 wb.require(blk(il, "attn_qkv.weight"), {n_embd, n_embd_q + 2 * n_embd_kv}));
      MINFER_TRY(l.wq, weight_rows(qkv, 0, n_embd_q, "q"));
      MINFER_TRY(l.wk, weight_rows(qkv, n_embd_q, n_embd_kv, "k"));
      MINFER_TRY(l.wv, weight_rows(qkv, n_embd_q + n_embd_kv, n_embd_kv, "v"));
    } else {
      MINFER_TRY(l.wq, wb.require(blk(il, "attn_q.weight"), {n_embd, n_embd_q}));
      MINFER_TRY(l.wk, wb.require(blk(il, "attn_k.weight"), {n_embd, n_embd_kv}));
      MINFER_TRY(l.wv, wb.require(blk(il, "attn_v.weight"), {n_embd, n_embd_kv}));
    }
    MINFER_TRY(l.wo, wb.require(blk(il, "attn_output.weight"), {n_embd_q, n_embd}));
    MINFER_TRY(l.ffn_norm, require_f32(wb, blk(il, "ffn_norm.weight"), n_embd));
    MINFER_TRY(const WeightRef up, wb.require(blk(il, "ffn_up.weight"), {n_embd, 2 * n_ff}));
    MINFER_TRY(l.ffn_gate, weight_rows(up, 0, n_ff, "gate"));
    MINFER_TRY(l.ffn_up, weight_rows(up, n_ff, n_ff, "up"));
    MINFER_TRY(l.ffn_down, wb.require(blk(il, "ffn_down.weight"), {n_ff, n_embd}));
  }
  return w;
}

}  // namespace minfer::model::phi3
