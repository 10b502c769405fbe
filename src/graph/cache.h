// Stage 8 (graph reuse): GraphCache — an MRU of built graphs keyed by GraphParams,
// owning the memory (allocator + persistent KV regions) that outlives every graph.
// Invariants: reuse iff params are equal (no graph build, no node diff); a rebuild
// stamps a fresh process-wide monotonic uid, a reuse keeps it; at most kMaxCachedGraphs
// entries; the memory object survives every rebuild and eviction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/result.h"
#include "graph/graph.h"
#include "graph/params.h"

namespace minfer::graph {

// The memory side of the cache, implemented by src/alloc/ (alloc depends on graph,
// not the reverse, so the cache sees memory only through this seam).
class GraphMemory {
 public:
  virtual ~GraphMemory() = default;
  // Makes `graph` (uid already stamped) the current one: plans it on first sight
  // (liveness, buffers, persistent regions), re-points to the stored plan otherwise.
  // Called on every rebuild and every reuse; a reuse must not allocate.
  virtual Status map_graph(const ComputeGraph& graph) = 0;
  // The cache dropped this graph (eviction): forget its plan. Persistent regions stay.
  virtual void release_graph(uint64_t uid) = 0;
};

struct CacheStats {
  uint64_t rebuilds = 0;   // replace_graph calls (each built a graph)
  uint64_t reuses = 0;     // try_reuse hits
  uint64_t misses = 0;     // try_reuse misses
  uint64_t evictions = 0;  // entries dropped past kMaxCachedGraphs
};

class GraphCache {
 public:
  // A session alternates a handful of shapes (prefill chunk, decode, tail variants);
  // eight covers them without holding stale graphs forever.
  static constexpr size_t kMaxCachedGraphs = 8;

  // `memory` may be null for a graph-only cache (tests of the reuse logic).
  explicit GraphCache(std::unique_ptr<GraphMemory> memory = nullptr);
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Hit: the entry with equal params moves to the front, the memory re-maps onto it
  // (no allocation) and true is returned; the graph keeps its uid. Miss: false.
  // Error: the re-map failed (never silently rebuilt).
  Result<bool> try_reuse(const GraphParams& params);

  // Caches a freshly built (and fused, backend-assigned) graph for `params` at the
  // front: stamps a fresh uid, maps memory, evicts the least recently used entry past
  // kMaxCachedGraphs. An entry with equal params is replaced. Returns the cached graph
  // (address stable until that entry is evicted or replaced).
  Result<const ComputeGraph*> replace_graph(ComputeGraph graph, const GraphParams& params);

  // try_reuse, else build(params) + replace_graph. `build` returns the finished graph
  // (built, placed, fused) and must be a pure function of params.
  Result<const ComputeGraph*> get_or_build(
      const GraphParams& params, const std::function<ComputeGraph(const GraphParams&)>& build);

  // The most recently used graph (after try_reuse/replace_graph: the one to run).
  const ComputeGraph& current() const;
  const GraphParams& current_params() const;
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // Params of the cached entries, most recent first (tests, traces).
  std::vector<GraphParams> cached_params() const;

  // Called with the uid of every graph the cache drops (eviction, replacement, the
  // cache's destruction), after the memory released it: the other per-graph state of
  // the runtime (the scheduler's split plan and resolved node memory) is dropped with
  // its graph, so the runtime holds exactly one entry per cached graph.
  void set_release_hook(std::function<void(uint64_t)> hook) { release_hook_ = std::move(hook); }

  GraphMemory* memory() { return memory_.get(); }
  // The memory as its concrete type (src/alloc's Allocator); MINFER_CHECK on mismatch.
  template <typename M>
  M& memory_as() {
    auto* m = dynamic_cast<M*>(memory_.get());
    MINFER_CHECK(m != nullptr, "GraphCache::memory_as: memory is not of the requested type");
    return *m;
  }

  const CacheStats& stats() const { return stats_; }

  // Node-by-node comparison of two graphs (op, dtype, shape, sources, params, name,
  // backend, layer, output flag; inputs and outputs lists), ignoring uid. Error names
  // the first difference. Tests call it on two builds of equal params to prove the
  // builder deterministic — the one way a params-only reuse decision could be wrong.
  static Status verify_structural(const ComputeGraph& a, const ComputeGraph& b);

 private:
  // Graphs are boxed so their addresses stay stable while entries move in the MRU
  // order: a pointer from replace_graph/get_or_build stays valid until eviction.
  struct Entry {
    GraphParams params;
    std::unique_ptr<ComputeGraph> graph;
  };

  void release(uint64_t uid);

  std::unique_ptr<GraphMemory> memory_;
  std::vector<Entry> entries_;  // front = most recently used
  std::function<void(uint64_t)> release_hook_;
  CacheStats stats_;
};

}  // namespace minfer::graph
