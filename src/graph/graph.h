// Stage 7 (graph IR): Node and ComputeGraph — a flat list of nodes in build order.
// Invariants: every source id is smaller than its consumer's id (build order is a
// topological order and is the execution and liveness order); a graph is immutable
// once a GraphCache stamps its uid, except for backend assignment before caching.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "graph/ops.h"

namespace minfer::graph {

inline constexpr int kMaxSrc = 4;

// One tensor-producing operation. Each node has exactly one output, a contiguous
// tensor of `shape` and `dtype` (views alias a contiguous window of their source).
struct Node {
  Op op = Op::kInput;
  std::array<NodeId, kMaxSrc> src{kNoNode, kNoNode, kNoNode, kNoNode};
  int32_t n_src = 0;
  Shape shape;
  DType dtype = DType::kF32;
  std::string name;                 // "attn_norm-3", "token_ids", "blk.0.attn_q.weight"
  BackendId backend = kBackendCpu;  // set by the builder, reassigned by the scheduler
  int32_t layer = -1;               // transformer block this node belongs to (-1: none)
  bool is_output = false;           // read after the step: never freed, never reused
  OpParams params;

  bool is_leaf() const { return op_is_leaf(op); }
};

class GraphBuilder;
class GraphCache;
struct FusionStats;
struct FusionFlags;
struct FusionSupport;

class ComputeGraph {
 public:
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const;
  size_t size() const { return nodes_.size(); }
  // kInput nodes in build order; outputs in the order they were marked.
  const std::vector<NodeId>& inputs() const { return inputs_; }
  const std::vector<NodeId>& outputs() const { return outputs_; }
  // 0 until a GraphCache stamps it; then unique per process and never reused, so a
  // backend may key captured work (CUDA graphs) by it.
  uint64_t uid() const { return uid_; }

  // First node with this exact name, if any (names are unique for inputs/outputs).
  std::optional<NodeId> find(std::string_view name) const;
  // The input node with this name; nullopt when absent or not an input.
  std::optional<NodeId> find_input(std::string_view name) const;
  // Number of nodes reading each node (a node reading x twice counts twice).
  std::vector<int32_t> consumer_counts() const;

  // Backend assignment is the one mutation allowed after building (the scheduler
  // decides placement before fusion and allocation).
  void assign_backend(NodeId id, BackendId backend);

  // Checks the build-order invariant and per-node source counts (tests, debugging).
  bool well_formed(std::string* why = nullptr) const;

 private:
  friend class GraphBuilder;
  friend class GraphCache;
  friend FusionStats run_fusion(ComputeGraph& graph, const FusionFlags& flags,
                                const FusionSupport& support);

  // Drops nodes for which keep[id] is false and renumbers the rest in order.
  // Callers guarantee no kept node reads a dropped one (MINFER_CHECK).
  void compact(const std::vector<bool>& keep);

  std::vector<Node> nodes_;
  std::vector<NodeId> inputs_;
  std::vector<NodeId> outputs_;
  uint64_t uid_ = 0;
};

struct LayerPlacement;

// Applies a layer placement (params.h) to a freshly built graph, before the scheduler's
// assign_backends: nodes of the last `n_layers` layers (Node::layer, weights and KV
// regions included) and, with `head`, every node after the layers that is not a step
// input go to `device`; the rest keeps the builder's placement. A no-op for n_layers 0
// and no head.
void place_layers(ComputeGraph& graph, const LayerPlacement& placement);

}  // namespace minfer::graph
