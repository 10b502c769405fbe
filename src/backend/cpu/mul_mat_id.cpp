// Stage 12 (kernels): mul_mat_id — the expert matmul of a mixture of experts (ggml's
// MUL_MAT_ID): each (slot, token) row is multiplied by the matrix of the expert its id
// names, so only the chosen experts' weights are read.
// The kernel groups the rows by expert (ids sorted stably, activation rows quantized
// into that order), then runs each active expert's matrix once over all of its rows
// with the weight type's register-blocked GEMM (the mul_mat kernels): a decode step
// reads k expert matrices once, a prefill reads each chosen expert once per tile.
// Invariant: every element is vec_dot(w row, quantized x row) in the GEMV order (the
// GEMM entries are bitwise their GEMV; ggml-cpu's MUL_MAT_ID is vec_dot per element,
// without the sgemm / tiled / repack batch orders of MUL_MAT), so results do not
// depend on the thread count, the batch, or which rows share an expert.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm_groups.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

constexpr int64_t kTileRows = 64;          // weight rows per work item
constexpr int64_t kQuantRowsPerChunk = 8;  // activation rows quantized per chunk

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

uint64_t w_row_bytes(const MulMatIdArgs& a) {
  return graph::tensor_bytes(a.w_type, graph::Shape{a.k_dim});
}

}  // namespace

void mul_mat_id_reference(const DotKernel& dk, const MulMatIdArgs& a) {
  const uint64_t w_row = w_row_bytes(a);
  const uint64_t x_row = *quant::row_bytes(dk.vec_dot_type, static_cast<uint64_t>(a.k_dim));
  std::vector<uint8_t> xq(x_row);
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    for (int64_t s = 0; s < a.n_used; ++s) {
      const int32_t e = a.ids[t * a.n_used + s];
      dk.from_f32(a.x + (t * a.n_b + s % a.n_b) * a.k_dim, xq.data(), a.k_dim);
      const uint8_t* we = w + static_cast<uint64_t>(e) * static_cast<uint64_t>(a.n_out) * w_row;
      float* y = a.y + (t * a.n_used + s) * a.n_out;
      for (int64_t r = 0; r < a.n_out; ++r) y[r] = dk.vec_dot(a.k_dim, we + r * w_row, xq.data());
    }
  }
}

