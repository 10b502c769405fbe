// Tests (device seam): a backend whose memory the host cannot address — the proof, on a
// CPU-only machine, that every byte crosses the seam through set / get / copies.
// Each buffer it hands out is an address range mapped PROT_NONE (any host dereference
// faults) while its bytes live in a separate block only this backend reads; execute
// translates the split's NodeData into those blocks and runs the CPU kernels on them.
// A node whose memory is not inside its own buffers (a host pointer, a weight that was
// not uploaded) is an Error naming the node. It counts the bytes it moves.
#pragma once

#include <fmt/format.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "graph/graph.h"

namespace minfer::testing {

struct SealedCounters {
  uint64_t set_bytes = 0, get_bytes = 0;  // host -> sealed, sealed -> host
  uint64_t n_set = 0, n_get = 0;
  uint64_t executes = 0, nodes_run = 0;
  uint64_t fences_recorded = 0, fences_waited = 0;
  uint64_t live_buffers = 0;
  std::vector<uint64_t> prepared, released;
};

class SealedBackend final : public backend::Backend {
 public:
  SealedBackend(graph::BackendId id, std::unique_ptr<backend::cpu::CpuBackend> inner,
                SealedCounters& counters)
      : id_(id), inner_(std::move(inner)), c_(counters) {}
  ~SealedBackend() override {
    for (auto& [addr, b] : blocks_) release_block(b);
  }

  std::string_view name() const override { return "sealed"; }
  graph::BackendId id() const override { return id_; }
  bool supports_op(const graph::Node& node, std::span<const DType> src) const override {
    return inner_->supports_op(node, src);
  }
  bool host_addressable() const override { return false; }

  Result<void*> alloc_buffer(uint64_t bytes, uint64_t alignment) override {
    const uint64_t size = (std::max<uint64_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    // The address range the allocator sees: reserved, never readable by the host.
    void* addr = ::mmap(nullptr, size + alignment, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (addr == MAP_FAILED) return make_error(fmt::format("sealed: mmap of {} bytes failed", size));
    auto* base = static_cast<std::byte*>(addr);
    auto* aligned = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(base) + alignment - 1) / alignment * alignment);
    void* storage = std::aligned_alloc(std::max<uint64_t>(alignment, 64), size);
    if (storage == nullptr) {
      ::munmap(addr, size + alignment);
      return make_error(fmt::format("sealed: {} bytes of storage failed", size));
    }
    blocks_[reinterpret_cast<uintptr_t>(aligned)] =
        Block{.map = base,
              .map_bytes = size + alignment,
              .addr = aligned,
              .size = size,
              .storage = static_cast<std::byte*>(storage)};
    c_.live_buffers++;
    return static_cast<void*>(aligned);
  }
  void free_buffer(void* ptr, uint64_t /*bytes*/) noexcept override {
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) std::abort();  // freeing what it never gave: a broken invariant
    release_block(it->second);
    blocks_.erase(it);
    c_.live_buffers--;
  }
  Status set(void* dst, const void* host_src, uint64_t bytes) override {
    MINFER_TRY(std::byte * d, translate(dst, bytes, "set"));
    std::memcpy(d, host_src, bytes);
    c_.set_bytes += bytes;
    c_.n_set++;
    return Ok{};
  }
  Status get(void* host_dst, const void* src, uint64_t bytes) override {
    MINFER_TRY(std::byte * s, translate(src, bytes, "get"));
    std::memcpy(host_dst, s, bytes);
    c_.get_bytes += bytes;
    c_.n_get++;
    return Ok{};
  }
  uint64_t record_fence() override {
    c_.fences_recorded++;
    return ++fence_;
  }
  Status wait_fence(uint64_t token) override {
    if (token > fence_) return make_error(fmt::format("sealed: fence {} never recorded", token));
    c_.fences_waited++;
    return Ok{};
  }
  Status prepare(const graph::ComputeGraph& g) override {
    c_.prepared.push_back(g.uid());
    return Ok{};
  }
  void release(uint64_t uid) override { c_.released.push_back(uid); }

