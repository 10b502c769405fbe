// Stage 9 (memory): the Allocator — per-backend arenas for graph intermediates and
// persistent KV regions that outlive every graph. GraphCache owns one (GraphMemory).
// Invariants: liveness in build order (plan.h); inputs live the whole step; a KV
// region is allocated once, at its full n_ctx extent, never freed or moved by a
// rebuild, and addressed by cell; re-mapping a cached graph allocates nothing; input
// fills are accepted only for the graph currently mapped (fill after allocation); the
// host touches a backend's memory only through its MemoryResource (write / read).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "alloc/memory.h"
#include "alloc/plan.h"
#include "core/result.h"
#include "graph/cache.h"
#include "graph/graph.h"

namespace minfer::alloc {

struct AllocatorOptions {
  uint64_t alignment = kTensorAlignment;  // per-tensor offset and buffer alignment
};

// One persistent KV region: layer `layer`'s K or V, [row_elems, n_cells].
struct RegionInfo {
  int32_t layer = -1;
  graph::KvKind kind = graph::KvKind::kK;
  graph::BackendId backend = graph::kBackendCpu;
  DType dtype = DType::kF32;
  graph::Shape shape;      // [row_elems, n_cells] as declared by the graph
  uint64_t row_bytes = 0;  // bytes of one cell
  int64_t n_cells = 0;     // = n_ctx
  std::byte* data = nullptr;
};

struct AllocStats {
  uint64_t buffer_allocations = 0;  // calls into a MemoryResource (arenas + regions)
  uint64_t plans_built = 0;         // graphs planned (first map of a uid)
  uint64_t remaps = 0;              // maps of an already planned uid (cache reuse)
  uint64_t arena_generation = 0;    // bumps whenever an arena moves (grows): device
                                    // captures holding arena pointers are stale
  uint64_t persistent_bytes = 0;    // all KV regions
};

class Allocator final : public graph::GraphMemory {
 public:
  explicit Allocator(AllocatorOptions options = {});
  ~Allocator() override;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Memory for a backend id. kBackendCpu has HostMemory from the start; a graph
  // placing a node on an unregistered backend fails to map (no silent fallback).
  // Re-registering a backend that already holds buffers is a broken invariant.
  void register_backend(graph::BackendId backend, std::shared_ptr<MemoryResource> memory);

  // GraphMemory: plan (first sight of a uid) or re-point (cached uid), grow arenas if
  // a new plan needs more, create missing KV regions. Error: a region declared with a
  // different size/type/backend than the one that exists, an unregistered backend, OOM.
  Status map_graph(const graph::ComputeGraph& graph) override;
  void release_graph(uint64_t uid) override;

  // uid of the mapped graph (0: none).
  uint64_t current_uid() const { return current_uid_; }
  const AllocPlan* plan(uint64_t uid) const;

  // Memory of node `id` of the currently mapped `graph` (MINFER_CHECK that it is the
  // mapped one). Weights resolve through bind_weight; an unbound weight fails loudly.
  std::byte* data(const graph::ComputeGraph& graph, graph::NodeId id) const;
  template <typename T>
  T* data_as(const graph::ComputeGraph& graph, graph::NodeId id) const {
    return reinterpret_cast<T*>(data(graph, id));
  }

  // Weight bytes, looked up by node name and backend: the GGUF mmap for the CPU, the
  // backend's own upload (done once, at load) for another. Size must match the node's
  // tensor_bytes when mapped; rebinding replaces the pointer.
  void bind_weight(std::string_view name, const void* data, uint64_t bytes,
                   graph::BackendId backend = graph::kBackendCpu);
  // The copy of weight `name` that lives on `backend`; nullptr when none was bound
  // there (a split reading it is then refused: weights never move per step).
  std::byte* weight_data(std::string_view name, graph::BackendId backend) const;

  // Whether the host may dereference addresses of `backend`'s memory.
  bool host_accessible(graph::BackendId backend) const;
  // Host copy of node `id`'s bytes (the logits of a device-resident head), through its
  // memory's read. Error: the graph is not the mapped one, or `out` has the wrong size.
  Status read_node(const graph::ComputeGraph& graph, graph::NodeId id, std::span<std::byte> out);

  // Per-step input data, after map_graph: errors for an unknown name, a dtype or
  // element-count mismatch, a graph that is not the mapped one, or device memory.
  Status fill_input_i32(const graph::ComputeGraph& graph, std::string_view name,
                        std::span<const int32_t> values);
  Status fill_input_f32(const graph::ComputeGraph& graph, std::string_view name,
                        std::span<const float> values);

  // Persistent regions (the KV cache).
  const RegionInfo* region(int32_t layer, graph::KvKind kind) const;
  // Bytes of cell `cell` of a region; Error when the region is missing or the cell
  // is outside [0, n_cells) — a KV access out of range is never clamped.
  Result<std::byte*> region_cell(int32_t layer, graph::KvKind kind, int64_t cell) const;
  // One cell's row to / from the host through the region's memory (session export and
  // import; the address from region_cell may be a device's).
  Status read_cell(int32_t layer, graph::KvKind kind, int64_t cell, std::span<std::byte> out) const;
  Status write_cell(int32_t layer, graph::KvKind kind, int64_t cell, std::span<const std::byte> in);
  size_t n_regions() const { return regions_.size(); }

  // Arena capacity per backend (bytes), 0 if none yet.
  uint64_t arena_capacity(graph::BackendId backend) const;
  const AllocStats& stats() const { return stats_; }

 private:
  struct RegionKey {
    int32_t layer;
    graph::KvKind kind;
    auto operator<=>(const RegionKey&) const = default;
  };
  struct Region {
    RegionInfo info;
    Buffer buffer;
  };
  struct Pool {
    std::shared_ptr<MemoryResource> memory;
    Buffer arena;
  };
  struct Mapped {
    AllocPlan plan;
    std::vector<std::byte*> ptr;  // resolved per node on every map (arenas may move)
  };

  Status ensure_region(const graph::ComputeGraph& graph, graph::NodeId id);
  Status ensure_arena(graph::BackendId backend, uint64_t bytes);
  void resolve_pointers(const graph::ComputeGraph& graph, Mapped& mapped) const;
  Result<std::byte*> input_bytes(const graph::ComputeGraph& graph, std::string_view name,
                                 DType dtype, size_t count);

  AllocatorOptions options_;
  // Declaration order matters: pools (and their resources) outlive the buffers in
  // regions_, which are destroyed first.
  std::map<graph::BackendId, Pool> pools_;
  std::map<RegionKey, Region> regions_;
  std::unordered_map<uint64_t, Mapped> plans_;
  struct BoundWeight {
    graph::BackendId backend;
    const void* data;
    uint64_t bytes;
  };
  std::unordered_map<std::string, std::vector<BoundWeight>> weights_;
  const BoundWeight* find_weight(std::string_view name, graph::BackendId backend) const;
  uint64_t current_uid_ = 0;
  const Mapped* current_ = nullptr;
  AllocStats stats_;
};

}  // namespace minfer::alloc
