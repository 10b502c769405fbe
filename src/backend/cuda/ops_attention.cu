// Stage 12 (CUDA kernels): attention over the cells of the kv_window input (GQA), with
// the CPU's online softmax (ops_attention.cpp, default numerics): cells walked in window
// order and cut into chunks of kChunk cells counted from the first cell the query sees
// (fixed by position, not by the batch), the running max rescaled once per chunk,
// weights exp(s − m) summed into l in cell order, V rows accumulated per output element
// in cell order (y = y + p·v, two roundings as the CPU's -ffp-contract=off).
// One block per (token, head): threads split the head's output elements and the chunk's
// score rows, never one sum, so a row's result is fixed whatever else is in the batch.
// The Q·K dots reduce in a warp's fixed butterfly order instead of the CPU's 8-lane
// order, and expf is CUDA's: tests state an NMSE bound against the CPU.
// Not yet: splitting one query's chunks over several blocks (flash-decoding); a decode
// row is one block. A query with an empty window (bucket padding) writes zeros.
#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

constexpr int kChunk = 64;  // as the CPU's kChunk: part of the numerics
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 2;  // output elements per thread: head sizes up to 256

template <typename KV>
__device__ __forceinline__ float load_kv(const KV* p, int64_t i) {
  if constexpr (sizeof(KV) == 2) {
    return h2f(p[i]);
  } else {
    return p[i];
  }
}

template <typename KV>
__global__ void attention_kernel(const float* q, const KV* kc, const KV* vc, const int32_t* win,
                                 float* out, int64_t hd, int64_t hd_v, int64_t n_head,
                                 int64_t group, int64_t row_k, int64_t row_v, int64_t n_cells,
                                 int64_t n_runs, float scale, int32_t* err, int32_t node_id) {
  extern __shared__ float q_sh[];  // [hd]
  __shared__ float s[kChunk];
  __shared__ int32_t cell_of[kChunk];
  __shared__ float m_sh, l_sh, f_sh;
  __shared__ int rescale_sh;
  const int64_t item = blockIdx.x;
  const int64_t t = item / n_head, h = item % n_head, kvh = h / group;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int32_t* wrow = win + t * 2 * n_runs;
  float* o = out + t * (n_head * hd_v) + h * hd_v;
  for (int64_t r = 0; r < n_runs; ++r) {
    const int32_t first = wrow[2 * r], cnt = wrow[2 * r + 1];
    if (first < 0 || cnt < 0 || int64_t{first} + cnt > n_cells) {
      if (tid == 0 && h == 0)
        report_error(err, node_id, DeviceError::kWindow, first, static_cast<int32_t>(t));
      for (int64_t d = tid; d < hd_v; d += kThreads) o[d] = 0.0f;
      return;
    }
  }
  const float* qr = q + (t * n_head + h) * hd;
  for (int64_t d = tid; d < hd; d += kThreads) q_sh[d] = qr[d];
  float acc[kPerThread] = {0.0f, 0.0f};
  if (tid == 0) {
    m_sh = -INFINITY;
    l_sh = 0.0f;
  }
  // The walk through the runs: every thread computes it alike (uniform control flow).
  int64_t r = 0;
  int64_t cur = n_runs > 0 ? wrow[0] : 0;
  int64_t run_end = n_runs > 0 ? cur + wrow[1] : 0;
  __syncthreads();
  for (;;) {
    int filled = 0;
    while (filled < kChunk && r < n_runs) {
      if (cur == run_end) {
        if (++r < n_runs) {
          cur = wrow[2 * r];
          run_end = cur + wrow[2 * r + 1];
        }
        continue;
      }
      if (tid == 0) cell_of[filled] = static_cast<int32_t>(cur);
      ++filled;
      ++cur;
    }
    if (filled == 0) break;
    __syncthreads();
    for (int i = warp; i < filled; i += kWarps) {
      const KV* kr = kc + static_cast<int64_t>(cell_of[i]) * row_k + kvh * hd;
      float part = 0.0f;
      for (int64_t d = lane; d < hd; d += 32) part += q_sh[d] * load_kv(kr, d);
      part = warp_sum(part);
      if (lane == 0) s[i] = part * scale;
    }
    __syncthreads();
    if (tid == 0) {
      float mc = -INFINITY;
      for (int i = 0; i < filled; ++i) mc = s[i] > mc ? s[i] : mc;
      rescale_sh = mc > m_sh ? 1 : 0;
      if (mc > m_sh) {
        f_sh = expf(m_sh - mc);  // m = −inf on the first chunk: f = 0
        l_sh *= f_sh;
        m_sh = mc;
      }
    }
    __syncthreads();
    if (rescale_sh != 0) {
      for (int k = 0; k < kPerThread; ++k) acc[k] *= f_sh;
    }
    if (tid < filled) s[tid] = expf(s[tid] - m_sh);
    __syncthreads();
    if (tid == 0) {
      float l = l_sh;
      for (int i = 0; i < filled; ++i) l += s[i];
      l_sh = l;
    }
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t d = tid + int64_t{k} * kThreads;
      if (d >= hd_v) break;
      float a = acc[k];
      for (int i = 0; i < filled; ++i) {
        a = a + s[i] * load_kv(vc + static_cast<int64_t>(cell_of[i]) * row_v + kvh * hd_v, d);
      }
      acc[k] = a;
    }
    __syncthreads();
  }
  const float l = l_sh;
  const float inv = l == 0.0f ? 0.0f : 1.0f / l;  // 0: a padding row
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t d = tid + int64_t{k} * kThreads;
    if (d < hd_v) o[d] = acc[k] * inv;
  }
}

template <typename KV>
int attention(const NodeLaunch& l) {
  const TensorRef& qn = l.src[0];
  const TensorRef& kn = l.src[1];
  const TensorRef& vn = l.src[2];
  const TensorRef& wn = l.src[3];
  const int64_t hd = qn.ne[0];
  const int64_t n_tok = qn.ne[2];
  const int64_t n_head = l.params.n_head, n_head_kv = l.params.n_head_kv;
  const int64_t hd_v = vn.ne[0] / n_head_kv;
  if (hd_v > int64_t{kThreads} * kPerThread) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t items = n_tok * n_head;
  if (items == 0) return 0;
  attention_kernel<KV><<<static_cast<unsigned>(items), kThreads,
                         static_cast<size_t>(hd) * sizeof(float), stream_of(l)>>>(
      static_cast<const float*>(qn.data), static_cast<const KV*>(kn.data),
      static_cast<const KV*>(vn.data), static_cast<const int32_t*>(wn.data),
      static_cast<float*>(const_cast<void*>(l.dst.data)), hd, hd_v, n_head, n_head / n_head_kv,
      kn.ne[0], vn.ne[0], kn.ne[1], wn.ne[0] / 2, l.params.scale, l.err, l.node_id);
  return launched();
}

}  // namespace

int launch_attention_f32(const NodeLaunch& l) {
  return attention<float>(l);
}
int launch_attention_f16(const NodeLaunch& l) {
  return attention<uint16_t>(l);
}

}  // namespace minfer::backend::cuda
