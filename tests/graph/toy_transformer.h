// Tests (graph): a synthetic Llama-shaped "toy transformer" builder — not a model —
// used to exercise the cache, allocator and KV inputs with realistic topology.
// Invariant: a pure function of GraphParams (the reuse contract every builder keeps).
#pragma once

#include <cmath>
#include <string>

#include "graph/builder.h"
#include "graph/fusion.h"
#include "graph/input_names.h"
#include "graph/params.h"

namespace minfer::testing {

struct ToyConfig {
  int32_t n_layer = 2;
  int64_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int64_t n_ff = 128;
  int64_t n_vocab = 96;
  float eps = 1e-5f;
  DType wtype = DType::kQ8_0;  // matmul weights in a quant type, like a real GGUF
};

// Builds (and fuses, per params.cparams.fusion) the toy forward for `p`.
inline graph::ComputeGraph build_toy(const graph::GraphParams& p, const ToyConfig& c = {}) {
  using graph::NodeId;
  graph::GraphBuilder b;
  const int64_t nt = p.n_tokens;
  const int64_t n_ctx = p.cparams.n_ctx;
  const int64_t hd = c.n_embd / c.n_head;
  const int64_t n_embd_kv = hd * c.n_head_kv;

  NodeId ids = b.input(graph::kInputTokenIds, DType::kI32, {nt});   // I32 [n_tokens]
  NodeId pos = b.input(graph::kInputPositions, DType::kI32, {nt});  // I32 [n_tokens]
  NodeId cells = b.input(graph::kInputKvCells, DType::kI32, {nt});  // I32 [n_tokens]
  NodeId win = b.input(graph::kInputKvWindow, DType::kI32,
                       {2 * int64_t{p.cparams.window.n_runs}, nt});  // I32 [2·n_runs, n_tokens]
  NodeId tail = graph::kNoNode;
  if (p.n_out < p.n_tokens) {
    tail = b.input(graph::kInputTailIds, DType::kI32, {int64_t{p.n_out}});  // I32 [n_out]
  }
  NodeId tok_embd =
      b.weight("token_embd.weight", c.wtype, {c.n_embd, c.n_vocab});  // Q [n_embd, n_vocab]
  NodeId inp = b.get_rows(tok_embd, ids);                             // F32 [n_embd, n_tokens]
  b.name(inp, "inp_embd");

  for (int32_t il = 0; il < c.n_layer; ++il) {
    b.set_layer(il);
    const std::string blk = "blk." + std::to_string(il) + ".";
    NodeId w_norm = b.weight(blk + "attn_norm.weight", DType::kF32, {c.n_embd});  // F32 [n_embd]
    NodeId wq =
        b.weight(blk + "attn_q.weight", c.wtype, {c.n_embd, c.n_embd});  // Q [n_embd, n_embd]
    NodeId wk =
        b.weight(blk + "attn_k.weight", c.wtype, {c.n_embd, n_embd_kv});  // Q [n_embd, n_embd_kv]
    NodeId wv =
        b.weight(blk + "attn_v.weight", c.wtype, {c.n_embd, n_embd_kv});  // Q [n_embd, n_embd_kv]
    NodeId wo =
        b.weight(blk + "attn_output.weight", c.wtype, {c.n_embd, c.n_embd});  // Q [n_embd, n_embd]
    NodeId kv_k = b.kv_region(il, graph::KvKind::kK, DType::kF32,
                              {n_embd_kv, n_ctx});  // F32 [n_embd_kv, n_ctx]
    NodeId kv_v = b.kv_region(il, graph::KvKind::kV, DType::kF32,
                              {n_embd_kv, n_ctx});  // F32 [n_embd_kv, n_ctx]

    NodeId cur = b.mul(b.rms_norm(inp, c.eps), w_norm);  // F32 [n_embd, n_tokens]
    b.name(cur, "attn_norm", il);
    NodeId q = b.reshape(b.mul_mat(wq, cur), {hd, c.n_head, nt});  // F32 [hd, n_head, n_tokens]
    NodeId k =
        b.reshape(b.mul_mat(wk, cur), {hd, c.n_head_kv, nt});  // F32 [hd, n_head_kv, n_tokens]
    NodeId v = b.mul_mat(wv, cur);                             // F32 [n_embd_kv, n_tokens]
    graph::RopeParams rp{.mode = graph::RopeMode::kNeox, .n_rot = 0, .freq_base = 1e6f};
    q = b.rope(q, pos, rp);  // F32 [hd, n_head, n_tokens]
    k = b.rope(k, pos, rp);  // F32 [hd, n_head_kv, n_tokens]
    b.name(q, "Qcur", il);
    b.name(k, "Kcur", il);
    NodeId ks = b.kv_store(kv_k, k, cells);  // F32 [n_embd_kv, n_ctx] (alias)
    NodeId vs = b.kv_store(kv_v, v, cells);  // F32 [n_embd_kv, n_ctx] (alias)
    NodeId att = b.attention(q, ks, vs, win,
                             {.n_head = c.n_head,
                              .n_head_kv = c.n_head_kv,
                              .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                              .causal = true,
                              .layer = il});  // F32 [n_embd, n_tokens]
    b.name(att, "kqv_out", il);
    cur = b.mul_mat(wo, att);  // F32 [n_embd, n_tokens]
    NodeId resid = inp;
    if (il == c.n_layer - 1 && tail != graph::kNoNode) {
      // tail-row reduction: the rest runs on the n_out rows only
      cur = b.get_rows(cur, tail);    // F32 [n_embd, n_out]
      resid = b.get_rows(inp, tail);  // F32 [n_embd, n_out]
    }
    NodeId ffn_inp = b.add(cur, resid);  // F32 [n_embd, rows]
    b.name(ffn_inp, "ffn_inp", il);

    NodeId w_fnorm = b.weight(blk + "ffn_norm.weight", DType::kF32, {c.n_embd});  // F32 [n_embd]
    NodeId wg = b.weight(blk + "ffn_gate.weight", c.wtype, {c.n_embd, c.n_ff});  // Q [n_embd, n_ff]
    NodeId wu = b.weight(blk + "ffn_up.weight", c.wtype, {c.n_embd, c.n_ff});    // Q [n_embd, n_ff]
    NodeId wd = b.weight(blk + "ffn_down.weight", c.wtype, {c.n_ff, c.n_embd});  // Q [n_ff, n_embd]
    cur = b.mul(b.rms_norm(ffn_inp, c.eps), w_fnorm);  // F32 [n_embd, rows]
    b.name(cur, "ffn_norm", il);
    NodeId act = b.swiglu(b.mul_mat(wg, cur), b.mul_mat(wu, cur));  // F32 [n_ff, rows]
    cur = b.mul_mat(wd, act);                                       // F32 [n_embd, rows]
    inp = b.add(cur, ffn_inp);                                      // F32 [n_embd, rows]
    b.name(inp, "l_out", il);
  }
  b.set_layer(-1);
  NodeId w_out_norm = b.weight("output_norm.weight", DType::kF32, {c.n_embd});  // F32 [n_embd]
  NodeId w_out = b.weight("output.weight", c.wtype, {c.n_embd, c.n_vocab});  // Q [n_embd, n_vocab]
  NodeId cur = b.mul(b.rms_norm(inp, c.eps), w_out_norm);                    // F32 [n_embd, n_out]
  b.name(cur, "result_norm");
  NodeId logits = b.mul_mat(w_out, cur);  // F32 [n_vocab, n_out]
  b.name(logits, "result_output");
  b.mark_output(logits);
  graph::ComputeGraph g = b.finish();
  graph::run_fusion(g, p.cparams.fusion);
  return g;
}

// Params of a typical run: prefill of n tokens with one output row, or one decode step.
inline graph::GraphParams toy_params(uint32_t n_tokens, uint32_t n_ctx = 64) {
  graph::GraphParams p;
  p.n_tokens = n_tokens;
  p.n_out = 1;
  p.gtype = n_tokens == 1 ? graph::GraphType::kDecode : graph::GraphType::kPrefill;
  p.cparams.n_ctx = n_ctx;
  return p;
}

}  // namespace minfer::testing
