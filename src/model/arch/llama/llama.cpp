// Stage 6 (architectures): the llama forward graph, after llama.cpp's llm_build_llama
// (src/models/llama.cpp): pre-norm blocks of attention and SwiGLU FFN, each added to
// the residual stream; the last block is cut to the n_out tail rows in prefill.
#include "model/arch/llama/llama.h"

#include "model/layers.h"

namespace minfer::model::llama {

using graph::NodeId;

Status adjust(HParams& hp) {
  hp.rope_mode = graph::RopeMode::kNormal;
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp) {
  // Llama 3.1's rope_freqs (per-dimension frequency factors) change every position's
  // rotation; running without them would be silently wrong at every length.
  if (binder.has("rope_freqs.weight")) {
    return make_error(
        "tensor 'rope_freqs.weight' (Llama 3.1 rope frequency factors) is not "
        "supported yet");
  }
  return bind_llama_family(binder, hp, QkvBias::kNone);
}

graph::ComputeGraph build(const HParams& hp, const ModelWeights& w, const graph::GraphParams& p) {
  graph::GraphBuilder b;
  const StepInputs in = declare_step_inputs(b, p);
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
    cur = ffn_swiglu(b, lw, cur, il);                                 // F32 [n_embd, rows]
    inp = b.add(cur, ffn_inp);                                        // F32 [n_embd, rows]
    b.name(inp, "l_out", il);
  }
  b.set_layer(-1);
  output_head(b, hp, w, tok_embd, inp);  // F32 [n_vocab, n_out]
  return b.finish();
}

}  // namespace minfer::model::llama
