// Stage 9 (memory): arenas, persistent regions and input fills.
// Invariant: a region, once created, keeps its address and bytes until the Allocator
// dies; arenas only grow, and only while planning a new uid.
#include "alloc/allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace minfer::alloc {

using graph::ComputeGraph;
using graph::KvKind;
using graph::Node;
using graph::NodeId;

Allocator::Allocator(AllocatorOptions options) : options_(options) {
  MINFER_CHECK(options_.alignment >= kTensorAlignment &&
                   (options_.alignment & (options_.alignment - 1)) == 0,
               "Allocator: alignment %llu must be a power of two >= %llu",
               static_cast<unsigned long long>(options_.alignment),
               static_cast<unsigned long long>(kTensorAlignment));
  pools_[graph::kBackendCpu].memory = std::make_shared<HostMemory>();
}

Allocator::~Allocator() = default;

void Allocator::register_backend(graph::BackendId backend, std::shared_ptr<MemoryResource> memory) {
  MINFER_CHECK(memory != nullptr, "register_backend(%d): null memory", backend);
  Pool& pool = pools_[backend];
  MINFER_CHECK(!pool.arena, "register_backend(%d): backend already holds an arena", backend);
  for (const auto& [key, region] : regions_) {
    MINFER_CHECK(region.info.backend != backend,
                 "register_backend(%d): backend already holds KV regions", backend);
  }
  pool.memory = std::move(memory);
}

const AllocPlan* Allocator::plan(uint64_t uid) const {
  auto it = plans_.find(uid);
  return it == plans_.end() ? nullptr : &it->second.plan;
}

uint64_t Allocator::arena_capacity(graph::BackendId backend) const {
  auto it = pools_.find(backend);
  return it == pools_.end() ? 0 : it->second.arena.size();
}

Status Allocator::ensure_arena(graph::BackendId backend, uint64_t bytes) {
  auto it = pools_.find(backend);
  if (it == pools_.end() || !it->second.memory) {
    return make_error(fmt::format("backend {} has no memory registered", backend));
  }
  Pool& pool = it->second;
  if (pool.arena.size() >= bytes) return Ok{};
  // Growing moves the arena: free first so peak host memory is the new size only.
  // Offsets of every stored plan stay valid (they are arena-relative).
  pool.arena.reset();
  auto buf = Buffer::allocate(*pool.memory, bytes, options_.alignment);
  if (!buf.ok()) return buf.error().context(fmt::format("arena for backend {}", backend));
  pool.arena = std::move(buf).value();
  stats_.buffer_allocations++;
  stats_.arena_generation++;
  return Ok{};
}

Status Allocator::ensure_region(const ComputeGraph& g, NodeId id) {
  const Node& n = g.node(id);
  const RegionKey key{n.params.layer, n.params.kv_kind};
  const char* kind = n.params.kv_kind == KvKind::kK ? "K" : "V";
  if (auto it = regions_.find(key); it != regions_.end()) {
    const RegionInfo& have = it->second.info;
    if (!(have.shape == n.shape) || have.dtype != n.dtype || have.backend != n.backend) {
      return make_error(fmt::format(
          "layer {} {} region exists as {} {} on backend {}; graph declares {} {} on backend {} "
          "(regions are sized once, at n_ctx; a different geometry needs a new cache)",
          key.layer, kind, dtype_name(have.dtype), have.shape.str(), have.backend,
          dtype_name(n.dtype), n.shape.str(), n.backend));
    }
    return Ok{};
  }
  auto pit = pools_.find(n.backend);
  if (pit == pools_.end() || !pit->second.memory) {
    return make_error(fmt::format("KV region of layer {}: backend {} has no memory registered",
                                  key.layer, n.backend));
  }
  const uint64_t bytes = graph::tensor_bytes(n.dtype, n.shape);
  // Zeroed once so a region read before any store (a bug) is deterministic garbage: a
  // device's through its set (not a decode step); host memory from the OS, resident
  // only as cells are written.
  auto buf = Buffer::allocate_zeroed(*pit->second.memory, bytes, options_.alignment);
  if (!buf.ok()) return buf.error().context(fmt::format("KV region layer {} {}", key.layer, kind));
  Region r;
  r.buffer = std::move(buf).value();
  r.info = RegionInfo{.layer = key.layer,
                      .kind = key.kind,
                      .backend = n.backend,
                      .dtype = n.dtype,
                      .shape = n.shape,
                      .row_bytes = graph::tensor_bytes(n.dtype, graph::Shape{n.shape.ne[0]}),
                      .n_cells = n.shape.ne[1],
                      .data = r.buffer.data()};
  stats_.buffer_allocations++;
  stats_.persistent_bytes += bytes;
  regions_.emplace(key, std::move(r));
  return Ok{};
}

