// Stage 12 (kernels): attention over the cells of the kv_window input, GQA, with an
// online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
// softmax"; the flash-attention recurrence).
// Invariant (ARCHITECTURE §2.8): a (token, head) result depends only on its query row,
// its window row and the KV contents. Cells are walked in window order and cut into
// chunks at fixed multiples of kChunk in absolute cell index, so the max-rescaling
// points are the same for a token decoded alone or prefilled in a batch; one thread
// owns one (token, head) — threads never split its reduction.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace minfer::backend::cpu {
namespace {

// Scores per chunk; fixed (part of the numerics), not a tuning knob of the batch.
constexpr int32_t kChunk = 64;

}  // namespace

Status op_attention(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const graph::Node& qn = c.graph.node(n.src[0]);
  const graph::Node& kn = c.graph.node(n.src[1]);
  const graph::Node& vn = c.graph.node(n.src[2]);
  const graph::Node& wn = c.graph.node(n.src[3]);
  const int64_t hd = qn.shape.ne[0];
  const int64_t n_head = n.params.n_head;
  const int64_t n_head_kv = n.params.n_head_kv;
  const int64_t n_tok = qn.shape.ne[2];
  const int64_t hd_v = vn.shape.ne[0] / n_head_kv;
  const int64_t row_k = kn.shape.ne[0];
  const int64_t row_v = vn.shape.ne[0];
  const int64_t n_cells = kn.shape.ne[1];
  const int64_t n_runs = wn.shape.ne[0] / 2;
  const int32_t* win = c.data.as<const int32_t>(n.src[3]);
  for (int64_t t = 0; t < n_tok; ++t) {
    int64_t total = 0;
    for (int64_t r = 0; r < n_runs; ++r) {
      const int32_t first = win[t * 2 * n_runs + 2 * r];
      const int32_t cnt = win[t * 2 * n_runs + 2 * r + 1];
      if (first < 0 || cnt < 0 || int64_t{first} + cnt > n_cells) {
        return make_error(
            fmt::format("attention '{}' (layer {}): window run {} of query {} = "
                        "(first {}, n {}) is outside [0, {})",
                        n.name, n.params.layer, r, t, first, cnt, n_cells));
      }
      total += cnt;
    }
    if (total == 0) {
      return make_error(fmt::format("attention '{}' (layer {}): query {} sees no cell", n.name,
                                    n.params.layer, t));
    }
  }
  const float* q = c.data.as<const float>(n.src[0]);
  const float* kc = c.data.as<const float>(n.src[1]);
  const float* vc = c.data.as<const float>(n.src[2]);
  float* out = c.data.as<float>(id);
  const float scale = n.params.scale;
  const int64_t group = n_head / n_head_kv;
  const IsaKernels& k = c.k;
  // acc [hd_v] per thread, reserved before the threads start.
  float* acc_all = reinterpret_cast<float*>(
      c.scratch.get(static_cast<size_t>(c.pool.n_threads() * hd_v) * sizeof(float)));

  auto body = [&](int64_t lo, int64_t hi, int32_t thread) {
    float* acc = acc_all + thread * hd_v;
    float s[kChunk];
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t t = item / n_head;
      const int64_t h = item % n_head;
      const int64_t kvh = h / group;
      const float* qr = q + (t * n_head + h) * hd;
      std::fill(acc, acc + hd_v, 0.0f);
      float m = -INFINITY;
      float l = 0.0f;
      for (int64_t r = 0; r < n_runs; ++r) {
        const int64_t first = win[t * 2 * n_runs + 2 * r];
        const int64_t end = first + win[t * 2 * n_runs + 2 * r + 1];
        for (int64_t c0 = first; c0 < end;) {
          const int64_t c1 = std::min(end, (c0 / kChunk + 1) * kChunk);
          float mc = -INFINITY;
          for (int64_t cell = c0; cell < c1; ++cell) {
            const float v = k.dot_f32(hd, qr, kc + cell * row_k + kvh * hd) * scale;
            s[cell - c0] = v;
            mc = std::fmax(mc, v);
          }
          if (mc > m) {
            const float f = std::exp(m - mc);  // m = −inf on the first chunk: f = 0
            for (int64_t i = 0; i < hd_v; ++i) acc[i] *= f;
            l *= f;
            m = mc;
          }
          for (int64_t cell = c0; cell < c1; ++cell) {
            const float p = std::exp(s[cell - c0] - m);
            l += p;
            k.axpy_f32(hd_v, p, vc + cell * row_v + kvh * hd_v, acc);
          }
          c0 = c1;
        }
      }
      float* o = out + t * (n_head * hd_v) + h * hd_v;
      const float inv = 1.0f / l;
      for (int64_t i = 0; i < hd_v; ++i) o[i] = acc[i] * inv;
    }
  };
  parallel_range(c.pool, n_tok * n_head, 1, body);
  return Ok{};
}

}  // namespace minfer::backend::cpu
