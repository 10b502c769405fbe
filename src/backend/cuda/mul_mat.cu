// Stage 12 (CUDA kernels): mul_mat — weights read in place in their GGUF type,
// activations converted per row on the device to the weight type's activation format
// (q8_0 / q8_1 with the CPU's x86 quantizer: d = amax/127 as f16, q = round-half-even(x ·
// 127/amax), so a row's bytes equal the CPU's; f16 rounded to nearest even), then one
// warp per output element (weight row n, activation row m): each lane takes every 32nd
// block, forms the block's integer dot exactly and its float term in the CPU's
// association, accumulates its blocks in order, and the lanes combine in a fixed
// butterfly (warp_sum). The GEMV of a decode row and each row of a prefill batch run
// the same arithmetic, so a row's result never depends on its batch; the order of the
// block sums differs from the CPU's sequential one (tests state an NMSE bound).
// Q4_K, Q5_K and Q6_K take Q8_K super-block activations (quant's quantize_q8_k: the first
// element of largest magnitude sets d, codes by ggml's nearest_int), one super-block per
// lane; BF16 weights take bf16 activations (core/fp16.h's rounding).
// Not yet: Q2_K, Q3_K, a tiled prefill GEMM.
#include "backend/cuda/cuda_plan.h"
#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;

struct BlockQ8_1 {  // ggml's block_q8_1 (cpu/vec_dot.h)
  uint16_t d, s;
  int8_t qs[32];
};

// One warp per 32-element block of an activation row (rows are k elements, k % 32 == 0,
// so blocks never straddle rows and the output rows are contiguous too).
template <bool kQ81>
__global__ void quantize_q8_kernel(const float* x, uint8_t* y, int64_t n_blocks) {
  const int64_t b = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (b >= n_blocks) return;  // whole warps: blockDim is a multiple of 32
  const float v = x[b * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int q = __float2int_rn(v * id);  // round half to even, as nearbyint
  if constexpr (kQ81) {
    auto* blk = reinterpret_cast<BlockQ8_1*>(y + b * 36);
    const int32_t sum = warp_sum_i32(q);
    blk->qs[lane] = static_cast<int8_t>(q);
    if (lane == 0) {
      blk->d = f2h(d);
      blk->s = f2h(d * static_cast<float>(sum));
    }
  } else {
    auto* blk = reinterpret_cast<BlockQ8_0*>(y + b * 34);
    blk->qs[lane] = static_cast<int8_t>(q);
    if (lane == 0) blk->d = f2h(d);
  }
}

// ggml's nearest_int (quant/kquant_fit.h): round half to even through the 1.5·2^23 shift.
__device__ __forceinline__ int nearest_int(float x) {
  const float shifted = x + 12582912.0f;
  return (__float_as_int(shifted) & 0x007fffff) - 0x00400000;
}

// One thread block of 256 per Q8_K super-block (quant's quantize_q8_k): the element of
// largest magnitude (the first one on a tie, as the CPU's strict > scan) sets the scale.
__global__ void quantize_q8_k_kernel(const float* x, uint8_t* y) {
  __shared__ float amax_sh[256];
  __shared__ int idx_sh[256];
  __shared__ int16_t q_sh[256];
  const int64_t b = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const float* xb = x + b * 256;
  auto* blk = reinterpret_cast<BlockQ8_K*>(y + b * sizeof(BlockQ8_K));
  amax_sh[t] = fabsf(xb[t]);
  idx_sh[t] = t;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) {
      const float a = amax_sh[t], c = amax_sh[t + s];
      if (c > a || (c == a && idx_sh[t + s] < idx_sh[t])) {
        amax_sh[t] = c;
        idx_sh[t] = idx_sh[t + s];
      }
    }
    __syncthreads();
  }
  const float amax = amax_sh[0];
  if (amax == 0.0f) {
    blk->qs[t] = 0;
    if (t < 16) blk->bsums[t] = 0;
    if (t == 0) blk->d = 0.0f;
    return;
  }
  const float iscale = -127.f / xb[idx_sh[0]];
  const int q = min(127, nearest_int(iscale * xb[t]));
  blk->qs[t] = static_cast<int8_t>(q);
  q_sh[t] = static_cast<int16_t>(q);
  __syncthreads();
  if (t < 16) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += q_sh[16 * t + i];
    blk->bsums[t] = static_cast<int16_t>(sum);
  }
  if (t == 0) blk->d = 1 / iscale;
}

