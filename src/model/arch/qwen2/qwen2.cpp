// Stage 6 (architectures): the qwen2 forward graph, after llama.cpp's llm_build_qwen2
// (src/models/qwen2.cpp): the llama block with Q/K/V biases and NEOX rope.
#include "model/arch/qwen2/qwen2.h"

#include "model/layers.h"

namespace minfer::model::qwen2 {

Status adjust(const gguf::Model& /*file*/, HParams& hp) {
  hp.rope_mode = graph::RopeMode::kNeox;
  return Ok{};
}

Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp) {
  return bind_llama_family(binder, hp, QkvBias::kRequired);
}

}  // namespace minfer::model::qwen2
