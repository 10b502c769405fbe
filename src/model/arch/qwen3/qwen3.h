// Stage 6 (architectures): qwen3 — Qwen3 dense models.
// Invariants: NEOX rope; no Q/K/V biases; per-head RMSNorm of Q and K before RoPE
// (attn_q_norm / attn_k_norm, [n_embd_head]); output tied when `output.weight` is
// absent; the builder is a pure function of GraphParams.
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::qwen3 {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);

inline constexpr Arch kArch{
    .name = "qwen3", .adjust = adjust, .bind = bind, .build = build_llama_family};

}  // namespace minfer::model::qwen3
