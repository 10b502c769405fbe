// Stage 6 (architectures): qwen3moe — Qwen3 mixture-of-experts models (Qwen3-30B-A3B).
// Invariants: qwen3's attention (NEOX rope, QK-norm, no biases); every block's FFN is a
// mixture of <arch>.expert_count SwiGLU experts of which <arch>.expert_used_count run per
// token (softmax router, top-k, weights normalised to sum 1); the expert metadata is
// checked at load (0 < used <= count); the builder is a pure function of GraphParams.
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::qwen3moe {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);

inline constexpr Arch kArch{
    .name = "qwen3moe", .adjust = adjust, .bind = bind, .build = build_llama_family};

}  // namespace minfer::model::qwen3moe
