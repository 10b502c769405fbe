// Stage 6 (architectures): the gemma3 forward graph, after llama.cpp's gemma3 builder
// (src/models/gemma3.cpp): the embedding scaled by sqrt(n_embd); per block an RMS
// pre-norm, attention with QK-norm and Q scaled by 1/sqrt(query_pre_attn_scalar), an
// RMS post-norm, the residual; the same around a GeGLU FFN; interleaved local
// (sliding-window, rope base 10000) and global layers; tied output head, optional
// final-logit soft-capping.
//
// Norm weights: Gemma computes x̂·(1 + w); llama.cpp's converter stores 1 + w in the
// GGUF (the 270M file: attn_norm ≈ 13.5, q_norm ≈ 1.97 on average), so they multiply
// as stored, like every other RMSNorm here.
#include "model/arch/gemma3/gemma3.h"

#include <fmt/format.h>

#include <cmath>

namespace minfer::model::gemma3 {

using graph::NodeId;

Status adjust(const gguf::Model& file, HParams& hp) {
  hp.rope_mode = graph::RopeMode::kNeox;
  // Every 6th layer is global unless the file says otherwise (llama.cpp's
  // load_swa_pattern(ml, 6) for gemma3).
  MINFER_TRY_STATUS(read_swa(file, hp, 6));
  const std::string a = hp.arch;
  if (file.has(a + ".final_logit_softcapping")) {
    MINFER_TRY(double c, file.get_f64(a + ".final_logit_softcapping"));
    if (!(c >= 0.0) || !std::isfinite(c)) {
      return make_error(fmt::format("{}.final_logit_softcapping = {} must be >= 0", a, c));
    }
    hp.final_logit_softcap = static_cast<float>(c);
  }
  // Q is scaled by 1/sqrt(query_pre_attn_scalar) = 1/sqrt(head size) except for the 27B
  // (62 layers: 1/sqrt(n_embd / n_head)) — llama.cpp's rule; the GGUF has no key for it.
  hp.attn_scale = hp.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head))
                                   : 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head));
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& wb, const HParams& hp) {
  const int64_t n_embd = hp.n_embd;
  const int64_t hd = hp.n_embd_head;
  const int64_t n_embd_q = hd * hp.n_head;
  const int64_t n_embd_kv = hp.n_embd_kv();
  const int64_t n_ff = hp.n_ff;
  ModelWeights w;
  MINFER_TRY(w.tok_embd, wb.require("token_embd.weight", {n_embd, int64_t{hp.n_vocab}}));
  MINFER_TRY(w.output_norm, require_f32(wb, "output_norm.weight", n_embd));
  if (wb.has("output.weight")) {
    MINFER_TRY(w.output, wb.require("output.weight", {n_embd, int64_t{hp.n_vocab}}));
  } else {
    w.output = w.tok_embd;
    w.output_tied = true;
  }
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    MINFER_TRY(l.attn_norm, require_f32(wb, blk(il, "attn_norm.weight"), n_embd));
    MINFER_TRY(l.wq, wb.require(blk(il, "attn_q.weight"), {n_embd, n_embd_q}));
    MINFER_TRY(l.wk, wb.require(blk(il, "attn_k.weight"), {n_embd, n_embd_kv}));
    MINFER_TRY(l.wv, wb.require(blk(il, "attn_v.weight"), {n_embd, n_embd_kv}));
    MINFER_TRY(l.wo, wb.require(blk(il, "attn_output.weight"), {n_embd_q, n_embd}));
    MINFER_TRY(l.attn_q_norm, require_f32(wb, blk(il, "attn_q_norm.weight"), hd));
    MINFER_TRY(l.attn_k_norm, require_f32(wb, blk(il, "attn_k_norm.weight"), hd));
    MINFER_TRY(l.attn_post_norm, require_f32(wb, blk(il, "post_attention_norm.weight"), n_embd));
    MINFER_TRY(l.ffn_norm, require_f32(wb, blk(il, "ffn_norm.weight"), n_embd));
    MINFER_TRY(l.ffn_gate, wb.require(blk(il, "ffn_gate.weight"), {n_embd, n_ff}));
    MINFER_TRY(l.ffn_up, wb.require(blk(il, "ffn_up.weight"), {n_embd, n_ff}));
    MINFER_TRY(l.ffn_down, wb.require(blk(il, "ffn_down.weight"), {n_ff, n_embd}));
    MINFER_TRY(l.ffn_post_norm, require_f32(wb, blk(il, "post_ffw_norm.weight"), n_embd));
  }
  return w;
}

graph::ComputeGraph build(const HParams& hp, const ModelWeights& w, const graph::GraphParams& p) {
  graph::GraphBuilder b;
  const StepInputs in = declare_step_inputs(b, hp, p);
  NodeId tok_embd = weight_node(b, w.tok_embd);     // [n_embd, n_vocab]
  NodeId inp = b.get_rows(tok_embd, in.token_ids);  // F32 [n_embd, n_tokens]
  b.name(inp, "inp_embd");
  inp = b.scale(inp, std::sqrt(static_cast<float>(hp.n_embd)));  // F32 [n_embd, n_tokens]
  b.name(inp, "inp_scaled");

  // --numerics llamacpp: llama.cpp's f16 flash attention and its native build's gelu table.
  const bool llamacpp = p.cparams.attn_numerics == graph::AttnNumerics::kGgmlF16;
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    b.set_layer(il);
    const LayerWeights& lw = w.layers[static_cast<size_t>(il)];
    NodeId cur = norm(b, inp, lw.attn_norm, hp.rms_eps, "attn_norm", il);  // F32 [n_embd, n_tokens]
    cur = attention(b, hp, lw, in, p, cur, il);                            // F32 [n_embd, n_tokens]
    NodeId resid = inp;                                                    // F32 [n_embd, n_tokens]
    if (il == static_cast<int>(hp.n_layer) - 1 && in.tail_ids != graph::kNoNode) {
      cur = b.get_rows(cur, in.tail_ids);      // F32 [n_embd, n_out]
      resid = b.get_rows(resid, in.tail_ids);  // F32 [n_embd, n_out]
    }
    cur = norm(b, cur, lw.attn_post_norm, hp.rms_eps, "attn_post_norm", il);  // F32 [n_embd, rows]
    NodeId sa_out = b.add(cur, resid);                                        // F32 [n_embd, rows]
    b.name(sa_out, "sa_out", il);
    cur = norm(b, sa_out, lw.ffn_norm, hp.rms_eps, "ffn_norm", il);         // F32 [n_embd, rows]
    cur = ffn_geglu(b, lw, cur, il, llamacpp);                              // F32 [n_embd, rows]
    cur = norm(b, cur, lw.ffn_post_norm, hp.rms_eps, "ffn_post_norm", il);  // F32 [n_embd, rows]
    inp = b.add(cur, sa_out);                                               // F32 [n_embd, rows]
    b.name(inp, "l_out", il);
  }
  b.set_layer(-1);
  output_head(b, hp, w, tok_embd, inp);  // F32 [n_vocab, n_out]
  return b.finish();
}

}  // namespace minfer::model::gemma3
