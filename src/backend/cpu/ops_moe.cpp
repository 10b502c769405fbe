// Stage 12 (kernels): mixture-of-experts routing — top_k, moe_weights, moe_sum — after
// llama.cpp's build_moe_ffn on ggml-cpu (src/llama-graph.cpp; ggml-cpu/ops.cpp argsort,
// sum_rows; binary-ops div / mul / add). Rows split over threads, each row one thread's.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/pool.h"

namespace minfer::backend::cpu {

void top_k_row(int64_t n, const float* x, int64_t k, int32_t* idx, int32_t* out) {
  std::iota(idx, idx + n, 0);
  // ggml_argsort (GGML_SORT_ORDER_DESC) sorts every index with std::sort and this
  // comparator; ggml_argsort_top_k views the first k. Same algorithm, same ties.
  std::sort(idx, idx + n, [x](int32_t a, int32_t b) { return x[a] > x[b]; });
  std::copy(idx, idx + k, out);
}

void moe_weights_row(const float* p, const int32_t* ids, int64_t k, float* w) {
  double sum = 0.0;  // ggml_vec_sum_f32: a double accumulator
  for (int64_t s = 0; s < k; ++s) sum += static_cast<double>(p[ids[s]]);
  // ggml_clamp(sum, 6.103515625e-5, INFINITY): the smallest normal f16, against a zero sum.
  const float den = std::max(static_cast<float>(sum), 6.103515625e-5f);
  for (int64_t s = 0; s < k; ++s) w[s] = p[ids[s]] / den;
}

void moe_sum_row(int64_t n, const float* e, const float* w, int64_t k, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = e[i] * w[0];
  for (int64_t s = 1; s < k; ++s) {
    const float* es = e + s * n;
    const float ws = w[s];
    for (int64_t i = 0; i < n; ++i) {
      const float prod = es[i] * ws;  // rounded, as ggml_mul stores it
      y[i] = y[i] + prod;
    }
  }
}

Status op_moe(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const graph::Node& s0 = c.graph.node(n.src[0]);
  switch (n.op) {
    case graph::Op::kTopK: {
      const int64_t ne0 = s0.shape.ne[0], k = n.shape.ne[0], rows = n.shape.ne[1];
      const float* x = c.data.as<const float>(n.src[0]);
      auto* out = c.data.as<int32_t>(id);
      auto* idx = reinterpret_cast<int32_t*>(
          c.scratch.get(static_cast<size_t>(rows * ne0) * sizeof(int32_t)));
      parallel_range(c.pool, rows, 1, [&](int64_t lo, int64_t hi, int32_t) {
        for (int64_t r = lo; r < hi; ++r)
          top_k_row(ne0, x + r * ne0, k, idx + r * ne0, out + r * k);
      });
      return Ok{};
    }
    case graph::Op::kMoeWeights: {
      const int64_t ne0 = s0.shape.ne[0], k = n.shape.ne[0], rows = n.shape.ne[1];
      const float* p = c.data.as<const float>(n.src[0]);
      const auto* ids = c.data.as<const int32_t>(n.src[1]);
      for (int64_t i = 0; i < k * rows; ++i) {
        if (ids[i] < 0 || ids[i] >= ne0) {
          return make_error(
              fmt::format("moe_weights '{}': expert id {} outside [0, {})", n.name, ids[i], ne0));
        }
      }
      float* w = c.data.as<float>(id);
      for (int64_t r = 0; r < rows; ++r) moe_weights_row(p + r * ne0, ids + r * k, k, w + r * k);
      return Ok{};
    }
    case graph::Op::kMoeSum: {
      const int64_t ne0 = s0.shape.ne[0], k = s0.shape.ne[1], rows = s0.shape.ne[2];
      const float* e = c.data.as<const float>(n.src[0]);
      const float* w = c.data.as<const float>(n.src[1]);
      float* y = c.data.as<float>(id);
      parallel_range(c.pool, rows, 4, [&](int64_t lo, int64_t hi, int32_t) {
        for (int64_t r = lo; r < hi; ++r) {
          moe_sum_row(ne0, e + r * k * ne0, w + r * k, k, y + r * ne0);
        }
      });
      return Ok{};
    }
    default:
      return make_error(fmt::format("op_moe: node '{}' is {}", n.name, graph::op_name(n.op)));
  }
}

}  // namespace minfer::backend::cpu