void Allocator::resolve_pointers(const ComputeGraph& g, Mapped& m) const {
  for (size_t i = 0; i < m.plan.nodes.size(); ++i) {
    const Placement& p = m.plan.nodes[i];
    switch (p.kind) {
      case PlacementKind::kArena:
        m.ptr[i] = pools_.at(p.backend).arena.data() + p.offset;
        break;
      case PlacementKind::kPersistent: {
        const Node& n = g.node(static_cast<NodeId>(i));
        m.ptr[i] = regions_.at(RegionKey{n.params.layer, n.params.kv_kind}).info.data;
        break;
      }
      case PlacementKind::kAlias:
        // roots precede aliases in build order, so the root is already resolved;
        // a weight root resolves lazily in data()
        m.ptr[i] = m.ptr[p.root] == nullptr ? nullptr : m.ptr[p.root] + p.offset;
        break;
      case PlacementKind::kExternal:
      case PlacementKind::kNone:
        m.ptr[i] = nullptr;
        break;
    }
  }
}

Status Allocator::map_graph(const ComputeGraph& g) {
  MINFER_CHECK(g.uid() != 0, "map_graph: graph has no uid (cache it first)");
  if (auto it = plans_.find(g.uid()); it != plans_.end()) {
    // Reuse path: arenas never shrink and regions never move, so the stored plan
    // fits; only the pointer table is refreshed (an arena may have grown for another
    // graph since). Nothing is allocated here.
    for (const auto& [backend, bytes] : it->second.plan.arena_bytes) {
      MINFER_CHECK(arena_capacity(backend) >= bytes, "arena of backend %d shrank", backend);
    }
    resolve_pointers(g, it->second);
    current_ = &it->second;
    current_uid_ = g.uid();
    stats_.remaps++;
    return Ok{};
  }
  Mapped m;
  m.plan = plan_graph(g, options_.alignment);
  m.ptr.assign(g.size(), nullptr);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op == graph::Op::kKvRegion) {
      MINFER_TRY_STATUS(ensure_region(g, static_cast<NodeId>(i)));
    } else if (n.op == graph::Op::kWeight) {
      auto w = weights_.find(n.name);
      const uint64_t want = graph::tensor_bytes(n.dtype, n.shape);
      if (w == weights_.end()) continue;
      for (const BoundWeight& b : w->second) {
        if (b.bytes != want) {
          return make_error(
              fmt::format("weight '{}' bound on backend {} with {} bytes; graph needs {} ({} {})",
                          n.name, b.backend, b.bytes, want, dtype_name(n.dtype), n.shape.str()));
        }
      }
    }
  }
  // Growing an arena moves it, so the previously mapped graph's pointers die here;
  // if a later step fails, no graph is mapped (fills and data() refuse) until the
  // next successful map.
  current_ = nullptr;
  current_uid_ = 0;
  for (const auto& [backend, bytes] : m.plan.arena_bytes) {
    MINFER_TRY_STATUS(ensure_arena(backend, bytes));
  }
  auto [it, inserted] = plans_.emplace(g.uid(), std::move(m));
  MINFER_CHECK(inserted, "map_graph: uid %llu planned twice",
               static_cast<unsigned long long>(g.uid()));
  resolve_pointers(g, it->second);
  current_ = &it->second;
  current_uid_ = g.uid();
  stats_.plans_built++;
  return Ok{};
}

void Allocator::release_graph(uint64_t uid) {
  if (uid == current_uid_) {
    current_ = nullptr;
    current_uid_ = 0;
  }
  plans_.erase(uid);
}

std::byte* Allocator::data(const ComputeGraph& g, NodeId id) const {
  MINFER_CHECK(current_ != nullptr && g.uid() == current_uid_,
               "Allocator::data: graph uid %llu is not the mapped graph (uid %llu)",
               static_cast<unsigned long long>(g.uid()),
               static_cast<unsigned long long>(current_uid_));
  const Placement& p = current_->plan.nodes.at(static_cast<size_t>(id));
  if (std::byte* ptr = current_->ptr[id]; ptr != nullptr) return ptr;
  const Node& root = g.node(p.root);
  MINFER_CHECK(root.op == graph::Op::kWeight, "Allocator::data: node %d has no memory", id);
  std::byte* w = weight_data(root.name, root.backend);
  MINFER_CHECK(w != nullptr, "weight '%s' (read by node %d) was never bound on backend %d",
               root.name.c_str(), id, root.backend);
  return w + (p.kind == PlacementKind::kAlias ? p.offset : 0);
}

void Allocator::bind_weight(std::string_view name, const void* data, uint64_t bytes,
                            graph::BackendId backend) {
  MINFER_CHECK(data != nullptr, "bind_weight('%.*s'): null data", static_cast<int>(name.size()),
               name.data());
  std::vector<BoundWeight>& all = weights_[std::string(name)];
  for (BoundWeight& b : all) {
    if (b.backend == backend) {
      b = {backend, data, bytes};
      return;
    }
  }
  all.push_back({backend, data, bytes});
}

const Allocator::BoundWeight* Allocator::find_weight(std::string_view name,
                                                     graph::BackendId backend) const {
  auto w = weights_.find(std::string(name));
  if (w == weights_.end()) return nullptr;
  for (const BoundWeight& b : w->second) {
    if (b.backend == backend) return &b;
  }
  return nullptr;
}

