// Stage 12 (kernels): row reductions — rms_norm, fused rms_norm_mul, layer norm, softmax.
// Invariant: each row reduces sequentially in double (ggml_float, as ggml-cpu's
// rms_norm_f32 / soft_max_f32), one thread per row, so a row's result is the same
// whatever the thread count or the number of rows in the batch.
#include <cmath>

#include "backend/cpu/ops.h"

namespace minfer::backend::cpu {
namespace {

using graph::Node;
using graph::NodeId;
using graph::Op;

}  // namespace

Status op_norm(const OpCtx& c, NodeId id) {
  const Node& n = c.graph.node(id);
  const float* x = c.data.as<const float>(n.src[0]);
  float* out = c.data.as<float>(id);
  const int64_t ne0 = n.shape.ne[0];
  const int64_t rows = n.shape.n_rows();
  const Op op = n.op;
  const float eps = n.params.eps;
  const float scale = n.params.scale;
  const Node* wn = op == Op::kRmsNormMul ? &c.graph.node(n.src[1]) : nullptr;
  const float* w = wn ? c.data.as<const float>(n.src[1]) : nullptr;
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * ne0;
      float* o = out + r * ne0;
      if (op == Op::kSoftmax) {
        float maxv = -INFINITY;
        for (int64_t i = 0; i < ne0; ++i) maxv = std::fmax(maxv, xr[i] * scale);
        double sum = 0.0;
        for (int64_t i = 0; i < ne0; ++i) {
          const float e = std::exp(xr[i] * scale - maxv);
          o[i] = e;
          sum += static_cast<double>(e);
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t i = 0; i < ne0; ++i) o[i] *= inv;
        continue;
      }
      if (op == Op::kNorm) {
        // ggml_norm: the mean in double, x − mean rounded to f32, its squares summed in
        // double, then one scale per row.
        double sum = 0.0;
        for (int64_t i = 0; i < ne0; ++i) sum += static_cast<double>(xr[i]);
        const float mean = static_cast<float>(sum / static_cast<double>(ne0));
        double sum2 = 0.0;
        for (int64_t i = 0; i < ne0; ++i) {
          const float v = xr[i] - mean;
          o[i] = v;
          sum2 += static_cast<double>(v * v);
        }
        const float variance = static_cast<float>(sum2 / static_cast<double>(ne0));
        const float s = 1.0f / std::sqrt(variance + eps);
        for (int64_t i = 0; i < ne0; ++i) o[i] *= s;
        continue;
      }
      double sum = 0.0;
      for (int64_t i = 0; i < ne0; ++i) sum += static_cast<double>(xr[i] * xr[i]);
      const float mean = static_cast<float>(sum / static_cast<double>(ne0));
      const float s = 1.0f / std::sqrt(mean + eps);
      if (w == nullptr) {
        for (int64_t i = 0; i < ne0; ++i) o[i] = xr[i] * s;
      } else {
        // rms_norm then mul, rounded separately as the unfused pair would be; w
        // broadcasts over rows like kMul's b.
        const auto& eb = wn->shape.ne;
        const auto& ea = n.shape.ne;
        const int64_t i1 = r % ea[1], i2 = (r / ea[1]) % ea[2], i3 = r / (ea[1] * ea[2]);
        const int64_t rb = (i1 % eb[1]) + eb[1] * ((i2 % eb[2]) + eb[2] * (i3 % eb[3]));
        const float* wr = w + rb * eb[0];
        for (int64_t i = 0; i < ne0; ++i) o[i] = (xr[i] * s) * wr[eb[0] == 1 ? 0 : i];
      }
    }
  };
  parallel_range(c.pool, rows, std::max<int64_t>(1, 16384 / ne0), body);
  return Ok{};
}

}  // namespace minfer::backend::cpu
