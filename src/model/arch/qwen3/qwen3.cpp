// Stage 6 (architectures): the qwen3 forward graph, after llama.cpp's llm_build_qwen3
// (src/models/qwen3.cpp): the llama block with NEOX rope and QK-norm (Q and K each
// RMS-normed per head, then rotated); the shared builder adds the norms when bound.
#include "model/arch/qwen3/qwen3.h"

namespace minfer::model::qwen3 {

Status adjust(const gguf::Model& /*file*/, HParams& hp) {
  hp.rope_mode = graph::RopeMode::kNeox;
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp) {
  MINFER_TRY(ModelWeights w, bind_llama_family(binder, hp, QkvBias::kNone));
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    LayerWeights& l = w.layers[static_cast<size_t>(il)];
    MINFER_TRY(l.attn_q_norm, require_f32(binder, blk(il, "attn_q_norm.weight"), hp.n_embd_head));
    MINFER_TRY(l.attn_k_norm, require_f32(binder, blk(il, "attn_k_norm.weight"), hp.n_embd_head));
  }
  return w;
}

}  // namespace minfer::model::qwen3
