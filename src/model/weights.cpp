// Stage 6 (weights + topology): tensor lookup with shape and type checks.
#include "model/weights.h"

#include <fmt/format.h>

#include "quant/quant.h"

namespace minfer::model {
namespace {

std::string shape_str(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  bool first = true;
  for (int64_t d : shape) {
    if (!first) s += ", ";
    s += std::to_string(d);
    first = false;
  }
  return s + "]";
}

std::string dims_str(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

void ModelWeights::for_each(const std::function<void(const WeightRef&)>& fn) const {
  fn(tok_embd);
  for (const WeightRef* w : {&output_norm, &pos_embd, &type_embd, &tok_norm, &tok_norm_b, &cls,
                             &cls_b, &cls_out, &cls_out_b}) {
    if (w->present()) fn(*w);
  }
  if (!output_tied && output.present()) fn(output);
  for (const LayerWeights& l : layers) {
    for (const WeightRef* w : {&l.attn_norm,
                               &l.wq,
                               &l.wk,
                               &l.wv,
                               &l.wo,
                               &l.bq,
                               &l.bk,
                               &l.bv,
                               &l.ffn_norm,
                               &l.ffn_gate,
                               &l.ffn_up,
                               &l.ffn_down,
                               &l.attn_q_norm,
                               &l.attn_k_norm,
                               &l.attn_post_norm,
                               &l.ffn_post_norm,
                               &l.ffn_gate_inp,
                               &l.ffn_gate_exps,
                               &l.ffn_up_exps,
                               &l.ffn_down_exps,
                               &l.bo,
                               &l.ffn_up_b,
                               &l.ffn_down_b,
                               &l.attn_out_norm,
                               &l.attn_out_norm_b,
                               &l.layer_out_norm,
                               &l.layer_out_norm_b}) {
      if (w->present()) fn(*w);
    }
  }
}

Result<WeightRef> WeightBinder::optional(std::string_view name,
                                         std::initializer_list<int64_t> shape) const {
  if (!has(name)) return WeightRef{};
  return require(name, shape);
}

Result<WeightRef> WeightBinder::require(std::string_view name,
                                        std::initializer_list<int64_t> shape) const {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  if (t == nullptr) {
    return make_error(
        fmt::format("missing tensor '{}' (expected shape {})", name, shape_str(shape)));
  }
  // Trailing dims of 1 are equivalent in ggml ([576] == [576, 1]).
  std::vector<uint64_t> dims = t->dims;
  while (dims.size() > shape.size() && dims.back() == 1) dims.pop_back();
  bool match = dims.size() == shape.size();
  size_t i = 0;
  for (int64_t d : shape) {
    if (match && dims[i] != static_cast<uint64_t>(d)) match = false;
    ++i;
  }
  if (!match) {
    return make_error(fmt::format("tensor '{}' has shape {}, expected {}", name, dims_str(t->dims),
                                  shape_str(shape)));
  }
  if (quant::traits(t->type) == nullptr) {
    return make_error(fmt::format("tensor '{}' has type {}, which minfer cannot compute with", name,
                                  dtype_name(t->type)));
  }
  WeightRef w;
  w.name = std::string(name);
  w.dtype = t->type;
  w.shape = graph::Shape(shape);
  w.data = t->data;
  w.bytes = t->n_bytes;
  return w;
}

Result<WeightRef> weight_rows(const WeightRef& w, int64_t r0, int64_t n, std::string_view tag) {
  const int64_t rows = w.shape.ne[1];
  if (w.shape.ne[2] != 1 || w.shape.ne[3] != 1 || r0 < 0 || n <= 0 || r0 + n > rows) {
    return make_error(fmt::format("tensor '{}' {}: rows [{}, {}) are not inside it", w.name,
                                  w.shape.str(), r0, r0 + n));
  }
  MINFER_TRY(const uint64_t row, quant::row_bytes(w.dtype, static_cast<uint64_t>(w.shape.ne[0])));
  WeightRef out;
  out.name = fmt::format("{}#{}", w.name, tag);
  out.dtype = w.dtype;
  out.shape = graph::Shape({w.shape.ne[0], n});
  out.data = static_cast<const uint8_t*>(w.data) + row * static_cast<uint64_t>(r0);
  out.bytes = row * static_cast<uint64_t>(n);
  return out;
}

std::string blk(int il, std::string_view suffix) {
  return fmt::format("blk.{}.{}", il, suffix);
}

graph::NodeId weight_node(graph::GraphBuilder& b, const WeightRef& w) {
  return b.weight(w.name, w.dtype, w.shape);
}

}  // namespace minfer::model
