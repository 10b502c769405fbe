// Stage 7 (graph IR): GraphBuilder — shape/dtype checks for every op.
// Invariant: a node is appended only after its sources exist and its shapes agree.
#include "graph/builder.h"

#include <string>

#include "core/check.h"

namespace minfer::graph {
namespace {

std::string nm(const Node& n) {
  return (n.name.empty() ? std::string(op_name(n.op)) : n.name) + " " + n.shape.str();
}

bool broadcastable(const Shape& a, const Shape& b) {
  for (int i = 0; i < 4; ++i) {
    if (b.ne[i] != a.ne[i] && b.ne[i] != 1) return false;
  }
  return true;
}

}  // namespace

GraphBuilder::GraphBuilder(BuilderOptions options) : options_(options) {}

const Node& GraphBuilder::src(NodeId id) const {
  MINFER_CHECK(!finished_, "GraphBuilder used after finish()");
  MINFER_CHECK(id >= 0 && static_cast<size_t>(id) < graph_.nodes_.size(),
               "GraphBuilder: source id %d does not exist (%zu nodes)", id, graph_.nodes_.size());
  return graph_.nodes_[id];
}

void GraphBuilder::check_f32(NodeId id, const char* op) const {
  const Node& n = src(id);
  MINFER_CHECK(n.dtype == DType::kF32, "%s: source %s is %s, expected f32", op, nm(n).c_str(),
               std::string(dtype_name(n.dtype)).c_str());
}

Node GraphBuilder::make(Op op, std::initializer_list<NodeId> srcs, Shape shape, DType dtype) const {
  Node n;
  n.op = op;
  MINFER_CHECK(srcs.size() <= static_cast<size_t>(kMaxSrc), "too many sources");
  for (NodeId s : srcs) {
    src(s);  // existence check
    n.src[n.n_src++] = s;
  }
  n.shape = shape;
  n.dtype = dtype;
  n.backend = options_.backend;
  n.layer = layer_;
  return n;
}

NodeId GraphBuilder::push(Node n) {
  MINFER_CHECK(!finished_, "GraphBuilder used after finish()");
  graph_.nodes_.push_back(std::move(n));
  return static_cast<NodeId>(graph_.nodes_.size() - 1);
}

NodeId GraphBuilder::input(std::string_view name, DType dtype, Shape shape) {
  MINFER_CHECK(!name.empty(), "input: an input needs a name (fills address it by name)");
  MINFER_CHECK(!graph_.find_input(name), "input: duplicate input name '%s'",
               std::string(name).c_str());
  Node n = make(Op::kInput, {}, shape, dtype);
  n.name = name;
  NodeId id = push(std::move(n));
  graph_.inputs_.push_back(id);
  return id;
}

NodeId GraphBuilder::weight(std::string_view name, DType dtype, Shape shape) {
  MINFER_CHECK(!name.empty(), "weight: a weight needs its tensor name");
  tensor_bytes(dtype, shape);  // block-size check
  Node n = make(Op::kWeight, {}, shape, dtype);
  n.name = name;
  return push(std::move(n));
}

NodeId GraphBuilder::kv_region(int32_t layer, KvKind kind, DType dtype, Shape shape) {
  MINFER_CHECK(layer >= 0, "kv_region: layer %d < 0", layer);
  MINFER_CHECK(shape.ne[2] == 1 && shape.ne[3] == 1, "kv_region: shape %s is not 2-D",
               shape.str().c_str());
  Node n = make(Op::kKvRegion, {}, shape, dtype);
  n.name = (kind == KvKind::kK ? "cache_k-" : "cache_v-") + std::to_string(layer);
  n.params.layer = layer;
  n.params.kv_kind = kind;
  n.layer = layer;
  return push(std::move(n));
}

NodeId GraphBuilder::get_rows(NodeId table, NodeId ids) {
  const Node& t = src(table);
  const Node& i = src(ids);
  MINFER_CHECK(i.dtype == DType::kI32 && i.shape.n_rows() == 1, "get_rows: ids %s must be I32 [n]",
               nm(i).c_str());
  MINFER_CHECK(t.shape.ne[2] == 1 && t.shape.ne[3] == 1, "get_rows: table %s is not 2-D",
               nm(t).c_str());
  return push(make(Op::kGetRows, {table, ids}, Shape{t.shape.ne[0], i.shape.ne[0]}, DType::kF32));
}

NodeId GraphBuilder::rms_norm(NodeId x, float eps) {
  check_f32(x, "rms_norm");
  MINFER_CHECK(eps > 0.0f, "rms_norm: eps %g must be > 0", static_cast<double>(eps));
  Node n = make(Op::kRmsNorm, {x}, src(x).shape, DType::kF32);
  n.params.eps = eps;
  return push(std::move(n));
}

NodeId GraphBuilder::layer_norm(NodeId x, float eps, bool llamacpp) {
  check_f32(x, "layer_norm");
  MINFER_CHECK(eps > 0.0f, "layer_norm: eps %g must be > 0", static_cast<double>(eps));
  Node n = make(Op::kNorm, {x}, src(x).shape, DType::kF32);
  n.params.eps = eps;
  n.params.ggml_f16 = llamacpp ? 1 : 0;
  return push(std::move(n));
}

NodeId GraphBuilder::mul(NodeId a, NodeId b) {
  check_f32(a, "mul");
  check_f32(b, "mul");
  MINFER_CHECK(broadcastable(src(a).shape, src(b).shape), "mul: %s does not broadcast to %s",
               nm(src(b)).c_str(), nm(src(a)).c_str());
  return push(make(Op::kMul, {a, b}, src(a).shape, DType::kF32));
}

NodeId GraphBuilder::add(NodeId a, NodeId b) {
  check_f32(a, "add");
  check_f32(b, "add");
  MINFER_CHECK(broadcastable(src(a).shape, src(b).shape), "add: %s does not broadcast to %s",
               nm(src(b)).c_str(), nm(src(a)).c_str());
  return push(make(Op::kAdd, {a, b}, src(a).shape, DType::kF32));
}

NodeId GraphBuilder::mul_mat(NodeId w, NodeId x) {
  const Node& wn = src(w);
  check_f32(x, "mul_mat");
  const Node& xn = src(x);
  MINFER_CHECK(wn.shape.ne[2] == 1 && wn.shape.ne[3] == 1, "mul_mat: weight %s is not 2-D",
               nm(wn).c_str());
  MINFER_CHECK(wn.shape.ne[0] == xn.shape.ne[0], "mul_mat: inner dims differ: %s × %s",
               nm(wn).c_str(), nm(xn).c_str());
  Shape out = xn.shape;
  out.ne[0] = wn.shape.ne[1];
  return push(make(Op::kMulMat, {w, x}, out, DType::kF32));
}

NodeId GraphBuilder::rope(NodeId x, NodeId positions, const RopeParams& p) {
  check_f32(x, "rope");
  const Node& xn = src(x);
  const Node& pn = src(positions);
  MINFER_CHECK(pn.dtype == DType::kI32 && pn.shape.n_elements() == xn.shape.ne[2],
               "rope: positions %s must be I32 [%lld] for x %s", nm(pn).c_str(),
               static_cast<long long>(xn.shape.ne[2]), nm(xn).c_str());
  int32_t n_rot = p.n_rot == 0 ? static_cast<int32_t>(xn.shape.ne[0]) : p.n_rot;
  MINFER_CHECK(n_rot > 0 && n_rot <= xn.shape.ne[0] && n_rot % 2 == 0,
               "rope: n_rot %d must be even and <= head_dim %lld", n_rot,
               static_cast<long long>(xn.shape.ne[0]));
  MINFER_CHECK(p.freq_base > 0.0f && p.freq_scale > 0.0f, "rope: freq_base %g freq_scale %g",
               static_cast<double>(p.freq_base), static_cast<double>(p.freq_scale));
  Node n = make(Op::kRope, {x, positions}, xn.shape, DType::kF32);
  n.params.rope_mode = p.mode;
  n.params.n_rot = n_rot;
  n.params.freq_base = p.freq_base;
  n.params.freq_scale = p.freq_scale;
  return push(std::move(n));
}

NodeId GraphBuilder::kv_store(NodeId region, NodeId rows, NodeId cells) {
  const Node& r = src(region);
  check_f32(rows, "kv_store");
  const Node& rw = src(rows);
  const Node& c = src(cells);
  MINFER_CHECK(r.op == Op::kKvRegion, "kv_store: destination %s is not a kv_region", nm(r).c_str());
  MINFER_CHECK(c.dtype == DType::kI32 && c.shape.n_rows() == 1, "kv_store: cells %s must be I32",
               nm(c).c_str());
  MINFER_CHECK(rw.shape.n_elements() == r.shape.ne[0] * c.shape.ne[0],
               "kv_store: rows %s hold %lld elements, expected %lld (region %s × %lld cells)",
               nm(rw).c_str(), static_cast<long long>(rw.shape.n_elements()),
               static_cast<long long>(r.shape.ne[0] * c.shape.ne[0]), nm(r).c_str(),
               static_cast<long long>(c.shape.ne[0]));
  Node n = make(Op::kKvStore, {region, rows, cells}, r.shape, r.dtype);
  n.params.layer = r.params.layer;
  n.params.kv_kind = r.params.kv_kind;
  n.layer = r.params.layer;
  return push(std::move(n));
}

NodeId GraphBuilder::attention(NodeId q, NodeId k, NodeId v, NodeId window,
                               const AttentionParams& p) {
  check_f32(q, "attention");
  const Node& qn = src(q);
  const Node& kn = src(k);
  const Node& vn = src(v);
  const Node& wn = src(window);
  MINFER_CHECK(kn.op == Op::kKvStore && vn.op == Op::kKvStore,
               "attention: k %s and v %s must be kv_store results (so the write is ordered "
               "before the read)",
               nm(kn).c_str(), nm(vn).c_str());
  MINFER_CHECK(kn.params.kv_kind == KvKind::kK && vn.params.kv_kind == KvKind::kV &&
                   kn.params.layer == p.layer && vn.params.layer == p.layer,
               "attention: k/v regions are not layer %d's K and V", p.layer);
  MINFER_CHECK(p.n_head > 0 && p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0,
               "attention: n_head %d / n_head_kv %d is not a GQA layout", p.n_head, p.n_head_kv);
  MINFER_CHECK(qn.shape.ne[1] == p.n_head && qn.shape.ne[3] == 1,
               "attention: q %s is not [head_dim, %d, n_tokens]", nm(qn).c_str(), p.n_head);
  const int64_t head_dim = qn.shape.ne[0];
  const int64_t n_tokens = qn.shape.ne[2];
  MINFER_CHECK(kn.shape.ne[0] == head_dim * p.n_head_kv,
               "attention: K region row %lld != head_dim %lld × n_head_kv %d",
               static_cast<long long>(kn.shape.ne[0]), static_cast<long long>(head_dim),
               p.n_head_kv);
  MINFER_CHECK(vn.shape.ne[0] % p.n_head_kv == 0 && kn.shape.ne[1] == vn.shape.ne[1],
               "attention: V region %s does not match K %s", nm(vn).c_str(), nm(kn).c_str());
  MINFER_CHECK(wn.dtype == DType::kI32 && wn.shape.ne[0] >= 2 && wn.shape.ne[0] % 2 == 0 &&
                   wn.shape.ne[1] == n_tokens && wn.shape.ne[2] == 1,
               "attention: window %s must be I32 [2 * n_runs, %lld]", nm(wn).c_str(),
               static_cast<long long>(n_tokens));
  MINFER_CHECK(p.scale > 0.0f, "attention: scale %g must be > 0", static_cast<double>(p.scale));
  // K and V may hold different cell types (-ctk / -ctv).
  auto cell_type = [](DType d) {
    return d == DType::kF32 || d == DType::kF16 || d == DType::kQ8_0 || d == DType::kQ4_0;
  };
  auto block_type = [](DType d) { return d == DType::kQ8_0 || d == DType::kQ4_0; };
  MINFER_CHECK(cell_type(kn.dtype) && cell_type(vn.dtype),
               "attention: K %s and V %s must each be F32, F16, Q8_0 or Q4_0", nm(kn).c_str(),
               nm(vn).c_str());
  MINFER_CHECK((!block_type(kn.dtype) || head_dim % 32 == 0) &&
                   (!block_type(vn.dtype) || vn.shape.ne[0] / p.n_head_kv % 32 == 0),
               "attention: a quantized K/V region (K %s, V %s) holds whole 32-blocks per head",
               nm(kn).c_str(), nm(vn).c_str());
  MINFER_CHECK(!p.ggml_f16 || (kn.dtype != DType::kF32 && vn.dtype != DType::kF32),
               "attention: ggml-f16 numerics need F16, Q8_0 or Q4_0 K/V regions (K %s, V %s)",
               nm(kn).c_str(), nm(vn).c_str());
  const int64_t head_dim_v = vn.shape.ne[0] / p.n_head_kv;
  Node n =
      make(Op::kAttention, {q, k, v, window}, Shape{head_dim_v * p.n_head, n_tokens}, DType::kF32);
  n.params.n_head = p.n_head;
  n.params.n_head_kv = p.n_head_kv;
  n.params.scale = p.scale;
  n.params.causal = p.causal ? 1 : 0;
  n.params.ggml_f16 = p.ggml_f16 ? 1 : 0;
  n.params.layer = p.layer;
  return push(std::move(n));
}

NodeId GraphBuilder::silu(NodeId x) {
  check_f32(x, "silu");
  return push(make(Op::kSilu, {x}, src(x).shape, DType::kF32));
}

NodeId GraphBuilder::swiglu(NodeId gate, NodeId up) {
  check_f32(gate, "swiglu");
  check_f32(up, "swiglu");
  MINFER_CHECK(src(gate).shape == src(up).shape, "swiglu: gate %s and up %s differ",
               nm(src(gate)).c_str(), nm(src(up)).c_str());
  return push(make(Op::kSwiglu, {gate, up}, src(gate).shape, DType::kF32));
}

NodeId GraphBuilder::geglu(NodeId gate, NodeId up, bool llamacpp_table) {
  check_f32(gate, "geglu");
  check_f32(up, "geglu");
  MINFER_CHECK(src(gate).shape == src(up).shape, "geglu: gate %s and up %s differ",
               nm(src(gate)).c_str(), nm(src(up)).c_str());
  Node n = make(Op::kGeglu, {gate, up}, src(gate).shape, DType::kF32);
  n.params.ggml_f16 = llamacpp_table ? 1 : 0;
  return push(std::move(n));
}

NodeId GraphBuilder::tanh(NodeId x) {
  check_f32(x, "tanh");
  return push(make(Op::kTanh, {x}, src(x).shape, DType::kF32));
}

NodeId GraphBuilder::hadamard(NodeId x, int32_t n) {
  check_f32(x, "hadamard");
  const Shape& xs = src(x).shape;
  MINFER_CHECK(n >= 2 && (n & (n - 1)) == 0 && xs.n_elements() % n == 0,
               "hadamard: block %d of %s (a power of two >= 2 dividing its elements)", n,
               nm(src(x)).c_str());
  Node node = make(Op::kHadamard, {x}, xs, DType::kF32);
  node.params.n_rot = n;
  return push(std::move(node));
}

NodeId GraphBuilder::gelu(NodeId x, bool llamacpp_table) {
  check_f32(x, "gelu");
  Node n = make(Op::kGelu, {x}, src(x).shape, DType::kF32);
  n.params.ggml_f16 = llamacpp_table ? 1 : 0;
  return push(std::move(n));
}

NodeId GraphBuilder::top_k(NodeId x, int64_t k) {
  check_f32(x, "top_k");
  const Shape& xs = src(x).shape;
  MINFER_CHECK(k >= 1 && k <= xs.ne[0] && xs.ne[2] == 1 && xs.ne[3] == 1,
               "top_k: k %lld of %s (2-D, 1 <= k <= ne0)", static_cast<long long>(k),
               nm(src(x)).c_str());
  return push(make(Op::kTopK, {x}, Shape{k, xs.ne[1]}, DType::kI32));
}

NodeId GraphBuilder::moe_weights(NodeId probs, NodeId ids) {
  check_f32(probs, "moe_weights");
  const Shape& ps = src(probs).shape;
  const Shape& is = src(ids).shape;
  MINFER_CHECK(src(ids).dtype == DType::kI32 && is.ne[1] == ps.ne[1] && is.ne[2] == 1 &&
                   ps.ne[2] == 1 && is.ne[0] <= ps.ne[0],
               "moe_weights: ids %s do not select from probs %s", nm(src(ids)).c_str(),
               nm(src(probs)).c_str());
  return push(make(Op::kMoeWeights, {probs, ids}, Shape{is.ne[0], is.ne[1]}, DType::kF32));
}

NodeId GraphBuilder::mul_mat_id(NodeId w, NodeId x, NodeId ids) {
  check_f32(x, "mul_mat_id");
  const Shape& ws = src(w).shape;
  const Shape& xs = src(x).shape;
  const Shape& is = src(ids).shape;
  MINFER_CHECK(src(ids).dtype == DType::kI32 && is.ne[2] == 1 && ws.ne[3] == 1 &&
                   xs.ne[0] == ws.ne[0] && xs.ne[2] == is.ne[1] &&
                   (xs.ne[1] == 1 || xs.ne[1] == is.ne[0]) && xs.ne[3] == 1,
               "mul_mat_id: w %s, x %s, ids %s do not fit", nm(src(w)).c_str(), nm(src(x)).c_str(),
               nm(src(ids)).c_str());
  return push(make(Op::kMulMatId, {w, x, ids}, Shape{ws.ne[1], is.ne[0], is.ne[1]}, DType::kF32));
}

NodeId GraphBuilder::moe_sum(NodeId experts, NodeId weights) {
  check_f32(experts, "moe_sum");
  check_f32(weights, "moe_sum");
  const Shape& es = src(experts).shape;
  const Shape& ws = src(weights).shape;
  MINFER_CHECK(ws.ne[0] == es.ne[1] && ws.ne[1] == es.ne[2] && ws.ne[2] == 1 && es.ne[3] == 1,
               "moe_sum: weights %s do not match experts %s", nm(src(weights)).c_str(),
               nm(src(experts)).c_str());
  return push(make(Op::kMoeSum, {experts, weights}, Shape{es.ne[0], es.ne[2]}, DType::kF32));
}

NodeId GraphBuilder::softmax(NodeId x, float s) {
  check_f32(x, "softmax");
  Node n = make(Op::kSoftmax, {x}, src(x).shape, DType::kF32);
  n.params.scale = s;
  return push(std::move(n));
}

NodeId GraphBuilder::scale(NodeId x, float s) {
  check_f32(x, "scale");
  Node n = make(Op::kScale, {x}, src(x).shape, DType::kF32);
  n.params.scale = s;
  return push(std::move(n));
}

NodeId GraphBuilder::cont(NodeId x) {
  const Node& xn = src(x);
  return push(make(Op::kCont, {x}, xn.shape, xn.dtype));
}

NodeId GraphBuilder::reshape(NodeId x, Shape shape) {
  const Node& xn = src(x);
  MINFER_CHECK(xn.shape.n_elements() == shape.n_elements(),
               "reshape: %s has %lld elements, %s has %lld", nm(xn).c_str(),
               static_cast<long long>(xn.shape.n_elements()), shape.str().c_str(),
               static_cast<long long>(shape.n_elements()));
  MINFER_CHECK(dtype_info(xn.dtype).block_size == 1 || shape.ne[0] == xn.shape.ne[0],
               "reshape: quantized %s must keep its row length", nm(xn).c_str());
  return push(make(Op::kReshape, {x}, shape, xn.dtype));
}

NodeId GraphBuilder::view(NodeId x, Shape shape, int64_t offset) {
  const Node& xn = src(x);
  MINFER_CHECK(dtype_info(xn.dtype).block_size == 1, "view: %s is quantized", nm(xn).c_str());
  MINFER_CHECK(offset >= 0 && offset + shape.n_elements() <= xn.shape.n_elements(),
               "view: [%lld, +%lld) outside %s", static_cast<long long>(offset),
               static_cast<long long>(shape.n_elements()), nm(xn).c_str());
  Node n = make(Op::kView, {x}, shape, xn.dtype);
  n.params.offset = offset;
  return push(std::move(n));
}

void GraphBuilder::name(NodeId id, std::string_view base, int32_t il) {
  src(id);
  Node& n = graph_.nodes_[id];
  MINFER_CHECK(!n.is_leaf(), "name: leaf %s keeps its own name", n.name.c_str());
  n.name = il >= 0 ? std::string(base) + "-" + std::to_string(il) : std::string(base);
  if (il >= 0) n.layer = il;
}

void GraphBuilder::mark_output(NodeId id) {
  src(id);
  Node& n = graph_.nodes_[id];
  MINFER_CHECK(!n.is_leaf(), "mark_output: leaf %s cannot be an output", n.name.c_str());
  if (n.is_output) return;
  n.is_output = true;
  graph_.outputs_.push_back(id);
}

ComputeGraph GraphBuilder::finish() {
  MINFER_CHECK(!finished_, "GraphBuilder::finish() called twice");
  MINFER_CHECK(!graph_.outputs_.empty(), "GraphBuilder::finish(): no output marked");
  std::string why;
  MINFER_CHECK(graph_.well_formed(&why), "GraphBuilder::finish(): %s", why.c_str());
  finished_ = true;
  return std::move(graph_);
}

}  // namespace minfer::graph
