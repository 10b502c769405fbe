// Stage 10 (KV cells): the graph side of the KV cache — the input nodes that carry
// cells and windows, and the per-layer persistent regions — declared for builders.
// Invariant: shapes depend on GraphParams only (n_tokens, n_ctx, window layout,
// kv_format); the data comes from KvCells::place / window after allocation.
#pragma once

#include <cstdint>

#include "graph/builder.h"
#include "graph/params.h"

namespace minfer::kv {

struct KvGraphInputs {
  graph::NodeId cells = graph::kNoNode;   // I32 [n_tokens]              (kInputKvCells)
  graph::NodeId window = graph::kNoNode;  // I32 [2 * n_runs, n_tokens]  (kInputKvWindow)
};

KvGraphInputs declare_kv_inputs(graph::GraphBuilder& b, const graph::GraphParams& params);
// The sliding-window twin of KvGraphInputs::window (kInputKvWindowSwa), same shape.
graph::NodeId declare_swa_window(graph::GraphBuilder& b, const graph::GraphParams& params);

struct KvLayerRegions {
  graph::NodeId k = graph::kNoNode;  // [n_embd_k, n_ctx]
  graph::NodeId v = graph::kNoNode;  // [n_embd_v, n_ctx]
};

// MINFER_CHECKs that kv_format is implemented: validate params (kv_dtype) before building.
KvLayerRegions declare_kv_regions(graph::GraphBuilder& b, const graph::GraphParams& params,
                                  int32_t layer, int64_t n_embd_k, int64_t n_embd_v);

}  // namespace minfer::kv
