// Stage 12 (kernels): rotary position embedding, normal (adjacent pairs, llama) and
// neox (halves, qwen2) layouts, with ggml's angle recurrence: θ_0 = pos, θ_{i+1} =
// θ_i · base^(−2/n_rot) in float, angle = freq_scale · θ_i (no YaRN: ext_factor 0).
// Invariant: one (token, head) row per work item; dims past n_rot are copied.
#include <cmath>
#include <cstring>

#include "backend/cpu/ops.h"

namespace minfer::backend::cpu {

Status op_rope(const OpCtx& c, graph::NodeId id) {
  const graph::Node& n = c.graph.node(id);
  const float* x = c.data.as<const float>(n.src[0]);
  const int32_t* pos = c.data.as<const int32_t>(n.src[1]);
  float* out = c.data.as<float>(id);
  const int64_t hd = n.shape.ne[0];
  const int64_t n_head = n.shape.ne[1];
  const int64_t n_tok = n.shape.ne[2];
  const int32_t n_rot = n.params.n_rot;
  const bool neox = n.params.rope_mode == graph::RopeMode::kNeox;
  const float theta_scale = std::pow(n.params.freq_base, -2.0f / static_cast<float>(n_rot));
  const float freq_scale = n.params.freq_scale;
  auto body = [&](int64_t lo, int64_t hi, int32_t /*thread*/) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t t = r / n_head;
      const float* xr = x + r * hd;
      float* o = out + r * hd;
      float theta = static_cast<float>(pos[t]);
      for (int32_t i0 = 0; i0 < n_rot; i0 += 2) {
        const float angle = freq_scale * theta;
        const float cs = std::cos(angle);
        const float sn = std::sin(angle);
        theta *= theta_scale;
        const int64_t a = neox ? i0 / 2 : i0;
        const int64_t b = neox ? i0 / 2 + n_rot / 2 : i0 + 1;
        const float x0 = xr[a];
        const float x1 = xr[b];
        // One rounding per line as ggml's compiled rotate_pairs does (its x0*cos - x1*sin
        // is contracted to fma(x0, cos, -(x1*sin))): bit-identical to llama.cpp's CPU rope.
        o[a] = std::fma(x0, cs, -(x1 * sn));
        o[b] = std::fma(x0, sn, x1 * cs);
      }
      if (n_rot < hd && o != xr) {
        std::memcpy(o + n_rot, xr + n_rot, static_cast<size_t>(hd - n_rot) * sizeof(float));
      }
    }
  };
  parallel_range(c.pool, n_tok * n_head, 64, body);
  return Ok{};
}

}  // namespace minfer::backend::cpu
