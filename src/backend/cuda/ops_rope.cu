// Stage 12 (CUDA kernels): rotary position embedding, normal (adjacent pairs) and NeoX
// (halves) layouts, with the CPU's angle recurrence: θ_0 = pos, θ_{i+1} = θ_i · base^(−2/n_rot)
// in float (the factor computed on the host with std::pow, as the CPU), angle =
// freq_scale · θ_i, and the rotation as fma(x0, cos, −(x1·sin)). One thread per (token,
// head) row walks the pairs in order, so θ rounds as the CPU's; CUDA's cosf / sinf may
// differ from glibc's in the last ulp (tests state an NMSE bound).
#include <cmath>

#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

__global__ void rope_kernel(const float* x, const int32_t* pos, float* out, int64_t hd,
                            int64_t n_head, int64_t n_rows, int32_t n_rot, bool neox,
                            float theta_scale, float freq_scale) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= n_rows) return;
  const int64_t t = r / n_head;
  const float* xr = x + r * hd;
  float* o = out + r * hd;
  float theta = static_cast<float>(pos[t]);
  for (int32_t i0 = 0; i0 < n_rot; i0 += 2) {
    const float angle = freq_scale * theta;
    const float cs = cosf(angle);
    const float sn = sinf(angle);
    theta *= theta_scale;
    const int64_t a = neox ? i0 / 2 : i0;
    const int64_t b = neox ? i0 / 2 + n_rot / 2 : i0 + 1;
    const float x0 = xr[a];
    const float x1 = xr[b];
    o[a] = fmaf(x0, cs, -(x1 * sn));
    o[b] = fmaf(x0, sn, x1 * cs);
  }
  if (o != xr) {
    for (int64_t i = n_rot; i < hd; ++i) o[i] = xr[i];
  }
}

}  // namespace

int launch_rope(const NodeLaunch& l) {
  const TensorRef& x = l.src[0];
  const int64_t hd = x.ne[0], n_head = x.ne[1];
  const int64_t n_rows = n_head * x.ne[2];
  if (n_rows == 0) return 0;
  const int32_t n_rot = l.params.n_rot;
  const float theta_scale = std::pow(l.params.freq_base, -2.0f / static_cast<float>(n_rot));
  constexpr int kThreads = 128;
  rope_kernel<<<grid_for(n_rows, kThreads), kThreads, 0, stream_of(l)>>>(
      static_cast<const float*>(x.data), static_cast<const int32_t*>(l.src[1].data),
      static_cast<float*>(const_cast<void*>(l.dst.data)), hd, n_head, n_rows, n_rot,
      l.params.rope_mode == graph::RopeMode::kNeox, theta_scale, l.params.freq_scale);
  return launched();
}

}  // namespace minfer::backend::cuda
