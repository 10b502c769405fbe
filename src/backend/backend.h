// Stage 11/12 seam (execution): the Backend interface every kernel provider implements
// (CPU now, CUDA later); the scheduler (src/sched/) talks to backends only through it.
// Invariants: supports_op is a pure function of (node, source dtypes) — the scheduler
// decides placement from it once, before fusion and allocation, and never re-routes a
// node at run time (no silent fallback); execute runs exactly the nodes it is given, in
// the order given (build order), or returns an Error naming the node it could not run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "core/result.h"
#include "graph/graph.h"

namespace minfer::backend {

// Memory of every node of the graph being executed, indexed by NodeId (aliases point
// into their root, weights into the bound mmap, kv_region/kv_store into the persistent
// region). The scheduler resolves it from the allocator once per step, so backends
// depend on the graph alone and never on src/alloc. nullptr: the node has no memory
// on the host (a device tensor; its backend knows its own address space).
struct NodeData {
  std::span<std::byte* const> ptr;

  std::byte* operator[](graph::NodeId id) const { return ptr[static_cast<size_t>(id)]; }
  template <typename T>
  T* as(graph::NodeId id) const {
    return reinterpret_cast<T*>(ptr[static_cast<size_t>(id)]);
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Short lowercase name for traces and errors: "cpu", "cuda".
  virtual std::string_view name() const = 0;
  // The id nodes carry in Node::backend; unique among registered backends.
  virtual graph::BackendId id() const = 0;
  // Whether this backend has a kernel for `node` given its sources' dtypes
  // (src_dtypes.size() == node.n_src, in source order). Leaves are never asked.
  virtual bool supports_op(const graph::Node& node, std::span<const DType> src_dtypes) const = 0;
  // Runs `nodes` (ids of `graph`, ascending build order, every one assigned to this
  // backend and accepted by supports_op; leaves may appear and are skipped). Sources
  // produced by other backends have already been copied where `data` says they are.
  // Error: a node failed at run time (e.g. a KV cell out of range) — named, never
  // clamped; nothing after the failing node runs.
  virtual Status execute(const graph::ComputeGraph& graph, std::span<const graph::NodeId> nodes,
                         const NodeData& data) = 0;
  // Waits for work queued by execute (asynchronous backends); CPU returns at once.
  virtual Status synchronize() { return Ok{}; }

  // Per-graph state (a captured CUDA graph, a device-side node table): `prepare` is
  // called once for every graph uid the scheduler plans, before its first execute, on
  // every registered backend; `release` when that graph leaves the runtime (the graph
  // cache evicted or replaced it, or the context is gone). A rebuilt graph has a new
  // uid and is prepared again. The CPU keeps no per-graph state.
  virtual Status prepare(const graph::ComputeGraph& /*graph*/) { return Ok{}; }
  virtual void release(uint64_t /*uid*/) {}
};

}  // namespace minfer::backend
