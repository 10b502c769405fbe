// Stage 6 (weights + topology): shared Llama-family blocks, after llama.cpp's
// llm_graph_context::build_attn / build_ffn (src/llama-graph.cpp).
#include "model/layers.h"

#include <fmt/format.h>

#include <cmath>

#include "graph/input_names.h"
#include "kv/graph_inputs.h"

namespace minfer::model {

using graph::NodeId;

StepInputs declare_step_inputs(graph::GraphBuilder& b, const HParams& hp,
                               const graph::GraphParams& p) {
  const int64_t nt = p.n_tokens;
  StepInputs in;
  in.token_ids = b.input(graph::kInputTokenIds, DType::kI32, {nt});   // I32 [n_tokens]
  in.positions = b.input(graph::kInputPositions, DType::kI32, {nt});  // I32 [n_tokens]
  const kv::KvGraphInputs kv = kv::declare_kv_inputs(b, p);
  in.kv_cells = kv.cells;    // I32 [n_tokens]
  in.kv_window = kv.window;  // I32 [2·n_runs, n_tokens]
  if (p.n_out < p.n_tokens) {
    in.tail_ids = b.input(graph::kInputTailIds, DType::kI32, {int64_t{p.n_out}});  // I32 [n_out]
  }
  if (hp.n_swa > 0) in.kv_window_swa = kv::declare_swa_window(b, p);  // I32 [2·n_runs, n_tokens]
  return in;
}

KvRotation kv_rotation(const HParams& hp, const graph::CParams& c) {
  KvRotation r;
  const int64_t hd = hp.n_embd_head;
  if (!c.kv_rotation || hd <= 0 || hd % 64 != 0) return r;
  auto quantized = [](graph::KvFormat f) {
    return f == graph::KvFormat::kQ8_0 || f == graph::KvFormat::kQ4_0;
  };
  if (quantized(c.kv_format.k)) {
    int64_t n = 64;  // the largest power of two (>= 64) dividing the head size
    while (hd % (2 * n) == 0) n *= 2;
    r.k = static_cast<int32_t>(n);
  }
  if (quantized(c.kv_format.v)) r.v = 64;
  return r;
}

NodeId norm(graph::GraphBuilder& b, NodeId x, const WeightRef& w, float eps, const char* name,
            int il) {
  NodeId cur = b.mul(b.rms_norm(x, eps), weight_node(b, w));  // F32 [n_embd, rows]
  b.name(cur, name, il);
  return cur;
}

NodeId attention(graph::GraphBuilder& b, const HParams& hp, const LayerWeights& lw,
                 const StepInputs& in, const graph::GraphParams& p, NodeId cur, int il) {
  const int64_t nt = p.n_tokens;
  const int64_t hd = hp.n_embd_head;
  const int64_t n_embd_kv = hp.n_embd_kv();

  NodeId q = b.mul_mat(weight_node(b, lw.wq), cur);          // F32 [n_embd_q, n_tokens]
  if (lw.bq.present()) q = b.add(q, weight_node(b, lw.bq));  // F32 [n_embd_q, n_tokens]
  b.name(q, "Qcur", il);
  NodeId k = b.mul_mat(weight_node(b, lw.wk), cur);          // F32 [n_embd_kv, n_tokens]
  if (lw.bk.present()) k = b.add(k, weight_node(b, lw.bk));  // F32 [n_embd_kv, n_tokens]
  b.name(k, "Kcur", il);
  NodeId v = b.mul_mat(weight_node(b, lw.wv), cur);          // F32 [n_embd_kv, n_tokens]
  if (lw.bv.present()) v = b.add(v, weight_node(b, lw.bv));  // F32 [n_embd_kv, n_tokens]
  b.name(v, "Vcur", il);

  const bool swa = hp.layer_is_swa(il);
  const graph::RopeParams rope{.mode = hp.rope_mode,
                               .n_rot = static_cast<int32_t>(hp.n_rot),
                               .freq_base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base,
                               .freq_scale = swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale};
  q = b.reshape(q, {hd, hp.n_head, nt});  // F32 [hd, n_head, n_tokens]
  if (lw.attn_q_norm.present()) {
    q = norm(b, q, lw.attn_q_norm, hp.rms_eps, "Qcur_normed", il);  // F32 [hd, n_head, n_tokens]
  }
  q = b.rope(q, in.positions, rope);  // F32 [hd, n_head, n_tokens]
  b.name(q, "Qrope", il);
  k = b.reshape(k, {hd, hp.n_head_kv, nt});  // F32 [hd, n_head_kv, n_tokens]
  if (lw.attn_k_norm.present()) {
    k = norm(b, k, lw.attn_k_norm, hp.rms_eps, "Kcur_normed", il);  // F32 [hd, n_head_kv, n_tokens]
  }
  k = b.rope(k, in.positions, rope);  // F32 [hd, n_head_kv, n_tokens]
  b.name(k, "Krope", il);
  float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (hp.attn_scale != 0.0f) {
    q = b.scale(q, hp.attn_scale);  // F32 [hd, n_head, n_tokens]
    b.name(q, "Qscaled", il);
    kq_scale = 1.0f;
  }

  // llama.cpp's quantized-KV rotation: after RoPE (and Gemma's Q scale), Q and K by one
  // Walsh-Hadamard block size, V by another, before the store; the output back after.
  const KvRotation rot = kv_rotation(hp, p.cparams);
  if (rot.k > 0) {
    q = b.hadamard(q, rot.k);  // F32 [hd, n_head, n_tokens]
    b.name(q, "Qrot", il);
    k = b.hadamard(k, rot.k);  // F32 [hd, n_head_kv, n_tokens]
    b.name(k, "Krot", il);
  }
  if (rot.v > 0) {
    v = b.hadamard(v, rot.v);  // F32 [n_embd_kv, n_tokens]
    b.name(v, "Vrot", il);
  }

  // KV: this step's rows go to the cells the KV store chose (data); attention reads
  // the cells the window lists (data). The regions themselves outlive the graph.
  // Regions hold kv_format elements (F32 or F16 [n_embd_kv, n_ctx]).
  const kv::KvLayerRegions kv = kv::declare_kv_regions(b, p, il, n_embd_kv, n_embd_kv);
  NodeId ks = b.kv_store(kv.k, k, in.kv_cells);  // [n_embd_kv, n_ctx] (alias)
  NodeId vs = b.kv_store(kv.v, v, in.kv_cells);  // [n_embd_kv, n_ctx] (alias)
  NodeId att =
      b.attention(q, ks, vs, swa ? in.kv_window_swa : in.kv_window,
                  {.n_head = static_cast<int32_t>(hp.n_head),
                   .n_head_kv = static_cast<int32_t>(hp.n_head_kv),
                   .scale = kq_scale,
                   .causal = true,
                   .layer = il,
                   .ggml_f16 = p.cparams.attn_numerics ==
                               graph::AttnNumerics::kGgmlF16});  // F32 [n_embd_q, n_tokens]
  b.name(att, "kqv_out", il);
  if (rot.v > 0) {
    att = b.hadamard(att, rot.v);  // F32 [n_embd_q, n_tokens]
    b.name(att, "kqv_out_rot", il);
  }
  NodeId out = b.mul_mat(weight_node(b, lw.wo), att);  // F32 [n_embd, n_tokens]
  b.name(out, "attn_out", il);
  return out;
}

NodeId ffn_swiglu(graph::GraphBuilder& b, const LayerWeights& lw, NodeId cur, int il) {
  NodeId gate = b.mul_mat(weight_node(b, lw.ffn_gate), cur);  // F32 [n_ff, rows]
  b.name(gate, "ffn_gate", il);
  NodeId up = b.mul_mat(weight_node(b, lw.ffn_up), cur);  // F32 [n_ff, rows]
  b.name(up, "ffn_up", il);
  NodeId act = b.swiglu(gate, up);  // F32 [n_ff, rows]
  b.name(act, "ffn_swiglu", il);
  NodeId out = b.mul_mat(weight_node(b, lw.ffn_down), act);  // F32 [n_embd, rows]
  b.name(out, "ffn_out", il);
  return out;
}

NodeId ffn_geglu(graph::GraphBuilder& b, const LayerWeights& lw, NodeId cur, int il,
                 bool llamacpp_table) {
  NodeId gate = b.mul_mat(weight_node(b, lw.ffn_gate), cur);  // F32 [n_ff, rows]
  b.name(gate, "ffn_gate", il);
  NodeId up = b.mul_mat(weight_node(b, lw.ffn_up), cur);  // F32 [n_ff, rows]
  b.name(up, "ffn_up", il);
  NodeId act = b.geglu(gate, up, llamacpp_table);  // F32 [n_ff, rows]
  b.name(act, "ffn_geglu", il);
  NodeId out = b.mul_mat(weight_node(b, lw.ffn_down), act);  // F32 [n_embd, rows]
  b.name(out, "ffn_out", il);
  return out;
}

NodeId ffn_moe(graph::GraphBuilder& b, const HParams& hp, const LayerWeights& lw, NodeId cur,
               int il) {
  const graph::Shape& cs = b.node(cur).shape;
  const int64_t n_embd = cs.ne[0], rows = cs.ne[1];
  NodeId logits = b.mul_mat(weight_node(b, lw.ffn_gate_inp), cur);  // F32 [n_expert, rows]
  b.name(logits, "ffn_moe_logits", il);
  NodeId probs = b.softmax(logits);  // F32 [n_expert, rows]
  b.name(probs, "ffn_moe_probs", il);
  NodeId ids = b.top_k(probs, hp.n_expert_used);  // I32 [n_expert_used, rows]
  b.name(ids, "ffn_moe_topk", il);
  NodeId weights = b.moe_weights(probs, ids);  // F32 [n_expert_used, rows]
  b.name(weights, "ffn_moe_weights_norm", il);
  NodeId x = b.reshape(cur, {n_embd, 1, rows});                      // F32 [n_embd, 1, rows]
  NodeId up = b.mul_mat_id(weight_node(b, lw.ffn_up_exps), x, ids);  // F32 [n_ff_exp, k, rows]
  b.name(up, "ffn_moe_up", il);
  NodeId gate = b.mul_mat_id(weight_node(b, lw.ffn_gate_exps), x, ids);  // F32 [n_ff_exp, k, rows]
  b.name(gate, "ffn_moe_gate", il);
  NodeId act = b.swiglu(gate, up);  // F32 [n_ff_exp, k, rows]
  b.name(act, "ffn_moe_swiglu", il);
  NodeId down = b.mul_mat_id(weight_node(b, lw.ffn_down_exps), act, ids);  // F32 [n_embd, k, rows]
  b.name(down, "ffn_moe_down", il);
  NodeId out = b.moe_sum(down, weights);  // F32 [n_embd, rows]
  b.name(out, "ffn_moe_out", il);
  return out;
}

NodeId output_head(graph::GraphBuilder& b, const HParams& hp, const ModelWeights& w,
                   NodeId tok_embd, NodeId cur) {
  cur = b.mul(b.rms_norm(cur, hp.rms_eps), weight_node(b, w.output_norm));  // F32 [n_embd, n_out]
  b.name(cur, "result_norm");
  NodeId head = w.output_tied ? tok_embd : weight_node(b, w.output);  // [n_embd, n_vocab]
  NodeId logits = b.mul_mat(head, cur);                               // F32 [n_vocab, n_out]
  if (hp.final_logit_softcap > 0.0f) {
    // llama.cpp: scale by 1/c, tanh, scale by c (three roundings, reproduced).
    logits = b.scale(logits, 1.0f / hp.final_logit_softcap);  // F32 [n_vocab, n_out]
    logits = b.tanh(logits);                                  // F32 [n_vocab, n_out]
    logits = b.scale(logits, hp.final_logit_softcap);         // F32 [n_vocab, n_out]
  }
  b.name(logits, "result_output");
  b.mark_output(logits);
  return logits;
}

Result<WeightRef> require_f32(const WeightBinder& wb, const std::string& name, int64_t n) {
  MINFER_TRY(WeightRef w, wb.require(name, {n}));
  if (w.dtype != DType::kF32) {
    return make_error(
        fmt::format("tensor '{}' has type {}, expected f32", name, dtype_name(w.dtype)));
  }
  return w;
}

Result<ModelWeights> bind_llama_family(const WeightBinder& wb, const HParams& hp, QkvBias bias,
                                       FfnKind ffn) {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_embd_q = int64_t{hp.n_embd_head} * hp.n_head;
  const int64_t n_embd_kv = hp.n_embd_kv();
  const int64_t n_ff = hp.n_ff;
  const int64_t n_vocab = hp.n_vocab;
  ModelWeights w;
  MINFER_TRY(w.tok_embd, wb.require("token_embd.weight", {n_embd, n_vocab}));
  MINFER_TRY(w.output_norm, wb.require("output_norm.weight", {n_embd}));
  if (wb.has("output.weight")) {
    MINFER_TRY(w.output, wb.require("output.weight", {n_embd, n_vocab}));
  } else {
    // No separate LM head: the embedding matrix is reused (tied), as llama.cpp does.
    w.output = w.tok_embd;
    w.output_tied = true;
  }
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    MINFER_TRY(l.attn_norm, wb.require(blk(il, "attn_norm.weight"), {n_embd}));
    MINFER_TRY(l.wq, wb.require(blk(il, "attn_q.weight"), {n_embd, n_embd_q}));
    MINFER_TRY(l.wk, wb.require(blk(il, "attn_k.weight"), {n_embd, n_embd_kv}));
    MINFER_TRY(l.wv, wb.require(blk(il, "attn_v.weight"), {n_embd, n_embd_kv}));
    MINFER_TRY(l.wo, wb.require(blk(il, "attn_output.weight"), {n_embd_q, n_embd}));
    if (bias == QkvBias::kRequired) {
      MINFER_TRY(l.bq, wb.require(blk(il, "attn_q.bias"), {n_embd_q}));
      MINFER_TRY(l.bk, wb.require(blk(il, "attn_k.bias"), {n_embd_kv}));
      MINFER_TRY(l.bv, wb.require(blk(il, "attn_v.bias"), {n_embd_kv}));
      for (const WeightRef* bw : {&l.bq, &l.bk, &l.bv}) {
        if (bw->dtype != DType::kF32) {
          return make_error(fmt::format("tensor '{}' has type {}, expected f32", bw->name,
                                        dtype_name(bw->dtype)));
        }
      }
    }
    MINFER_TRY(l.ffn_norm, wb.require(blk(il, "ffn_norm.weight"), {n_embd}));
    if (ffn == FfnKind::kMoe) {
      const int64_t n_expert = hp.n_expert;
      const int64_t n_ff_exp = hp.n_ff_exp;
      MINFER_TRY(l.ffn_gate_inp, wb.require(blk(il, "ffn_gate_inp.weight"), {n_embd, n_expert}));
      MINFER_TRY(l.ffn_gate_exps,
                 wb.require(blk(il, "ffn_gate_exps.weight"), {n_embd, n_ff_exp, n_expert}));
      MINFER_TRY(l.ffn_up_exps,
                 wb.require(blk(il, "ffn_up_exps.weight"), {n_embd, n_ff_exp, n_expert}));
      MINFER_TRY(l.ffn_down_exps,
                 wb.require(blk(il, "ffn_down_exps.weight"), {n_ff_exp, n_embd, n_expert}));
    } else {
      MINFER_TRY(l.ffn_gate, wb.require(blk(il, "ffn_gate.weight"), {n_embd, n_ff}));
      MINFER_TRY(l.ffn_up, wb.require(blk(il, "ffn_up.weight"), {n_embd, n_ff}));
      MINFER_TRY(l.ffn_down, wb.require(blk(il, "ffn_down.weight"), {n_ff, n_embd}));
    }
    for (const WeightRef* nw : {&l.attn_norm, &l.ffn_norm}) {
      if (nw->dtype != DType::kF32) {
        return make_error(
            fmt::format("tensor '{}' has type {}, expected f32", nw->name, dtype_name(nw->dtype)));
      }
    }
  }
  if (w.output_norm.dtype != DType::kF32) {
    return make_error(fmt::format("tensor 'output_norm.weight' has type {}, expected f32",
                                  dtype_name(w.output_norm.dtype)));
  }
  return w;
}