// core/fp16.h fp32_to_bf16: round to nearest even, a NaN kept quiet.
__global__ void to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t u = __float_as_uint(x[i]);
  y[i] = (u & 0x7fffffffu) > 0x7f800000u
             ? static_cast<uint16_t>((u >> 16) | 64)
             : static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

__global__ void to_f16_kernel(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) y[i] = f2h(x[i]);
}

// The float term of block ib, as the CPU's scalar vec_dot writes it (vec_dot_scalar.cpp).
template <DType W>
__device__ __forceinline__ float block_dot(const uint8_t* w, const uint8_t* x, int64_t ib);

template <>
__device__ __forceinline__ float block_dot<DType::kQ4_0>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  const auto* a = reinterpret_cast<const BlockQ4_0*>(w) + ib;
  const auto* b = reinterpret_cast<const BlockQ8_0*>(x) + ib;
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j) {
    sumi += ((a->qs[j] & 0x0F) - 8) * b->qs[j] + ((a->qs[j] >> 4) - 8) * b->qs[j + 16];
  }
  return static_cast<float>(sumi) * h2f(a->d) * h2f(b->d);
}
template <>
__device__ __forceinline__ float block_dot<DType::kQ4_1>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  const auto* a = reinterpret_cast<const BlockQ4_1*>(w) + ib;
  const auto* b = reinterpret_cast<const BlockQ8_1*>(x) + ib;
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j)
    sumi += (a->qs[j] & 0x0F) * b->qs[j] + (a->qs[j] >> 4) * b->qs[j + 16];
  return (h2f(a->d) * h2f(b->d)) * static_cast<float>(sumi) + h2f(a->m) * h2f(b->s);
}
template <>
__device__ __forceinline__ float block_dot<DType::kQ5_0>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  const auto* a = reinterpret_cast<const BlockQ5_0*>(w) + ib;
  const auto* b = reinterpret_cast<const BlockQ8_0*>(x) + ib;
  const uint32_t qh = load_qh(a->qh);
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j) {
    const int v0 = ((a->qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
    const int v1 = ((a->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
    sumi += v0 * b->qs[j] + v1 * b->qs[j + 16];
  }
  return (h2f(a->d) * h2f(b->d)) * static_cast<float>(sumi);
}
template <>
__device__ __forceinline__ float block_dot<DType::kQ5_1>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  const auto* a = reinterpret_cast<const BlockQ5_1*>(w) + ib;
  const auto* b = reinterpret_cast<const BlockQ8_1*>(x) + ib;
  const uint32_t qh = load_qh(a->qh);
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j) {
    const int v0 = (a->qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int v1 = (a->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    sumi += v0 * b->qs[j] + v1 * b->qs[j + 16];
  }
  return (h2f(a->d) * h2f(b->d)) * static_cast<float>(sumi) + h2f(a->m) * h2f(b->s);
}
template <>
__device__ __forceinline__ float block_dot<DType::kQ8_0>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(w) + ib;
  const auto* b = reinterpret_cast<const BlockQ8_0*>(x) + ib;
  int32_t sumi = 0;
  for (int j = 0; j < 32; ++j) sumi += a->qs[j] * b->qs[j];
  return static_cast<float>(sumi) * (h2f(a->d) * h2f(b->d));
}

// ggml's get_scale_min_k4 (cpu/vec_dot_kquants.h kquant_scale_min).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// A Q4_K / Q5_K super-block as dot_q4_k_q8_k_scalar / dot_q5_k_q8_k_scalar:
// d·Σ(sc·Σq·y) − dmin·Σ(m·bsum), exact integer sums, the two float products rounded
// separately. Sub-block j holds elements 32j..32j+31: the low (j even) or high (j odd)
// nibbles of qs[32·(j/2) ..], and for Q5_K bit j of qh[l] as bit 4.
template <typename Block, bool kHigh>
__device__ __forceinline__ float k4_block_dot(const Block* a, const BlockQ8_K* b) {
  int32_t summ = 0, sumi = 0;
  for (int j = 0; j < 8; ++j) {
    int sc = 0, m = 0;
    scale_min_k4(j, a->scales, &sc, &m);
    summ += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
    const uint8_t* qs = a->qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    int32_t sum = 0;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[l] >> shift) & 0xF;
      if constexpr (kHigh) q |= ((a->qh[l] >> j) & 1) << 4;
      sum += q * b->qs[32 * j + l];
    }
    sumi += sc * sum;
  }
  const float d = b->d * h2f(a->d);
  const float dmin = b->d * h2f(a->dmin);
  return d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
}
template <>
__device__ __forceinline__ float block_dot<DType::kQ4_K>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  return k4_block_dot<BlockQ4_K, false>(reinterpret_cast<const BlockQ4_K*>(w) + ib,
                                        reinterpret_cast<const BlockQ8_K*>(x) + ib);
}
template <>
__device__ __forceinline__ float block_dot<DType::kQ5_K>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  return k4_block_dot<BlockQ5_K, true>(reinterpret_cast<const BlockQ5_K*>(w) + ib,
                                       reinterpret_cast<const BlockQ8_K*>(x) + ib);
}