  Status execute(const graph::ComputeGraph& g, std::span<const graph::NodeId> nodes,
                 const backend::NodeData& data) override {
    table_.assign(g.size(), nullptr);
    for (graph::NodeId id : nodes) {
      const graph::Node& n = g.node(id);
      if (n.is_leaf()) continue;
      MINFER_TRY_STATUS(map_node(g, id, id, data));
      for (int k = 0; k < n.n_src; ++k) MINFER_TRY_STATUS(map_node(g, id, n.src[k], data));
    }
    c_.executes++;
    c_.nodes_run += nodes.size();
    return inner_->execute(g, nodes, backend::NodeData{.ptr = table_});
  }

 private:
  struct Block {
    std::byte* map = nullptr;
    uint64_t map_bytes = 0;
    std::byte* addr = nullptr;
    uint64_t size = 0;
    std::byte* storage = nullptr;
  };
  static void release_block(Block& b) {
    ::munmap(b.map, b.map_bytes);
    std::free(b.storage);
  }
  // The storage behind [p, p + bytes), or an Error when that range is not one of ours.
  Result<std::byte*> translate(const void* p, uint64_t bytes, std::string_view what) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.upper_bound(a);
    if (it != blocks_.begin()) {
      --it;
      const Block& b = it->second;
      const auto base = reinterpret_cast<uintptr_t>(b.addr);
      if (a >= base && a + bytes <= base + b.size) return b.storage + (a - base);
    }
    return make_error(
        fmt::format("sealed {}: {} bytes at {} are not in sealed memory (a host "
                    "pointer, or another backend's)",
                    what, bytes, p));
  }
  Status map_node(const graph::ComputeGraph& g, graph::NodeId reader, graph::NodeId id,
                  const backend::NodeData& data) {
    if (table_[static_cast<size_t>(id)] != nullptr) return Ok{};
    const graph::Node& n = g.node(id);
    const uint64_t bytes = graph::tensor_bytes(n.dtype, n.shape);
    auto t = translate(data[id], bytes, "execute");
    if (!t.ok()) {
      return make_error(fmt::format("sealed: node {} '{}' reads node {} '{}' ({}): {}", reader,
                                    g.node(reader).name, id, n.name, graph::op_name(n.op),
                                    t.error().message));
    }
    table_[static_cast<size_t>(id)] = *t;
    return Ok{};
  }

  graph::BackendId id_;
  std::unique_ptr<backend::cpu::CpuBackend> inner_;
  SealedCounters& c_;
  std::map<uintptr_t, Block> blocks_;
  std::vector<std::byte*> table_;
  uint64_t fence_ = 0;
};

// Registers "sealed" for the test's lifetime; its CPU kernels take `cpu` options (the
// context's own, so results can be compared bit for bit).
struct ScopedSealed {
  SealedCounters counters;
  explicit ScopedSealed(backend::cpu::CpuBackendOptions cpu) {
    // Field by field: GCC 12 warns (maybe-uninitialized) on the nested designated form.
    backend::DeviceFactory f;
    f.info.name = "sealed";
    f.info.description = "test backend: memory the host cannot address";
    f.info.host_memory = false;
    f.create = [this, cpu](graph::BackendId id) -> Result<std::unique_ptr<backend::Backend>> {
      backend::cpu::CpuBackendOptions o = cpu;
      o.id = id;
      MINFER_TRY(auto inner, backend::cpu::CpuBackend::create(o));
      return std::unique_ptr<backend::Backend>(new SealedBackend(id, std::move(inner), counters));
    };
    Status st = backend::Registry::global().add(std::move(f));
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  }
  ~ScopedSealed() { backend::Registry::global().remove("sealed"); }
};

}  // namespace minfer::testing
