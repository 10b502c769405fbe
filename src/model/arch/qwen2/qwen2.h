// Stage 6 (architectures): qwen2 — Qwen2 / Qwen2.5 dense models.
// Invariants: NEOX rope (halves rotated together), Q/K/V projections carry biases,
// output tied to token_embd when `output.weight` is absent (Qwen2.5-0.5B); the builder
// is a pure function of GraphParams.
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::qwen2 {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);

inline constexpr Arch kArch{
    .name = "qwen2", .adjust = adjust, .bind = bind, .build = build_llama_family};

}  // namespace minfer::model::qwen2
