// Stage 7 (graph IR): shapes, sizes, op names and ComputeGraph queries.
// Invariant: sizes are exact (quantized rows are whole blocks) and overflow-checked.
#include "graph/graph.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/checked_math.h"
#include "graph/params.h"

namespace minfer::graph {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kInput:
      return "input";
    case Op::kWeight:
      return "weight";
    case Op::kKvRegion:
      return "kv_region";
    case Op::kGetRows:
      return "get_rows";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kMul:
      return "mul";
    case Op::kAdd:
      return "add";
    case Op::kMulMat:
      return "mul_mat";
    case Op::kRope:
      return "rope";
    case Op::kKvStore:
      return "kv_store";
    case Op::kAttention:
      return "attention";
    case Op::kSilu:
      return "silu";
    case Op::kSwiglu:
      return "swiglu";
    case Op::kSoftmax:
      return "softmax";
    case Op::kScale:
      return "scale";
    case Op::kCont:
      return "cont";
    case Op::kReshape:
      return "reshape";
    case Op::kView:
      return "view";
    case Op::kRmsNormMul:
      return "rms_norm_mul";
    case Op::kGeglu:
      return "geglu";
    case Op::kTanh:
      return "tanh";
    case Op::kNorm:
      return "norm";
    case Op::kGelu:
      return "gelu";
    case Op::kHadamard:
      return "hadamard";
    case Op::kTopK:
      return "top_k";
    case Op::kMoeWeights:
      return "moe_weights";
    case Op::kMulMatId:
      return "mul_mat_id";
    case Op::kMoeSum:
      return "moe_sum";
    case Op::kCount:
      break;
  }
  MINFER_CHECK(false, "op_name: invalid op %d", static_cast<int>(op));
  return {};
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  MINFER_CHECK(dims.size() >= 1 && dims.size() <= 4, "Shape: %zu dims (1..4 allowed)", dims.size());
  int i = 0;
  for (int64_t d : dims) {
    MINFER_CHECK(d >= 1, "Shape: dim %d is %lld (must be >= 1)", i, static_cast<long long>(d));
    ne[i++] = d;
  }
  n_dims = static_cast<int32_t>(dims.size());
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

uint64_t tensor_bytes(DType dtype, const Shape& shape) {
  const DTypeInfo& info = dtype_info(dtype);
  MINFER_CHECK(shape.ne[0] % info.block_size == 0,
               "tensor_bytes: ne0 %lld is not a multiple of the %s block size %u",
               static_cast<long long>(shape.ne[0]), std::string(info.name).c_str(),
               info.block_size);
  uint64_t row = 0, total = 0;
  bool ok =
      checked_mul(static_cast<uint64_t>(shape.ne[0] / info.block_size), info.type_size, &row) &&
      checked_mul(row, static_cast<uint64_t>(shape.n_rows()), &total);
  MINFER_CHECK(ok, "tensor_bytes: size of %s %s overflows", std::string(info.name).c_str(),
               shape.str().c_str());
  return total;
}

const Node& ComputeGraph::node(NodeId id) const {
  MINFER_CHECK(id >= 0 && static_cast<size_t>(id) < nodes_.size(),
               "node id %d out of range (graph has %zu nodes)", id, nodes_.size());
  return nodes_[id];
}

std::optional<NodeId> ComputeGraph::find(std::string_view name) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name == name) return static_cast<NodeId>(i);
  }
  return std::nullopt;
}

std::optional<NodeId> ComputeGraph::find_input(std::string_view name) const {
  for (NodeId id : inputs_) {
    if (nodes_[id].name == name) return id;
  }
  return std::nullopt;
}

std::vector<int32_t> ComputeGraph::consumer_counts() const {
  std::vector<int32_t> counts(nodes_.size(), 0);
  for (const Node& n : nodes_) {
    for (int s = 0; s < n.n_src; ++s) counts[n.src[s]]++;
  }
  return counts;
}

void ComputeGraph::assign_backend(NodeId id, BackendId backend) {
  MINFER_CHECK(uid_ == 0,
               "assign_backend on cached graph uid %llu: placement is decided "
               "before caching",
               static_cast<unsigned long long>(uid_));
  node(id);  // range check
  nodes_[id].backend = backend;
}

bool ComputeGraph::well_formed(std::string* why) const {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.is_leaf() != (n.n_src == 0)) {
      return fail("node " + std::to_string(i) + " (" + std::string(op_name(n.op)) + ") has " +
                  std::to_string(n.n_src) + " sources");
    }
    for (int s = 0; s < n.n_src; ++s) {
      if (n.src[s] < 0 || static_cast<size_t>(n.src[s]) >= i) {
        return fail("node " + std::to_string(i) + " reads node " + std::to_string(n.src[s]) +
                    " which is not earlier in build order");
      }
    }
  }
  for (NodeId id : inputs_) {
    if (nodes_[id].op != Op::kInput) return fail("inputs_ lists a non-input node");
  }
  return true;
}

void ComputeGraph::compact(const std::vector<bool>& keep) {
  MINFER_CHECK(keep.size() == nodes_.size(), "compact: keep has %zu entries for %zu nodes",
               keep.size(), nodes_.size());
  std::vector<NodeId> remap(nodes_.size(), kNoNode);
  std::vector<Node> out;
  out.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!keep[i]) continue;
    remap[i] = static_cast<NodeId>(out.size());
    Node n = std::move(nodes_[i]);
    for (int s = 0; s < n.n_src; ++s) {
      MINFER_CHECK(remap[n.src[s]] != kNoNode, "compact: kept node %zu reads dropped node %d", i,
                   n.src[s]);
      n.src[s] = remap[n.src[s]];
    }
    out.push_back(std::move(n));
  }
  auto remap_list = [&](std::vector<NodeId>& ids) {
    std::vector<NodeId> kept;
    for (NodeId id : ids) {
      MINFER_CHECK(remap[id] != kNoNode || nodes_[id].op == Op::kInput,
                   "compact: dropped output node %d", id);
      if (remap[id] != kNoNode) kept.push_back(remap[id]);
    }
    ids = std::move(kept);
  };
  remap_list(outputs_);
  // Inputs are never dropped by the fusion pass; compact keeps them even if unused,
  // because callers fill them by name whatever the graph does with them.
  remap_list(inputs_);
  nodes_ = std::move(out);
}

void place_layers(ComputeGraph& g, const LayerPlacement& p) {
  if (p.n_layers <= 0 && !p.head) return;
  int32_t n_layer = 0;
  for (const Node& n : g.nodes()) n_layer = std::max(n_layer, n.layer + 1);
  const int32_t first = n_layer - std::min(p.n_layers, n_layer);
  bool seen_layer = false;
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (n.layer >= 0) seen_layer = true;
    const bool in_layers = n.layer >= first && p.n_layers > 0;
    const bool in_head = p.head && n.layer < 0 && seen_layer && n.op != Op::kInput;
    if (in_layers || in_head) g.assign_backend(id, p.device);
  }
}

}  // namespace minfer::graph
