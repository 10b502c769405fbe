// Stage 6 (architectures): the bert forward graph, after llama.cpp's bert builder
// (src/models/bert.cpp): token + token-type (row 0, "sentence A") + absolute position
// embeddings, LayerNorm; per block Q/K/V with biases, attention over the whole sequence,
// output projection + bias, residual, LayerNorm; a GELU FFN (up + bias, gelu, down +
// bias), residual, LayerNorm. The last block's hidden states are the graph output, or,
// for a cross-encoder (cls.output present), the classification head's scores of them.
#include "model/arch/bert/bert.h"

#include <fmt/format.h>

#include <cmath>

#include "graph/input_names.h"
#include "kv/graph_inputs.h"

namespace minfer::model::bert {

using graph::NodeId;

namespace {

// LayerNorm with its affine: norm(x) · w + b, named `<name>-<il>`. F32 [n_embd, rows]
NodeId layer_norm(graph::GraphBuilder& b, NodeId x, const WeightRef& w, const WeightRef& bias,
                  float eps, bool llamacpp, const char* name, int il) {
  NodeId cur = b.layer_norm(x, eps, llamacpp);  // F32 [n_embd, rows]
  cur = b.mul(cur, weight_node(b, w));          // F32 [n_embd, rows]
  cur = b.add(cur, weight_node(b, bias));       // F32 [n_embd, rows]
  b.name(cur, name, il);
  return cur;
}

NodeId linear(graph::GraphBuilder& b, const WeightRef& w, const WeightRef& bias, NodeId x) {
  NodeId y = b.mul_mat(weight_node(b, w), x);  // F32 [n_out, rows]
  return b.add(y, weight_node(b, bias));       // F32 [n_out, rows]
}

Result<WeightRef> f32_vec(const WeightBinder& wb, const std::string& name, int64_t n) {
  return require_f32(wb, name, n);
}

}  // namespace

Status adjust(const gguf::Model& file, HParams& hp) {
  const std::string a = hp.arch;
  if (!(hp.norm_eps > 0.0f)) {
    return make_error(fmt::format("{}.attention.layer_norm_epsilon is missing or <= 0", a));
  }
  hp.causal = false;
  if (file.has(a + ".attention.causal")) {
    MINFER_TRY(hp.causal, file.get_bool(a + ".attention.causal"));
  }
  if (hp.causal)
    return make_error(fmt::format("{}.attention.causal = true: a causal bert is not supported", a));
  hp.embeddings_out = true;
  if (file.has(a + ".pooling_type")) {
    MINFER_TRY(uint64_t pt, file.get_u64(a + ".pooling_type"));
    if (pt > 4) return make_error(fmt::format("{}.pooling_type = {} is unknown", a, pt));
    hp.pooling_type = static_cast<int32_t>(pt);
  }
  if (const gguf::TensorInfo* t = file.find_tensor("cls.output.weight"); t != nullptr) {
    if (t->dims.size() != 2 || t->dims[0] != hp.n_embd || t->dims[1] == 0) {
      return make_error(
          fmt::format("tensor 'cls.output.weight' has {} dims [{}, ...], expected [{}, n_cls_out]",
                      t->dims.size(), t->dims.empty() ? 0 : t->dims[0], hp.n_embd));
    }
    hp.n_cls_out = static_cast<uint32_t>(t->dims[1]);
    hp.token_type_input = file.find_tensor("token_types.weight") != nullptr;
    if (file.has(a + ".classifier.output_labels")) {
      MINFER_TRY(hp.cls_labels, file.get_string_array(a + ".classifier.output_labels"));
    }
  }
  if (hp.n_head_kv != hp.n_head) {
    return make_error(
        fmt::format("{}: head_count_kv {} != head_count {}", a, hp.n_head_kv, hp.n_head));
  }
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& wb, const HParams& hp) {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_ff = hp.n_ff;
  ModelWeights w;
  MINFER_TRY(w.tok_embd, wb.require("token_embd.weight", {n_embd, int64_t{hp.n_vocab}}));
  MINFER_TRY(w.pos_embd, wb.require("position_embd.weight", {n_embd, int64_t{hp.n_ctx_train}}));
  if (wb.has("token_types.weight")) {
    // [n_embd, type_vocab_size]: only row 0 is read (every token is segment 0).
    MINFER_TRY(w.type_embd, wb.require("token_types.weight", {n_embd, 2}));
    if (w.type_embd.dtype != DType::kF32) {
      return make_error(fmt::format("tensor 'token_types.weight' has type {}, expected f32",
                                    dtype_name(w.type_embd.dtype)));
    }
  }
  if (hp.n_cls_out > 0) {
    const int64_t n_out = hp.n_cls_out;
    if (wb.has("cls.weight")) {  // llama.cpp's converter drops the pooler; ours keeps it on request
      MINFER_TRY(w.cls, wb.require("cls.weight", {n_embd, n_embd}));
      MINFER_TRY(w.cls_b, f32_vec(wb, "cls.bias", n_embd));
    }
    MINFER_TRY(w.cls_out, wb.require("cls.output.weight", {n_embd, n_out}));
    MINFER_TRY(w.cls_out_b, f32_vec(wb, "cls.output.bias", n_out));
  }
  MINFER_TRY(w.tok_norm, f32_vec(wb, "token_embd_norm.weight", n_embd));
  MINFER_TRY(w.tok_norm_b, f32_vec(wb, "token_embd_norm.bias", n_embd));
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    MINFER_TRY(l.wq, wb.require(blk(il, "attn_q.weight"), {n_embd, n_embd}));
    MINFER_TRY(l.bq, f32_vec(wb, blk(il, "attn_q.bias"), n_embd));
    MINFER_TRY(l.wk, wb.require(blk(il, "attn_k.weight"), {n_embd, n_embd}));
    MINFER_TRY(l.bk, f32_vec(wb, blk(il, "attn_k.bias"), n_embd));
    MINFER_TRY(l.wv, wb.require(blk(il, "attn_v.weight"), {n_embd, n_embd}));
    MINFER_TRY(l.bv, f32_vec(wb, blk(il, "attn_v.bias"), n_embd));
    MINFER_TRY(l.wo, wb.require(blk(il, "attn_output.weight"), {n_embd, n_embd}));
    MINFER_TRY(l.bo, f32_vec(wb, blk(il, "attn_output.bias"), n_embd));
    MINFER_TRY(l.attn_out_norm, f32_vec(wb, blk(il, "attn_output_norm.weight"), n_embd));
    MINFER_TRY(l.attn_out_norm_b, f32_vec(wb, blk(il, "attn_output_norm.bias"), n_embd));
    MINFER_TRY(l.ffn_up, wb.require(blk(il, "ffn_up.weight"), {n_embd, n_ff}));
    MINFER_TRY(l.ffn_up_b, f32_vec(wb, blk(il, "ffn_up.bias"), n_ff));
    MINFER_TRY(l.ffn_down, wb.require(blk(il, "ffn_down.weight"), {n_ff, n_embd}));
    MINFER_TRY(l.ffn_down_b, f32_vec(wb, blk(il, "ffn_down.bias"), n_embd));
    MINFER_TRY(l.layer_out_norm, f32_vec(wb, blk(il, "layer_output_norm.weight"), n_embd));
    MINFER_TRY(l.layer_out_norm_b, f32_vec(wb, blk(il, "layer_output_norm.bias"), n_embd));
  }
  return w;
}

