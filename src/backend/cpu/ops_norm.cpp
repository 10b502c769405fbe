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

// _mm512_reduce_add_ps of 16 lanes as GCC defines it: 8 pairs (i, i + 8), 4 pairs, then
// (0 + 2) + (1 + 3). Float addition is commutative, so the operand order is free.
float reduce_add16(const float* v) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// The 8-lane horizontal sum of llama.cpp's AVX2 ggml_vec_cvar_f32: the two halves added,
// then (0 + 2) + (1 + 3).
float reduce_add8(const float* v) {
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = v[i + 4] + v[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

// ggml_norm as llama.cpp computes it (ops.cpp norm_f32 + vec.cpp ggml_vec_cvar_f32): the
// sum in double rounded to f32, the mean divided in f32; the squares of x − mean reduced
// `lanes` at a time in f32 (16 on its AVX-512 build: _mm512_reduce_add_ps; 8 on its AVX2
// build) into a double, the tail one by one; the variance (double sum / n) rounded to f32.
void norm_ggml(int64_t n, const float* x, float* o, float eps, int lanes) {
  double dsum = 0.0;
  for (int64_t i = 0; i < n; ++i) dsum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(dsum) / static_cast<float>(n);
  double sum2 = 0.0;
  int64_t i = 0;
  float sq[16];
  for (; i + lanes <= n; i += lanes) {
    for (int l = 0; l < lanes; ++l) {
      o[i + l] = x[i + l] - mean;
      sq[l] = o[i + l] * o[i + l];
    }
    sum2 += static_cast<double>(lanes == 16 ? reduce_add16(sq) : reduce_add8(sq));
  }
  for (; i < n; ++i) {
    o[i] = x[i] - mean;
    sum2 += static_cast<double>(o[i] * o[i]);
  }
  const auto variance = static_cast<float>(sum2 / static_cast<double>(n));
  const float s = 1.0f / std::sqrt(variance + eps);
  for (int64_t k = 0; k < n; ++k) o[k] *= s;
}

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
  // Norms take their rows' sums 8 rows at a time from the ISA's kernel (the same
  // sequential chains, side by side); softmax and llama.cpp's norm go row by row.
  const bool grouped = op != Op::kSoftmax && !(op == Op::kNorm && n.params.ggml_f16 != 0);
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t g = lo; g < hi; g += 8) {
      const int nr = static_cast<int>(std::min<int64_t>(8, hi - g));
      double sums[8];
      float means[8];
      if (grouped) {
        const float* px[8];
        for (int j = 0; j < nr; ++j) px[j] = x + (g + j) * ne0;
        if (op == Op::kNorm) {
          c.k.row_sums_f64(px, nr, ne0, RowSum::kSum, nullptr, sums);
          for (int j = 0; j < nr; ++j) {
            means[j] = static_cast<float>(sums[j] / static_cast<double>(ne0));
          }
          c.k.row_sums_f64(px, nr, ne0, RowSum::kCentredSquares, means, sums);
        } else {
          c.k.row_sums_f64(px, nr, ne0, RowSum::kSquares, nullptr, sums);
        }
      }
      for (int j = 0; j < nr; ++j) {
        const int64_t r = g + j;
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
        if (op == Op::kNorm && n.params.ggml_f16 != 0) {
          norm_ggml(ne0, xr, o, eps, c.k.ggml_norm_lanes8 ? 8 : 16);
          continue;
        }
        if (op == Op::kNorm) {
          // ggml_norm: the mean in double, x − mean rounded to f32, its squares summed in
          // double, then one scale per row: (x − mean) rounded, then times s.
          const float mean = means[j];
          const float variance = static_cast<float>(sums[j] / static_cast<double>(ne0));
          const float s = 1.0f / std::sqrt(variance + eps);
          for (int64_t i = 0; i < ne0; ++i) o[i] = (xr[i] - mean) * s;
          continue;
        }
        const float mean = static_cast<float>(sums[j] / static_cast<double>(ne0));
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
    }
  };
  parallel_range(c.pool, rows, std::max<int64_t>(1, 16384 / ne0), body);
  return Ok{};
}

}  // namespace minfer::backend::cpu
