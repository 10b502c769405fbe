// Stage 9 (memory): liveness planning in build order with best-fit reuse.
// Invariant: two nodes whose lifetimes overlap never share bytes on one backend.
#include "alloc/plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "core/check.h"
#include "core/checked_math.h"

namespace minfer::alloc {
namespace {

using graph::ComputeGraph;
using graph::Node;
using graph::NodeId;
using graph::Op;

// Offsets within one backend's arena. Free blocks are kept sorted by offset and
// coalesced, so fragmentation stays bounded by the number of live tensors.
class ArenaPlanner {
 public:
  uint64_t alloc(uint64_t size) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].size >= size && (best == free_.size() || free_[i].size < free_[best].size)) {
        best = i;
      }
    }
    if (best != free_.size()) {
      const uint64_t off = free_[best].offset;
      free_[best].offset += size;
      free_[best].size -= size;
      if (free_[best].size == 0) free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      return off;
    }
    const uint64_t off = top_;
    MINFER_CHECK(checked_add(top_, size, &top_), "arena size overflows");
    peak_ = std::max(peak_, top_);
    return off;
  }

  void free(uint64_t offset, uint64_t size) {
    auto it = std::lower_bound(free_.begin(), free_.end(), offset,
                               [](const Block& b, uint64_t o) { return b.offset < o; });
    it = free_.insert(it, Block{offset, size});
    // merge with the next block, then with the previous one
    if (auto next = it + 1; next != free_.end() && it->offset + it->size == next->offset) {
      it->size += next->size;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = it - 1;
      if (prev->offset + prev->size == it->offset) {
        prev->size += it->size;
        it = free_.erase(it) - 1;
      }
    }
    // a free block touching the top shrinks the arena's high-water mark back
    if (it->offset + it->size == top_) {
      top_ = it->offset;
      free_.erase(it);
    }
  }

  uint64_t peak() const { return peak_; }

 private:
  struct Block {
    uint64_t offset;
    uint64_t size;
  };
  std::vector<Block> free_;
  uint64_t top_ = 0;
  uint64_t peak_ = 0;
};

uint64_t aligned(uint64_t bytes, uint64_t alignment) {
  uint64_t out = 0;
  MINFER_CHECK(checked_align_up(bytes == 0 ? 1 : bytes, alignment, &out), "size overflows");
  return out;
}

}  // namespace

uint64_t AllocPlan::arena_bytes_for(graph::BackendId backend) const {
  for (const auto& [b, bytes] : arena_bytes) {
    if (b == backend) return bytes;
  }
  return 0;
}

AllocPlan plan_graph(const ComputeGraph& g, uint64_t alignment) {
  std::string why;
  MINFER_CHECK(g.well_formed(&why), "plan_graph: %s", why.c_str());
  const auto n = static_cast<int32_t>(g.size());
  AllocPlan plan;
  plan.graph_uid = g.uid();
  plan.nodes.resize(g.size());

  // 1. Roots and alias offsets, and each root's last reader in build order.
  std::vector<int32_t> last(g.size(), -1);
  for (NodeId i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    Placement& p = plan.nodes[i];
    p.backend = node.backend;
    p.bytes = graph::tensor_bytes(node.dtype, node.shape);
    p.root = i;
    p.first = i;
    if (graph::op_is_alias(node.op)) {
      const Placement& src = plan.nodes[node.src[0]];
      p.kind = PlacementKind::kAlias;
      p.root = src.root;
      p.offset = src.kind == PlacementKind::kAlias ? src.offset : 0;
      if (node.op == Op::kView) {
        p.offset += static_cast<uint64_t>(node.params.offset) * dtype_info(node.dtype).type_size;
      }
    }
    for (int s = 0; s < node.n_src; ++s) {
      const NodeId r = plan.nodes[node.src[s]].root;
      last[r] = std::max(last[r], i);
    }
    if (node.is_output) last[p.root] = n;  // read after the step
  }

  // 2. Inputs first: they are filled before execution and read by any node, so they
  //    hold their bytes for the whole step and nothing is ever placed over them.
  std::map<graph::BackendId, ArenaPlanner> arenas;
  for (NodeId id : g.inputs()) {
    Placement& p = plan.nodes[id];
    p.kind = PlacementKind::kArena;
    p.offset = arenas[p.backend].alloc(aligned(p.bytes, alignment));
    p.last = n;
  }

  // 3. Walk in build order: place each computed node, then release every root whose
  //    last reader is this node.
  for (NodeId i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    Placement& p = plan.nodes[i];
    switch (node.op) {
      case Op::kInput:
        continue;
      case Op::kWeight:
        p.kind = PlacementKind::kExternal;
        p.last = n;
        continue;
      case Op::kKvRegion:
        p.kind = PlacementKind::kPersistent;
        p.last = n;
        continue;
      default:
        break;
    }
    if (p.kind == PlacementKind::kAlias) {
      p.last = last[p.root];
    } else {
      p.kind = PlacementKind::kArena;
      p.offset = arenas[p.backend].alloc(aligned(p.bytes, alignment));
      // A node nobody reads (and not an output) still runs; its scratch dies at once.
      p.last = std::max(last[i], i);
    }
    for (int s = 0; s < node.n_src; ++s) {
      const NodeId r = plan.nodes[node.src[s]].root;
      Placement& rp = plan.nodes[r];
      if (rp.kind == PlacementKind::kArena && g.node(r).op != Op::kInput && last[r] == i) {
        arenas[rp.backend].free(rp.offset, aligned(rp.bytes, alignment));
        last[r] = -2;  // released once even if read twice by this node
      }
    }
    if (p.kind == PlacementKind::kArena && last[i] == -1) {
      arenas[p.backend].free(p.offset, aligned(p.bytes, alignment));
    }
  }
  for (auto& [backend, planner] : arenas) plan.arena_bytes.emplace_back(backend, planner.peak());
  return plan;
}

}  // namespace minfer::alloc
