// Stage 12 (kernels): elementwise ops — add, mul (with ggml broadcasting of b), scale,
// silu, swiglu, cont. Scalar only: memory bound, and one rounding per element, so any
// vectorisation the compiler does is bitwise identical. silu follows ggml's CPU kernel
// bit for bit (polynomial e^x on 16-lane row bodies), so llama.cpp's results reproduce.
#include <cmath>
#include <cstring>

#include "backend/cpu/ops.h"

namespace minfer::backend::cpu {
namespace {

using graph::Node;
using graph::NodeId;
using graph::Op;

// e^x as ggml's vectorised expf (the Arm optimized-routines polynomial, max error ~1.5
// ulp), written with scalar fma / ldexp so every ISA gives its bits: llama.cpp's CPU
// silu / swiglu use it on every full 16-lane group of a row, glibc expf on the tail.
inline float expf_poly(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;  // round(x / ln 2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::isnan(n)) return n;
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));
}

// silu(x) = x / (1 + e^−x); element i0 of a row of ne0 takes the polynomial e^x when
// it lies in the row's 16-aligned body, glibc's expf in the tail (as ggml does).
inline float silu_at(float x, int64_t i0, int64_t body) {
  const float e = i0 < body ? expf_poly(-x) : std::exp(-x);
  return x / (1.0f + e);
}

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
      const float* gate = c.data.as<const float>(n.src[0]);
      const float* up = n.op == Op::kSwiglu ? c.data.as<const float>(n.src[1]) : nullptr;
      float* o = c.data.as<float>(id);
      const int64_t ne = n.shape.n_elements();
      const int64_t ne0 = n.shape.ne[0];
      const int64_t row_body = ne0 & ~int64_t{15};
      auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
        for (int64_t i = lo; i < hi; ++i) {
          const float v = silu_at(gate[i], i % ne0, row_body);
          o[i] = up != nullptr ? v * up[i] : v;
        }
      };
      parallel_range(c.pool, ne, 16384, body);
      return Ok{};
    }
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
