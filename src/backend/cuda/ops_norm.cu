// Stage 12 (CUDA kernels): row reductions — rms_norm, fused rms_norm_mul, softmax.
// One block per row; each thread sums its strided elements in double (ggml_float, as
// the CPU), then a fixed shared-memory tree combines the threads: the order is fixed
// per row (never depends on the batch or on other rows), though not the CPU's
// sequential one, so the f32 mean can differ from the CPU's in its last bit.
#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

constexpr int kThreads = 256;

__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

__device__ float block_max(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s)
      sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

struct RowBcast {
  int64_t a1, a2;
  int64_t b0, b1, b2, b3;
};

__global__ void rms_norm_kernel(const float* x, const float* w, float* out, int64_t ne0, float eps,
                                RowBcast s) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * ne0;
  float* o = out + r * ne0;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < ne0; i += kThreads) sum += static_cast<double>(xr[i] * xr[i]);
  sum = block_sum(sum, sh);
  const float mean = static_cast<float>(sum / static_cast<double>(ne0));
  const float sc = 1.0f / sqrtf(mean + eps);
  if (w == nullptr) {
    for (int64_t i = threadIdx.x; i < ne0; i += kThreads) o[i] = xr[i] * sc;
    return;
  }
  const int64_t i1 = r % s.a1, i2 = (r / s.a1) % s.a2, i3 = r / (s.a1 * s.a2);
  const int64_t rb = (i1 % s.b1) + s.b1 * ((i2 % s.b2) + s.b2 * (i3 % s.b3));
  const float* wr = w + rb * s.b0;
  for (int64_t i = threadIdx.x; i < ne0; i += kThreads) o[i] = (xr[i] * sc) * wr[s.b0 == 1 ? 0 : i];
}

__global__ void softmax_kernel(const float* x, float* out, int64_t ne0, float scale) {
  __shared__ double sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * ne0;
  float* o = out + r * ne0;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < ne0; i += kThreads) m = fmaxf(m, xr[i] * scale);
  m = block_max(m, reinterpret_cast<float*>(sh));
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < ne0; i += kThreads) {
    const float e = expf(xr[i] * scale - m);
    o[i] = e;
    sum += static_cast<double>(e);
  }
  sum = block_sum(sum, sh);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = threadIdx.x; i < ne0; i += kThreads) o[i] *= inv;
}

int rms(const NodeLaunch& l, bool mul) {
  const TensorRef& x = l.src[0];
  const int64_t rows = x.ne[1] * x.ne[2] * x.ne[3];
  RowBcast s{x.ne[1], x.ne[2], 1, 1, 1, 1};
  const float* w = nullptr;
  if (mul) {
    const TensorRef& b = l.src[1];
    s = RowBcast{x.ne[1], x.ne[2], b.ne[0], b.ne[1], b.ne[2], b.ne[3]};
    w = static_cast<const float*>(b.data);
  }
  if (rows == 0) return 0;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream_of(l)>>>(
      static_cast<const float*>(x.data), w, static_cast<float*>(const_cast<void*>(l.dst.data)),
      x.ne[0], l.params.eps, s);
  return launched();
}

}  // namespace

int launch_rms_norm(const NodeLaunch& l) {
  return rms(l, false);
}
int launch_rms_norm_mul(const NodeLaunch& l) {
  return rms(l, true);
}
int launch_softmax(const NodeLaunch& l) {
  const TensorRef& x = l.src[0];
  const int64_t rows = x.ne[1] * x.ne[2] * x.ne[3];
  if (rows == 0) return 0;
  softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream_of(l)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(const_cast<void*>(l.dst.data)),
      x.ne[0], l.params.scale);
  return launched();
}

}  // namespace minfer::backend::cuda
