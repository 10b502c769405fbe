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
// region). The scheduler resolves one table per split: every address in it lies in the
// memory of the split's backend — a source another backend produced points at the
// split's copy of it, a weight at this backend's upload of it — so backends depend on
// the graph alone and never on src/alloc. For a backend that is not host_addressable()
// the entries are its own opaque addresses (never dereferenced by anyone else).
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

  // ---- Memory (what ggml-backend's buffer type + tensor set/get give a device) ----
  // A backend owns the memory its nodes live in. Addresses it hands out are opaque to
  // everything but itself unless host_addressable(): the allocator adds offsets to them
  // and hands them back through NodeData, set, get and copy, and never dereferences
  // them. The CPU's memory is the host's (aligned_alloc; set/get are memcpy).
  virtual bool host_addressable() const { return true; }
  // Expected failure (out of memory) is an Error naming the size, never a null pointer.
  // `alignment` is a power of two; the address is aligned to it.
  virtual Result<void*> alloc_buffer(uint64_t bytes, uint64_t alignment);
  virtual void free_buffer(void* ptr, uint64_t bytes) noexcept;
  // Host -> backend: `bytes` at `host_src` into this backend's address `dst`. It may
  // complete asynchronously on the backend's queue (stream order: work executed later
  // on this backend sees the bytes), but `host_src` may be reused as soon as it returns.
  virtual Status set(void* dst, const void* host_src, uint64_t bytes);
  // Backend -> host: returns once the bytes are in `host_dst`, after the work already
  // queued on this backend that writes `src` (a host read never sees a pending buffer).
  virtual Status get(void* host_dst, const void* src, uint64_t bytes);
  // Backend -> backend without the host: whether this backend can pull bytes straight
  // from `from`'s memory (a peer copy). The scheduler asks once per plan; where it is
  // false a copy goes through a host staging buffer the plan owns (get, then set).
  virtual bool can_copy_from(const Backend& /*from*/) const { return false; }
  virtual Status copy_from(void* /*dst*/, const Backend& from, const void* /*src*/,
                           uint64_t /*bytes*/);

  // ---- Fences (the split-boundary rule) ----
  // record_fence() marks the end of the work queued on this backend so far and returns
  // a token; wait_fence(token) blocks the host until that work completed. The scheduler
  // records one after each split and, before copying a source another backend produced,
  // waits for that producer's fence only (a split waits for what it reads, nothing
  // else). Synchronous backends (the CPU) complete work inside execute: token 0, no wait.
  virtual uint64_t record_fence() { return 0; }
  virtual Status wait_fence(uint64_t /*token*/) { return Ok{}; }
};

}  // namespace minfer::backend
