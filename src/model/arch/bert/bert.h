// Stage 6 (architectures): bert — BERT-family sentence encoders (all-MiniLM, bge, e5).
// Invariants: bidirectional attention over one sequence's cells (the window input lists
// the whole sequence), no rope (learned absolute positions), post-sublayer LayerNorms;
// the graph returns hidden states [n_embd, n_out] (HParams::embeddings_out), which the
// runtime pools, or a cross-encoder's scores [n_cls_out, n_out] (HParams::n_cls_out);
// the builder is a pure function of GraphParams.
#pragma once

#include "model/layers.h"
#include "model/model.h"

namespace minfer::model::bert {

Status adjust(const gguf::Model& file, HParams& hp);
Result<ModelWeights> bind(const WeightBinder& binder, const HParams& hp);
graph::ComputeGraph build(const HParams& hp, const ModelWeights& w, const graph::GraphParams& p);

inline constexpr Arch kArch{.name = "bert", .adjust = adjust, .bind = bind, .build = build};

}  // namespace minfer::model::bert
