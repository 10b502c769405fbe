// Stage 12 (kernels): row movement — get_rows (any table dtype, dequantized with the
// quant stage's bit-exact scalar kernels) and kv_store into a persistent region.
// Invariants: ids and cells are validated before anything is written (loud bounds:
// an out-of-range id or cell is an Error naming the node, never a clamp).
#include <fmt/format.h>

#include <cstring>

#include "backend/cpu/ops.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

using graph::Node;
using graph::NodeId;

}  // namespace

Status op_get_rows(const OpCtx& c, NodeId id) {
  const Node& n = c.graph.node(id);
  const Node& table = c.graph.node(n.src[0]);
  const Node& ids_node = c.graph.node(n.src[1]);
  const int32_t* ids = c.data.as<const int32_t>(n.src[1]);
  const int64_t n_ids = ids_node.shape.n_elements();
  const int64_t n_rows = table.shape.ne[1];
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= n_rows) {
      return make_error(fmt::format("get_rows '{}': id {} at row {} is outside [0, {}) of '{}'",
                                    n.name, ids[i], i, n_rows, table.name));
    }
  }
  const quant::TypeTraits* tt = quant::traits(table.dtype);
  const int64_t ne0 = table.shape.ne[0];
  const uint64_t row_bytes = graph::tensor_bytes(table.dtype, graph::Shape{ne0});
  const std::byte* src = c.data[n.src[0]];
  float* out = c.data.as<float>(id);
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t i = lo; i < hi; ++i) {
      tt->dequantize(src + static_cast<uint64_t>(ids[i]) * row_bytes, out + i * ne0, ne0);
    }
  };
  parallel_range(c.pool, n_ids, 4, body);
  return Ok{};
}

Status op_kv_store(const OpCtx& c, NodeId id) {
  const Node& n = c.graph.node(id);
  const Node& region = c.graph.node(n.src[0]);
  const Node& cells_node = c.graph.node(n.src[2]);
  const int32_t* cells = c.data.as<const int32_t>(n.src[2]);
  const int64_t n_cells = region.shape.ne[1];
  const int64_t n_tok = cells_node.shape.n_elements();
  // Cell -1 marks a padding row of a bucketed batch (engine decode): it stores nothing.
  for (int64_t t = 0; t < n_tok; ++t) {
    if (cells[t] < -1 || cells[t] >= n_cells) {
      return make_error(
          fmt::format("kv_store '{}' (layer {}): cell {} of row {} is outside "
                      "[0, {}) of '{}'",
                      n.name, n.params.layer, cells[t], t, n_cells, region.name));
    }
  }
  const int64_t row = region.shape.ne[0];
  const float* src = c.data.as<const float>(n.src[1]);
  if (region.dtype == DType::kF16) {      // rounded to nearest-even, as ggml's f32 → f16 copy
    auto* dst = c.data.as<uint16_t>(id);  // aliases the region
    for (int64_t t = 0; t < n_tok; ++t) {
      if (cells[t] < 0) continue;
      from_f32_f16(src + t * row, dst + static_cast<int64_t>(cells[t]) * row, row);
    }
    return Ok{};
  }
  if (region.dtype != DType::kF32) {
    // A quantized cache, each row as llama.cpp's CPU stores it (set_rows with the type's
    // from_float): q8_0 by its x86 quantize_row_q8_0 (from_f32_q8_0: d = amax/127 as f16,
    // q = round-half-even(x · 127/amax)), q4_0 by the reference quantizer.
    const quant::TypeTraits* tt = quant::traits(region.dtype);
    if (tt == nullptr || tt->quantize_ref == nullptr) {
      return make_error(
          fmt::format("kv_store '{}': no quantizer for {}", n.name, dtype_name(region.dtype)));
    }
    const auto quantize = region.dtype == DType::kQ8_0 ? from_f32_q8_0 : tt->quantize_ref;
    const uint64_t row_bytes = static_cast<uint64_t>(row) / tt->block_size * tt->type_size;
    auto* dst = c.data.as<uint8_t>(id);  // aliases the region
    for (int64_t t = 0; t < n_tok; ++t) {
      if (cells[t] < 0) continue;
      quantize(src + t * row, dst + static_cast<uint64_t>(cells[t]) * row_bytes, row);
    }
    return Ok{};
  }
  float* dst = c.data.as<float>(id);  // aliases the region
  for (int64_t t = 0; t < n_tok; ++t) {
    if (cells[t] < 0) continue;
    std::memcpy(dst + static_cast<int64_t>(cells[t]) * row, src + t * row,
                static_cast<size_t>(row) * sizeof(float));
  }
  return Ok{};
}

}  // namespace minfer::backend::cpu
