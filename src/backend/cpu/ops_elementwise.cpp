// Stage 12 (kernels): elementwise ops — add, mul (with ggml broadcasting of b), scale,
// silu, swiglu, geglu, tanh, cont. Scalar only (geglu: its table kernel, geglu.h): memory bound,
// and one rounding per element, so any vectorisation the compiler does is bitwise identical. silu
// follows ggml's CPU kernel bit for bit (polynomial e^x on 16-lane row bodies), so llama.cpp's
// results reproduce.
#include <cmath>
#include <cstring>

#include "backend/cpu/geglu.h"
#include "backend/cpu/ops.h"
#include "core/fp16.h"

namespace minfer::backend::cpu {
namespace {

using graph::Node;
using graph::NodeId;
using graph::Op;

template <typename F>
void binary_rows(const OpCtx& c, NodeId id, F f) {
  const Node& n = c.graph.node(id);
  const Node& a = c.graph.node(n.src[0]);
  const Node& b = c.graph.node(n.src[1]);
  const float* pa = c.data.as<const float>(n.src[0]);
  const float* pb = c.data.as<const float>(n.src[1]);
  float* out = c.data.as<float>(id);
  const auto& ea = a.shape.ne;
  const auto& eb = b.shape.ne;
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t i1 = r % ea[1], i2 = (r / ea[1]) % ea[2], i3 = r / (ea[1] * ea[2]);
      const int64_t rb = (i1 % eb[1]) + eb[1] * ((i2 % eb[2]) + eb[2] * (i3 % eb[3]));
      const float* x = pa + r * ea[0];
      const float* y = pb + rb * eb[0];
      float* o = out + r * ea[0];
      if (eb[0] == 1) {
        for (int64_t i = 0; i < ea[0]; ++i) o[i] = f(x[i], y[0]);
      } else {
        for (int64_t i = 0; i < ea[0]; ++i) o[i] = f(x[i], y[i]);
      }
    }
  };
  parallel_range(c.pool, a.shape.n_rows(), std::max<int64_t>(1, 16384 / ea[0]), body);
}

template <typename F>
void unary(const OpCtx& c, NodeId id, F f) {
  const Node& n = c.graph.node(id);
  const float* x = c.data.as<const float>(n.src[0]);
  float* o = c.data.as<float>(id);
  const int64_t ne = n.shape.n_elements();
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t i = lo; i < hi; ++i) o[i] = f(x[i]);
  };
  parallel_range(c.pool, ne, 16384, body);
}

}  // namespace

Status op_elementwise(const OpCtx& c, NodeId id) {
  const Node& n = c.graph.node(id);
  switch (n.op) {
    case Op::kAdd:
      binary_rows(c, id, [](float x, float y) { return x + y; });
      return Ok{};
    case Op::kMul:
      binary_rows(c, id, [](float x, float y) { return x * y; });
      return Ok{};
    case Op::kScale: {
      const float s = n.params.scale;
      unary(c, id, [s](float x) { return x * s; });
      return Ok{};
    }
    case Op::kSilu:
    case Op::kSwiglu: {
      // silu(x) = x / (1 + e^−x), per row as ggml: its polynomial e^x on the row's
      // body of whole vectors (c.k.silu_poly over a multiple of c.k.silu_lanes, scalar and
      // SIMD bit-identical), glibc's expf on the tail.
      const float* gate = c.data.as<const float>(n.src[0]);
      const float* up = n.op == Op::kSwiglu ? c.data.as<const float>(n.src[1]) : nullptr;
      float* o = c.data.as<float>(id);
      const int64_t ne0 = n.shape.ne[0];
      const int64_t rows = n.shape.n_rows();
      const int64_t body = ne0 - ne0 % c.k.silu_lanes;
      const auto silu_poly = c.k.silu_poly;
      auto rows_body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t at = r * ne0;
          silu_poly(body, gate + at, up != nullptr ? up + at : nullptr, o + at);
          for (int64_t i = at + body; i < at + ne0; ++i) {
            const float v = gate[i] / (1.0f + std::exp(-gate[i]));
            o[i] = up != nullptr ? v * up[i] : v;
          }
        }
      };
      parallel_range(c.pool, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(ne0, 1)),
                     rows_body);
      return Ok{};
    }
    case Op::kGeglu: {
      // gelu(gate) · up through ggml's f16 table (geglu.h; params.ggml_f16: the table of
      // llama.cpp's native FMA build), per row so a row's result is the same alone or in
      // a batch.
      const float* gate = c.data.as<const float>(n.src[0]);
      const float* up = c.data.as<const float>(n.src[1]);
      float* o = c.data.as<float>(id);
      const int64_t ne0 = n.shape.ne[0];
      const auto geglu = c.k.geglu;
      const float* table = gelu_f16_table(n.params.ggml_f16 != 0);
      auto rows_body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
        for (int64_t r = lo; r < hi; ++r) {
          geglu(ne0, gate + r * ne0, up + r * ne0, o + r * ne0, table);
        }
      };
      parallel_range(c.pool, n.shape.n_rows(),
                     std::max<int64_t>(1, 16384 / std::max<int64_t>(ne0, 1)), rows_body);
      return Ok{};
    }
    case Op::kGelu: {
      // ggml_vec_gelu_f32: the geglu table kernel without the up factor (same clamps at ±10).
      const float* x = c.data.as<const float>(n.src[0]);
      float* o = c.data.as<float>(id);
      const auto geglu = c.k.geglu;
      const float* table = gelu_f16_table(n.params.ggml_f16 != 0);
      parallel_range(c.pool, n.shape.n_elements(), 16384,
                     [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
                       geglu(hi - lo, x + lo, nullptr, o + lo, table);
                     });
      return Ok{};
    }
    case Op::kTanh:
      unary(c, id, [](float x) { return std::tanh(x); });  // tanhf, as ggml_vec_tanh_f32
      return Ok{};
    case Op::kCont: {
      const uint64_t bytes = graph::tensor_bytes(n.dtype, n.shape);
      const std::byte* src = c.data[n.src[0]];
      std::byte* dst = c.data[id];
      if (src != dst) std::memmove(dst, src, bytes);
      return Ok{};
    }
    default:
      return make_error("op_elementwise: unexpected op");
  }
}

}  // namespace minfer::backend::cpu
