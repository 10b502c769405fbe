// Stage 6 (architectures): the llama forward graph, after llama.cpp's llm_build_llama
// (src/models/llama.cpp): pre-norm blocks of attention and SwiGLU FFN, each added to
// the residual stream; the last block is cut to the n_out tail rows in prefill.
#include "model/arch/llama/llama.h"

#include "model/layers.h"

namespace minfer::model::llama {

Status adjust(const gguf::Model& /*file*/, HParams& hp) {
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

}  // namespace minfer::model::llama