void mul_mat_id_grouped(const DotKernel& dk, const MulMatIdArgs& a, ThreadPool& pool,
                        Scratch& scratch) {
  const int64_t n_rows = a.n_used * a.n_tokens;  // (slot, token) rows, flat j = t·k + s
  const uint64_t w_row = w_row_bytes(a);
  const uint64_t x_row = *quant::row_bytes(dk.vec_dot_type, static_cast<uint64_t>(a.k_dim));
  // Scratch: start[e] (n_expert + 1), the sort's cursors (n_expert), the rows in expert
  // order, the active experts, then the activation rows quantized in that order.
  const size_t off_cursor = align64(sizeof(int64_t) * static_cast<size_t>(a.n_expert + 1));
  const size_t off_order = off_cursor + align64(sizeof(int64_t) * static_cast<size_t>(a.n_expert));
  const size_t off_active = off_order + align64(sizeof(int32_t) * static_cast<size_t>(n_rows));
  const size_t off_x = off_active + align64(sizeof(int32_t) * static_cast<size_t>(a.n_expert));
  uint8_t* base = scratch.get(off_x + x_row * static_cast<size_t>(n_rows));
  auto* start = reinterpret_cast<int64_t*>(base);
  auto* cursor = reinterpret_cast<int64_t*>(base + off_cursor);
  auto* order = reinterpret_cast<int32_t*>(base + off_order);
  auto* active = reinterpret_cast<int32_t*>(base + off_active);
  uint8_t* xg = base + off_x;

  // Counting sort by expert, stable in j: a group's rows keep token order.
  std::fill(start, start + a.n_expert + 1, 0);
  for (int64_t j = 0; j < n_rows; ++j) ++start[a.ids[j] + 1];
  int64_t n_active = 0;
  for (int64_t e = 0; e < a.n_expert; ++e) {
    if (start[e + 1] > 0) active[n_active++] = static_cast<int32_t>(e);
    start[e + 1] += start[e];
  }
  std::copy(start, start + a.n_expert, cursor);
  for (int64_t j = 0; j < n_rows; ++j) order[cursor[a.ids[j]]++] = static_cast<int32_t>(j);
  // Activation rows into expert order (a row's bytes never depend on where it goes).
  parallel_range(pool, n_rows, kQuantRowsPerChunk, [&](int64_t lo, int64_t hi, int32_t) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t j = order[p];
      const int64_t t = j / a.n_used, s = j % a.n_used;
      dk.from_f32(a.x + (t * a.n_b + s % a.n_b) * a.k_dim, xg + p * x_row, a.k_dim);
    }
  });

  // Work items: (active expert, tile of its weight rows); a chunk's consecutive tiles of
  // one expert go to the GEMM as one call.
  const int64_t n_tiles = (a.n_out + kTileRows - 1) / kTileRows;
  const auto* w = static_cast<const uint8_t*>(a.w);
  parallel_range(pool, n_active * n_tiles, 1, [&](int64_t lo, int64_t hi, int32_t) {
    for (int64_t item = lo; item < hi;) {
      const int64_t ia = item / n_tiles;
      const int64_t tile_hi = std::min(hi, (ia + 1) * n_tiles);  // this expert's tiles
      const int64_t r0 = (item % n_tiles) * kTileRows;
      const int64_t r1 = std::min(a.n_out, (tile_hi - ia * n_tiles) * kTileRows);
      item = tile_hi;
      const int32_t e = active[ia];
      const int64_t p0 = start[e], n_x = start[e + 1] - start[e];
      const uint8_t* we =
          w + (static_cast<uint64_t>(e) * static_cast<uint64_t>(a.n_out) + r0) * w_row;
      const uint8_t* xe = xg + p0 * x_row;
      if (dk.gemm == nullptr) {
        for (int64_t q = 0; q < n_x; ++q) {
          float* y = a.y + order[p0 + q] * a.n_out;
          for (int64_t r = r0; r < r1; ++r) {
            y[r] = dk.vec_dot(a.k_dim, we + (r - r0) * w_row, xe + q * x_row);
          }
        }
        continue;
      }
      if (n_x == 1) {  // decode: the GEMV writes the row in place
        dk.gemm(GemmArgs{.k = a.k_dim,
                         .w = we,
                         .w_stride = w_row,
                         .n_w = r1 - r0,
                         .x = xe,
                         .x_stride = x_row,
                         .n_x = 1,
                         .y = a.y + order[p0] * a.n_out + r0,
                         .y_stride = a.n_out});
        continue;
      }
      // A group: its rows' results land in a per-thread tile, then go to their places.
      const int64_t nr = r1 - r0;
      float* tmp = thread_scratch<float, 7>(static_cast<size_t>(n_x * nr));
      dk.gemm(GemmArgs{.k = a.k_dim,
                       .w = we,
                       .w_stride = w_row,
                       .n_w = nr,
                       .x = xe,
                       .x_stride = x_row,
                       .n_x = n_x,
                       .y = tmp,
                       .y_stride = nr});
      for (int64_t q = 0; q < n_x; ++q) {
        std::memcpy(a.y + order[p0 + q] * a.n_out + r0, tmp + q * nr,
                    static_cast<size_t>(nr) * sizeof(float));
      }
    }
  });
}

Status op_mul_mat_id(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const graph::Node& wn = c.graph.node(n.src[0]);
  const graph::Node& xn = c.graph.node(n.src[1]);
  const graph::Node& in = c.graph.node(n.src[2]);
  const DotKernel dk = c.k.dot_kernel(wn.dtype);
  if (dk.vec_dot == nullptr) {
    return make_error(
        fmt::format("mul_mat_id '{}': no kernel for weight type {}", n.name, dtype_name(wn.dtype)));
  }
  const MulMatIdArgs a{.w_type = wn.dtype,
                       .k_dim = wn.shape.ne[0],
                       .n_out = wn.shape.ne[1],
                       .n_expert = wn.shape.ne[2],
                       .n_used = in.shape.ne[0],
                       .n_b = xn.shape.ne[1],
                       .n_tokens = in.shape.ne[1],
                       .w = c.data[n.src[0]],
                       .x = c.data.as<const float>(n.src[1]),
                       .ids = c.data.as<const int32_t>(n.src[2]),
                       .y = c.data.as<float>(id)};
  for (int64_t j = 0; j < a.n_used * a.n_tokens; ++j) {
    if (a.ids[j] < 0 || a.ids[j] >= a.n_expert) {
      return make_error(fmt::format("mul_mat_id '{}': expert id {} outside [0, {})", n.name,
                                    a.ids[j], a.n_expert));
    }
  }
  mul_mat_id_grouped(dk, a, c.pool, c.scratch);
  return Ok{};
}

}  // namespace minfer::backend::cpu
