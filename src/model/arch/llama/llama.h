// Stage 6 (architectures): llama — Llama 2/3, SmolLM2, Mistral-style dense models.
// Invariants: NORMAL rope (adjacent pairs; the GGUF converter permutes Q/K for it), no
// biases, output tied to token_embd when `output.weight` is absent; the builder is a
// pure function of GraphParams.
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::llama {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);

inline constexpr Arch kArch{
    .name = "llama", .adjust = adjust, .bind = bind, .build = build_llama_family};

}  // namespace minfer::model::llama