// A Q6_K super-block: d · (Σ sc·code·y − 32·Σ sc·bsum) with the integer sum exact — the
// sum of the eight lane integers of dot_q6_k_q8_k_scalar, which scales each lane by d
// before adding (so the float rounding differs; the integers do not).
template <>
__device__ __forceinline__ float block_dot<DType::kQ6_K>(const uint8_t* w, const uint8_t* x,
                                                         int64_t ib) {
  const auto* a = reinterpret_cast<const BlockQ6_K*>(w) + ib;
  const auto* b = reinterpret_cast<const BlockQ8_K*>(x) + ib;
  int32_t isum = 0;
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = a->ql + 64 * h;
    const uint8_t* qh = a->qh + 32 * h;
    const int8_t* y = b->qs + 128 * h;
    const int8_t* sc = a->scales + 8 * h;  // 16-element sub-blocks of this half
    for (int l = 0; l < 32; ++l) {
      const int c0 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
      const int c1 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
      const int c2 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      const int c3 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
      isum += sc[l / 16] * c0 * y[l] + sc[2 + l / 16] * c1 * y[l + 32] +
              sc[4 + l / 16] * c2 * y[l + 64] + sc[6 + l / 16] * c3 * y[l + 96];
    }
  }
  for (int j = 0; j < 16; ++j) isum -= 32 * a->scales[j] * b->bsums[j];
  return (b->d * h2f(a->d)) * static_cast<float>(isum);
}

constexpr int kWarpsPerBlock = 4;
constexpr unsigned kMaxGridY = 65535;

template <DType W>
__global__ void gemv_kernel(const uint8_t* w, uint64_t w_row, const uint8_t* x, uint64_t x_row,
                            float* y, int64_t k, int64_t n_out, int64_t m_rows) {
  const int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (n >= n_out) return;
  const uint8_t* wr = w + static_cast<uint64_t>(n) * w_row;
  for (int64_t m = blockIdx.y; m < m_rows; m += gridDim.y) {
    const uint8_t* xr = x + static_cast<uint64_t>(m) * x_row;
    float acc = 0.0f;
    if constexpr (W == DType::kF32) {
      const auto* a = reinterpret_cast<const float*>(wr);
      const auto* b = reinterpret_cast<const float*>(xr);
      for (int64_t i = lane; i < k; i += 32) acc += a[i] * b[i];
    } else if constexpr (W == DType::kBF16) {
      const auto* a = reinterpret_cast<const uint16_t*>(wr);
      const auto* b = reinterpret_cast<const uint16_t*>(xr);
      for (int64_t i = lane; i < k; i += 32) {
        acc += __uint_as_float(uint32_t{a[i]} << 16) * __uint_as_float(uint32_t{b[i]} << 16);
      }
    } else if constexpr (W == DType::kF16) {
      const auto* a = reinterpret_cast<const uint16_t*>(wr);
      const auto* b = reinterpret_cast<const uint16_t*>(xr);
      for (int64_t i = lane; i < k; i += 32) acc += h2f(a[i]) * h2f(b[i]);
    } else {
      constexpr int64_t kBlock =
          W == DType::kQ4_K || W == DType::kQ5_K || W == DType::kQ6_K ? 256 : 32;
      for (int64_t ib = lane; ib < k / kBlock; ib += 32) acc += block_dot<W>(wr, xr, ib);
    }
    acc = warp_sum(acc);
    if (lane == 0) y[m * n_out + n] = acc;
  }
}