graph::ComputeGraph build(const HParams& hp, const ModelWeights& w, const graph::GraphParams& p) {
  graph::GraphBuilder b;
  const StepInputs in = declare_step_inputs(b, hp, p);
  const int64_t nt = p.n_tokens;
  const int64_t hd = hp.n_embd_head;
  const float eps = hp.norm_eps;
  const bool llamacpp = p.cparams.attn_numerics == graph::AttnNumerics::kGgmlF16;

  NodeId inp = b.get_rows(weight_node(b, w.tok_embd), in.token_ids);  // F32 [n_embd, n_tokens]
  b.name(inp, "inp_embd");
  if (w.type_embd.present() && hp.token_type_input) {
    // A cross-encoder's rows carry their segment (0: query, 1: document) as data.
    NodeId types = b.input(graph::kInputTokenTypes, DType::kI32, {nt});  // I32 [n_tokens]
    NodeId te = b.get_rows(weight_node(b, w.type_embd), types);          // F32 [n_embd, n_tokens]
    inp = b.add(inp, te);                                                // F32 [n_embd, n_tokens]
  } else if (w.type_embd.present()) {
    // Every row is segment 0 ("sentence A"): the first token-type row, broadcast.
    NodeId type0 =
        b.view(weight_node(b, w.type_embd), {int64_t{hp.n_embd}, 1}, 0);  // F32 [n_embd, 1]
    inp = b.add(inp, type0);                                              // F32 [n_embd, n_tokens]
  }
  NodeId pos = b.get_rows(weight_node(b, w.pos_embd), in.positions);  // F32 [n_embd, n_tokens]
  inp = b.add(pos, inp);                                              // F32 [n_embd, n_tokens]
  inp = layer_norm(b, inp, w.tok_norm, w.tok_norm_b, eps, llamacpp, "inp_norm", -1);

  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    b.set_layer(il);
    const LayerWeights& lw = w.layers[static_cast<size_t>(il)];
    NodeId q = linear(b, lw.wq, lw.bq, inp);  // F32 [n_embd, n_tokens]
    b.name(q, "Qcur", il);
    NodeId k = linear(b, lw.wk, lw.bk, inp);  // F32 [n_embd, n_tokens]
    b.name(k, "Kcur", il);
    NodeId v = linear(b, lw.wv, lw.bv, inp);  // F32 [n_embd, n_tokens]
    b.name(v, "Vcur", il);
    q = b.reshape(q, {hd, int64_t{hp.n_head}, nt});  // F32 [hd, n_head, n_tokens]
    const kv::KvLayerRegions kv = kv::declare_kv_regions(b, p, il, hp.n_embd, hp.n_embd);
    NodeId ks = b.kv_store(kv.k, k, in.kv_cells);  // [n_embd, n_ctx] (alias)
    NodeId vs = b.kv_store(kv.v, v, in.kv_cells);  // [n_embd, n_ctx] (alias)
    NodeId att = b.attention(q, ks, vs, in.kv_window,
                             {.n_head = static_cast<int32_t>(hp.n_head),
                              .n_head_kv = static_cast<int32_t>(hp.n_head_kv),
                              .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                              .causal = false,
                              .layer = il,
                              .ggml_f16 = llamacpp});  // F32 [n_embd, n_tokens]
    b.name(att, "kqv_out", il);
    NodeId cur = linear(b, lw.wo, lw.bo, att);  // F32 [n_embd, n_tokens]
    b.name(cur, "attn_out", il);
    NodeId resid = inp;  // F32 [n_embd, n_tokens]
    if (il == static_cast<int>(hp.n_layer) - 1 && in.tail_ids != graph::kNoNode) {
      cur = b.get_rows(cur, in.tail_ids);      // F32 [n_embd, n_out]
      resid = b.get_rows(resid, in.tail_ids);  // F32 [n_embd, n_out]
    }
    cur = b.add(cur, resid);  // F32 [n_embd, rows]
    NodeId ffn_inp = layer_norm(b, cur, lw.attn_out_norm, lw.attn_out_norm_b, eps, llamacpp,
                                "attn_out_norm", il);
    cur = linear(b, lw.ffn_up, lw.ffn_up_b, ffn_inp);  // F32 [n_ff, rows]
    b.name(cur, "ffn_up", il);
    cur = b.gelu(cur, llamacpp);  // F32 [n_ff, rows]
    b.name(cur, "ffn_gelu", il);
    cur = linear(b, lw.ffn_down, lw.ffn_down_b, cur);  // F32 [n_embd, rows]
    b.name(cur, "ffn_out", il);
    cur = b.add(cur, ffn_inp);  // F32 [n_embd, rows]
    inp = layer_norm(b, cur, lw.layer_out_norm, lw.layer_out_norm_b, eps, llamacpp, "l_out", il);
  }
  b.set_layer(-1);
  b.name(inp, "result_embd");
  if (hp.n_cls_out > 0) {
    // The classification head on the output rows (the runtime asks for each sequence's
    // [CLS] row), as transformers' BertForSequenceClassification: pooler dense + tanh,
    // then the projection to n_cls_out scores (llama.cpp's build_pooling, rank).
    NodeId cur = inp;  // F32 [n_embd, rows]
    if (w.cls.present()) {
      cur = b.tanh(linear(b, w.cls, w.cls_b, cur));  // F32 [n_embd, rows]
      b.name(cur, "cls_pooled");
    }
    inp = linear(b, w.cls_out, w.cls_out_b, cur);  // F32 [n_cls_out, rows]
    b.name(inp, "result_rank");
  }
  b.mark_output(inp);
  return b.finish();
}

}  // namespace minfer::model::bert
