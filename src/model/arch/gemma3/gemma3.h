// Stage 6 (architectures): gemma3 — Gemma 3 text models (270M .. 27B).
// Invariants: NEOX rope with the sliding-window base on local layers; norm weights are
// used as stored (llama.cpp's converter already adds Gemma's +1); the builder is a pure
// function of GraphParams (the sliding window is the kv_window_swa input's data).
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::gemma3 {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);
graph::ComputeGraph build(const HParams& hp, const ModelWeights& w, const graph::GraphParams& p);

inline constexpr Arch kArch{.name = "gemma3", .adjust = adjust, .bind = bind, .build = build};

}  // namespace minfer::model::gemma3
