// Stage 12 (CUDA kernels): elementwise ops — add, mul (b broadcast as ggml: over every
// dim where b's extent is 1), scale, silu, swiglu, tanh, geglu, gelu, and the byte copy of cont.
// One thread per output element; each element rounds once per operation as the CPU's
// (add, mul, scale bitwise; silu / swiglu / tanh use CUDA's expf / tanhf, within a few
// ulp of the CPU's polynomial and glibc forms — tests state an NMSE bound for them).
#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

constexpr int kThreads = 256;

struct Bcast {
  int64_t a0, a1, a2;  // a's ne[0..2]
  int64_t b0, b1, b2, b3;
};

template <int kOp>  // 0 add, 1 mul
__global__ void binary_kernel(const float* a, const float* b, float* o, int64_t n, Bcast s) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / s.a0, c = i % s.a0;
  const int64_t i1 = r % s.a1, i2 = (r / s.a1) % s.a2, i3 = r / (s.a1 * s.a2);
  const int64_t rb = (i1 % s.b1) + s.b1 * ((i2 % s.b2) + s.b2 * (i3 % s.b3));
  const float y = b[rb * s.b0 + (s.b0 == 1 ? 0 : c)];
  o[i] = kOp == 0 ? a[i] + y : a[i] * y;
}

template <int kOp>
int binary(const NodeLaunch& l) {
  const TensorRef& a = l.src[0];
  const TensorRef& b = l.src[1];
  const int64_t n = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3];
  const Bcast s{a.ne[0], a.ne[1], a.ne[2], b.ne[0], b.ne[1], b.ne[2], b.ne[3]};
  binary_kernel<kOp><<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(
      static_cast<const float*>(a.data), static_cast<const float*>(b.data),
      static_cast<float*>(const_cast<void*>(l.dst.data)), n, s);
  return launched();
}

// GELU as ggml's CPU table holds it (cpu/geglu.h): x rounded to f16, gelu_tanh of that
// half in f32 (each product rounded: the default numerics' uncontracted table), the
// result rounded to f16; x <= -10 gives 0 and x >= 10 gives x. CUDA's tanhf may differ
// from glibc's in the last ulp, which the f16 rounding almost always absorbs.
__device__ __forceinline__ float gelu_table(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float t = h2f(f2h(x));
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float g = 0.5f * t * (1.0f + tanhf(kSqrt2OverPi * t * (1.0f + kCoefA * t * t)));
  return h2f(f2h(g));
}

// 0 scale, 1 silu, 2 swiglu, 3 tanh, 4 geglu, 5 gelu
template <int kOp>
__global__ void unary_kernel(const float* x, const float* up, float* o, int64_t n, float s) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  if constexpr (kOp == 0) {
    o[i] = v * s;
  } else if constexpr (kOp == 1) {
    o[i] = v / (1.0f + expf(-v));
  } else if constexpr (kOp == 2) {
    o[i] = (v / (1.0f + expf(-v))) * up[i];
  } else if constexpr (kOp == 3) {
    o[i] = tanhf(v);
  } else if constexpr (kOp == 4) {
    o[i] = v <= -10.0f ? 0.0f : gelu_table(v) * up[i];  // the CPU writes +0 there
  } else {
    o[i] = gelu_table(v);
  }
}

template <int kOp>
int unary(const NodeLaunch& l) {
  const TensorRef& x = l.src[0];
  const int64_t n = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3];
  const float* up = kOp == 2 || kOp == 4 ? static_cast<const float*>(l.src[1].data) : nullptr;
  unary_kernel<kOp><<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(
      static_cast<const float*>(x.data), up, static_cast<float*>(const_cast<void*>(l.dst.data)), n,
      l.params.scale);
  return launched();
}

}  // namespace

int launch_add(const NodeLaunch& l) {
  return binary<0>(l);
}
int launch_mul(const NodeLaunch& l) {
  return binary<1>(l);
}
int launch_scale(const NodeLaunch& l) {
  return unary<0>(l);
}
int launch_silu(const NodeLaunch& l) {
  return unary<1>(l);
}
int launch_swiglu(const NodeLaunch& l) {
  return unary<2>(l);
}
int launch_tanh(const NodeLaunch& l) {
  return unary<3>(l);
}
int launch_geglu(const NodeLaunch& l) {
  return unary<4>(l);
}
int launch_gelu(const NodeLaunch& l) {
  return unary<5>(l);
}
int launch_cont(const NodeLaunch& l) {
  if (l.dst.data == l.src[0].data || l.dst_bytes == 0) return 0;
  return static_cast<int>(cudaMemcpyAsync(const_cast<void*>(l.dst.data), l.src[0].data, l.dst_bytes,
                                          cudaMemcpyDeviceToDevice, stream_of(l)));
}

}  // namespace minfer::backend::cuda