template <DType W>
int mul_mat(const NodeLaunch& l) {
  const TensorRef& wn = l.src[0];
  const TensorRef& xn = l.src[1];
  const int64_t k = wn.ne[0], n_out = wn.ne[1];
  const int64_t m_rows = xn.ne[1] * xn.ne[2] * xn.ne[3];
  if (n_out == 0 || m_rows == 0) return 0;
  const DType act = activation_type(W);
  const uint8_t* x = static_cast<const uint8_t*>(xn.data);
  uint64_t x_row = static_cast<uint64_t>(k) * sizeof(float);
  if (act != DType::kF32) {
    x_row = activation_row_bytes(W, k);
    if (l.scratch == nullptr || l.scratch_bytes < x_row * static_cast<uint64_t>(m_rows)) {
      return static_cast<int>(cudaErrorInvalidValue);  // the backend sizes scratch first
    }
    auto* xq = static_cast<uint8_t*>(l.scratch);
    const auto* xf = static_cast<const float*>(xn.data);
    constexpr int kThreads = 256;
    const int64_t n = k * m_rows;
    if (act == DType::kBF16) {
      to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(
          xf, reinterpret_cast<uint16_t*>(xq), n);
    } else if (act == DType::kF16) {
      to_f16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(
          xf, reinterpret_cast<uint16_t*>(xq), n);
    } else if (act == DType::kQ8_K) {
      quantize_q8_k_kernel<<<static_cast<unsigned>(n / 256), 256, 0, stream_of(l)>>>(xf, xq);
    } else if (act == DType::kQ8_1) {
      quantize_q8_kernel<true>
          <<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(xf, xq, n / 32);
    } else {
      quantize_q8_kernel<false>
          <<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(xf, xq, n / 32);
    }
    x = xq;
  }
  const dim3 grid(static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(m_rows < kMaxGridY ? m_rows : kMaxGridY));
  gemv_kernel<W><<<grid, kWarpsPerBlock * 32, 0, stream_of(l)>>>(
      static_cast<const uint8_t*>(wn.data), wn.row_bytes, x, x_row,
      static_cast<float*>(const_cast<void*>(l.dst.data)), k, n_out, m_rows);
  return launched();
}

}  // namespace

int launch_mul_mat_f32(const NodeLaunch& l) {
  return mul_mat<DType::kF32>(l);
}
int launch_mul_mat_f16(const NodeLaunch& l) {
  return mul_mat<DType::kF16>(l);
}
int launch_mul_mat_bf16(const NodeLaunch& l) {
  return mul_mat<DType::kBF16>(l);
}
int launch_mul_mat_q4_0(const NodeLaunch& l) {
  return mul_mat<DType::kQ4_0>(l);
}
int launch_mul_mat_q4_1(const NodeLaunch& l) {
  return mul_mat<DType::kQ4_1>(l);
}
int launch_mul_mat_q5_0(const NodeLaunch& l) {
  return mul_mat<DType::kQ5_0>(l);
}
int launch_mul_mat_q5_1(const NodeLaunch& l) {
  return mul_mat<DType::kQ5_1>(l);
}
int launch_mul_mat_q8_0(const NodeLaunch& l) {
  return mul_mat<DType::kQ8_0>(l);
}
int launch_mul_mat_q4_k(const NodeLaunch& l) {
  return mul_mat<DType::kQ4_K>(l);
}
int launch_mul_mat_q5_k(const NodeLaunch& l) {
  return mul_mat<DType::kQ5_K>(l);
}
int launch_mul_mat_q6_k(const NodeLaunch& l) {
  return mul_mat<DType::kQ6_K>(l);
}

}  // namespace minfer::backend::cuda
