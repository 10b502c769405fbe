// Stage 7 (graph IR): the fusion pass — rewrites op patterns into fused ops.
// Invariants: runs before caching (uid 0) and before allocation; a fused graph computes
// the same values as the unfused one; each rule is behind a FusionFlags switch, and
// those switches are part of GraphParams, so toggling one forces a rebuild.
#pragma once

#include <functional>

#include "graph/graph.h"
#include "graph/params.h"

namespace minfer::graph {

struct FusionStats {
  int rms_norm_mul = 0;  // rms_norm(x) * w pairs fused
  int nodes_removed = 0;
};

// Whether the backend assigned to a node can run a fused op. Empty = every backend
// can (CPU-only builds); the scheduler passes the registry's supports_op here so a
// node is never fused into an op its backend lacks (no silent fallback).
struct FusionSupport {
  std::function<bool(BackendId backend, Op fused)> supports;
};

// Rule rms_norm_mul: Mul(RmsNorm(x), w) (either operand order) where the norm has
// exactly one consumer, is not an output and shares the mul's backend becomes
// RmsNormMul(x, w), keeping the mul's name (it is the `attn_norm` tensor) and id
// position; the orphaned norm is removed and ids are renumbered in build order.
FusionStats run_fusion(ComputeGraph& graph, const FusionFlags& flags,
                       const FusionSupport& support = {});

}  // namespace minfer::graph