std::byte* Allocator::weight_data(std::string_view name, graph::BackendId backend) const {
  const BoundWeight* b = find_weight(name, backend);
  // const_cast: weights are read-only by contract; kernels take const pointers to them.
  return b == nullptr ? nullptr : static_cast<std::byte*>(const_cast<void*>(b->data));
}

bool Allocator::host_accessible(graph::BackendId backend) const {
  auto it = pools_.find(backend);
  return it != pools_.end() && it->second.memory && it->second.memory->host_accessible();
}

Status Allocator::read_node(const ComputeGraph& g, NodeId id, std::span<std::byte> out) {
  if (current_ == nullptr || g.uid() != current_uid_) {
    return make_error(fmt::format("read_node: graph uid {} is not the mapped graph (uid {})",
                                  g.uid(), current_uid_));
  }
  const Node& n = g.node(id);
  const uint64_t bytes = graph::tensor_bytes(n.dtype, n.shape);
  if (out.size() != bytes) {
    return make_error(
        fmt::format("read_node '{}': {} bytes asked, node holds {}", n.name, out.size(), bytes));
  }
  auto it = pools_.find(n.backend);
  if (it == pools_.end() || !it->second.memory) {
    return make_error(fmt::format("read_node '{}': backend {} has no memory", n.name, n.backend));
  }
  return it->second.memory->read(out.data(), data(g, id), bytes);
}

Result<std::byte*> Allocator::input_bytes(const ComputeGraph& g, std::string_view name, DType dtype,
                                          size_t count) {
  if (current_ == nullptr || g.uid() != current_uid_) {
    return make_error(
        fmt::format("fill '{}': graph uid {} is not the mapped graph (uid {}); fills happen after "
                    "map_graph so they land in the buffers execution reads",
                    name, g.uid(), current_uid_));
  }
  auto id = g.find_input(name);
  if (!id) return make_error(fmt::format("fill: graph has no input named '{}'", name));
  const Node& n = g.node(*id);
  if (n.dtype != dtype) {
    return make_error(fmt::format("fill '{}': input is {}, data is {}", name, dtype_name(n.dtype),
                                  dtype_name(dtype)));
  }
  if (static_cast<int64_t>(count) != n.shape.n_elements()) {
    return make_error(fmt::format("fill '{}': {} values for input {} ({} elements)", name, count,
                                  n.shape.str(), n.shape.n_elements()));
  }
  return current_->ptr[*id];
}

// Inputs are written through their backend's memory (a device's `set`), so an input
// may live on any backend; the CPU's is a memcpy as before.
Status Allocator::fill_input_i32(const ComputeGraph& g, std::string_view name,
                                 std::span<const int32_t> values) {
  MINFER_TRY(std::byte * dst, input_bytes(g, name, DType::kI32, values.size()));
  const auto id = *g.find_input(name);
  return pools_.at(g.node(id).backend).memory->write(dst, values.data(), values.size_bytes());
}

Status Allocator::fill_input_f32(const ComputeGraph& g, std::string_view name,
                                 std::span<const float> values) {
  MINFER_TRY(std::byte * dst, input_bytes(g, name, DType::kF32, values.size()));
  const auto id = *g.find_input(name);
  return pools_.at(g.node(id).backend).memory->write(dst, values.data(), values.size_bytes());
}

const RegionInfo* Allocator::region(int32_t layer, KvKind kind) const {
  auto it = regions_.find(RegionKey{layer, kind});
  return it == regions_.end() ? nullptr : &it->second.info;
}

Result<std::byte*> Allocator::region_cell(int32_t layer, KvKind kind, int64_t cell) const {
  const RegionInfo* r = region(layer, kind);
  if (r == nullptr) {
    return make_error(
        fmt::format("no KV region for layer {} {}", layer, kind == KvKind::kK ? "K" : "V"));
  }
  if (cell < 0 || cell >= r->n_cells) {
    return make_error(
        fmt::format("KV cell {} outside layer {} region of {} cells", cell, layer, r->n_cells));
  }
  return r->data + static_cast<uint64_t>(cell) * r->row_bytes;
}

Status Allocator::read_cell(int32_t layer, KvKind kind, int64_t cell,
                            std::span<std::byte> out) const {
  MINFER_TRY(std::byte * src, region_cell(layer, kind, cell));
  const RegionInfo* r = region(layer, kind);
  MINFER_CHECK(out.size() == r->row_bytes, "read_cell: %zu bytes for a row of %llu", out.size(),
               static_cast<unsigned long long>(r->row_bytes));
  return pools_.at(r->backend).memory->read(out.data(), src, r->row_bytes);
}

Status Allocator::write_cell(int32_t layer, KvKind kind, int64_t cell,
                             std::span<const std::byte> in) {
  MINFER_TRY(std::byte * dst, region_cell(layer, kind, cell));
  const RegionInfo* r = region(layer, kind);
  MINFER_CHECK(in.size() == r->row_bytes, "write_cell: %zu bytes for a row of %llu", in.size(),
               static_cast<unsigned long long>(r->row_bytes));
  return pools_.at(r->backend).memory->write(dst, in.data(), r->row_bytes);
}

}  // namespace minfer::alloc
