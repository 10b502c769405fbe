// Stage 7 (graph IR): fusion rules. Each rule matches in build order and never
// reorders nodes, so the liveness the allocator computes stays in build order.
// Invariant: a rewrite only fuses a producer whose sole consumer is the fused node.
#include "graph/fusion.h"

#include <vector>

#include "core/check.h"

namespace minfer::graph {

FusionStats run_fusion(ComputeGraph& graph, const FusionFlags& flags,
                       const FusionSupport& support) {
  MINFER_CHECK(graph.uid() == 0, "run_fusion on cached graph uid %llu",
               static_cast<unsigned long long>(graph.uid()));
  FusionStats stats;
  if (!flags.rms_norm_mul) return stats;

  std::vector<int32_t> consumers = graph.consumer_counts();
  std::vector<bool> keep(graph.nodes_.size(), true);
  for (size_t i = 0; i < graph.nodes_.size(); ++i) {
    Node& m = graph.nodes_[i];
    if (m.op != Op::kMul) continue;
    for (int side = 0; side < 2; ++side) {
      const NodeId norm_id = m.src[side];
      const Node& norm = graph.nodes_[norm_id];
      if (norm.op != Op::kRmsNorm || consumers[norm_id] != 1 || norm.is_output ||
          norm.backend != m.backend || !keep[norm_id]) {
        continue;
      }
      // The fused kernel reads x with the norm's (= the mul's) shape and broadcasts w.
      if (!(norm.shape == m.shape)) continue;
      if (support.supports && !support.supports(m.backend, Op::kRmsNormMul)) continue;
      const NodeId x = norm.src[0];
      const NodeId w = m.src[1 - side];
      m.op = Op::kRmsNormMul;
      m.src[0] = x;
      m.src[1] = w;
      m.params.eps = norm.params.eps;
      keep[norm_id] = false;
      stats.rms_norm_mul++;
      break;
    }
  }
  if (stats.rms_norm_mul > 0) {
    const size_t before = graph.nodes_.size();
    graph.compact(keep);
    stats.nodes_removed = static_cast<int>(before - graph.nodes_.size());
  }
  return stats;
}

}  // namespace minfer::graph
