// Stage 9 (memory): the liveness plan — a pure function from a graph to byte offsets.
// Invariants: liveness is walked in BUILD order (node id order), never a recomputed
// topological order: build order is the order the scheduler executes, and a sort that
// hoists source-ready nodes would free or reuse a buffer before its real last reader
// ran. Inputs are placed first and live for the whole step; outputs are never freed;
// views/reshapes/kv_stores alias their root and extend its lifetime.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace minfer::alloc {

enum class PlacementKind : uint8_t {
  kNone,        // not yet planned
  kArena,       // bytes [offset, offset + bytes) of its backend's arena
  kPersistent,  // a KV region (kv_region leaf), owned by the allocator, never freed
  kExternal,    // a weight, bound by name outside the allocator
  kAlias,       // bytes [offset, …) of `root`'s memory (view, reshape, kv_store)
};

struct Placement {
  PlacementKind kind = PlacementKind::kNone;
  graph::BackendId backend = graph::kBackendCpu;
  uint64_t offset = 0;                  // kArena: arena offset; kAlias: byte offset into the root
  uint64_t bytes = 0;                   // size of this node's tensor
  graph::NodeId root = graph::kNoNode;  // kAlias: node that owns the memory; else self
  // Lifetime in build-order ids: the buffer is written at `first` and may be reused
  // after node `last` ran. Inputs and outputs have last = graph size (the whole step).
  int32_t first = 0;
  int32_t last = 0;
};

struct AllocPlan {
  uint64_t graph_uid = 0;
  std::vector<Placement> nodes;  // indexed by NodeId
  // Peak arena bytes per backend, sorted by backend id.
  std::vector<std::pair<graph::BackendId, uint64_t>> arena_bytes;

  uint64_t arena_bytes_for(graph::BackendId backend) const;
};

// Plans every node of `graph`. Offsets are multiples of `alignment`; a freed range is
// reused best-fit (smallest block that fits, lowest offset on ties), which keeps the
// plan deterministic. MINFER_CHECKs that the graph is well formed.
AllocPlan plan_graph(const graph::ComputeGraph& graph, uint64_t alignment);

}  // namespace minfer::alloc