graph::ComputeGraph build_llama_family(const HParams& hp, const ModelWeights& w,
                                       const graph::GraphParams& p) {
  graph::GraphBuilder b;
  const StepInputs in = declare_step_inputs(b, hp, p);
  NodeId tok_embd = weight_node(b, w.tok_embd);     // [n_embd, n_vocab]
  NodeId inp = b.get_rows(tok_embd, in.token_ids);  // F32 [n_embd, n_tokens]
  b.name(inp, "inp_embd");

  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    b.set_layer(il);
    const LayerWeights& lw = w.layers[static_cast<size_t>(il)];
    NodeId cur = norm(b, inp, lw.attn_norm, hp.rms_eps, "attn_norm", il);  // F32 [n_embd, n_tokens]
    cur = attention(b, hp, lw, in, p, cur, il);                            // F32 [n_embd, n_tokens]
    NodeId resid = inp;                                                    // F32 [n_embd, n_tokens]
    if (il == static_cast<int>(hp.n_layer) - 1 && in.tail_ids != graph::kNoNode) {
      // Only the n_out tail rows need logits: the last FFN, the head and the residual
      // run on those rows alone (llama.cpp: ggml_get_rows(cur, inp_out_ids)).
      cur = b.get_rows(cur, in.tail_ids);      // F32 [n_embd, n_out]
      resid = b.get_rows(resid, in.tail_ids);  // F32 [n_embd, n_out]
    }
    NodeId ffn_inp = b.add(cur, resid);  // F32 [n_embd, rows]
    b.name(ffn_inp, "ffn_inp", il);
    cur = norm(b, ffn_inp, lw.ffn_norm, hp.rms_eps, "ffn_norm", il);  // F32 [n_embd, rows]
    cur = lw.ffn_gate_inp.present() ? ffn_moe(b, hp, lw, cur, il)     // F32 [n_embd, rows]
                                    : ffn_swiglu(b, lw, cur, il);     // F32 [n_embd, rows]
    inp = b.add(cur, ffn_inp);                                        // F32 [n_embd, rows]
    b.name(inp, "l_out", il);
  }
  b.set_layer(-1);
  output_head(b, hp, w, tok_embd, inp);  // F32 [n_vocab, n_out]
  return b.finish();
}

}  // namespace minfer::model
