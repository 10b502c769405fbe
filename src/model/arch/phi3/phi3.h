// Stage 6 (architectures): phi3 — Phi-3 / Phi-3.5 mini (4k context) dense models.
// Invariants: NEOX rope; fused attn_qkv and ffn_up (gate | up) tensors bound as row
// slices of the mmap; Q scaled by 1/sqrt(head size) before attention, as llama.cpp's
// phi3 graph does; the builder is the llama family's (pure in GraphParams).
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::phi3 {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);

inline constexpr Arch kArch{
    .name = "phi3", .adjust = adjust, .bind = bind, .build = build_llama_family};

}  // namespace minfer::model::phi3
