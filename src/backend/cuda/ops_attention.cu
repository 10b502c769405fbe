// Stage 12 (CUDA kernels): attention over the cells of the kv_window input (GQA), with
// the CPU's online softmax (ops_attention.cpp, default numerics): cells walked in window
// order and cut into chunks of kChunk cells counted from the first cell the query sees
// (fixed by position, not by the batch), the running max rescaled once per chunk,
// weights exp(s − m) summed into l in cell order, V rows accumulated per output element
// in cell order (y = y + p·v, two roundings as the CPU's -ffp-contract=off).
// The window is also cut into splits of kSplitCells cells (whole chunks, counted the same
// way): each split runs that recurrence from scratch, and the splits' (m, l, acc) merge in
// split order with one fixed formula (merge() below). A decode step with few (token,
// head) rows and a long window gives each split its own block, then a combine kernel
// merges them; otherwise one block walks its splits in turn and merges as it goes. Both
// run the same float operations in the same order, so the choice never changes a bit, and
// a window of at most kSplitCells cells is exactly the CPU's sequential recurrence.
// Threads split a head's output elements and a chunk's score rows, never one sum; no
// atomics. The Q·K dots reduce in a warp's fixed butterfly instead of the CPU's 8-lane
// order, and expf is CUDA's: tests state an NMSE bound against the CPU.
// A query with an empty window (bucket padding) writes zeros.
#include "backend/cuda/cuda_plan.h"
#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

constexpr int kChunk = 64;  // as the CPU's kChunk: part of the numerics
constexpr int kSplitCells = static_cast<int>(kAttentionSplitCells);  // whole chunks
static_assert(kSplitCells % kChunk == 0);
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

struct Args {
  const float* q;
  const void* kc;
  const void* vc;
  const int32_t* win;
  float* out;
  float* partials;  // [item][split][2 + hd_v]: m, l, acc (the split-per-block mode)
  int64_t hd, hd_v, n_head, group, row_k, row_v, n_cells, n_runs, max_splits;
  float scale;
  int32_t* err;
  int32_t node_id;
};

// Merges split state (m, l, acc) into the running (M, L, ACC), in split order.
__device__ __forceinline__ void merge(float& M, float& L, float* ACC, float m, float l,
                                      const float* acc) {
  const float mn = fmaxf(M, m);
  const float a = expf(M - mn);  // M = −inf before the first split: a = 0
  const float b = expf(m - mn);
  L = L * a + l * b;
  for (int k = 0; k < kPerThread; ++k) ACC[k] = ACC[k] * a + acc[k] * b;
  M = mn;
}

// Shared state of one block's walk.
struct Walk {
  float s[kChunk];
  int32_t cell_of[kChunk];
  float m, l, f;
  int rescale;
};

// Validates the query's window; false (after writing zeros and reporting) if a run is bad.
__device__ bool window_ok(const Args& a, int64_t t, int64_t h, float* o) {
  const int32_t* wrow = a.win + t * 2 * a.n_runs;
  for (int64_t r = 0; r < a.n_runs; ++r) {
    const int32_t first = wrow[2 * r], cnt = wrow[2 * r + 1];
    if (first < 0 || cnt < 0 || int64_t{first} + cnt > a.n_cells) {
      if (threadIdx.x == 0 && h == 0) {
        report_error(a.err, a.node_id, DeviceError::kWindow, first, static_cast<int32_t>(t));
      }
      if (o != nullptr) {
        for (int64_t d = threadIdx.x; d < a.hd_v; d += kThreads) o[d] = 0.0f;
      }
      return false;
    }
  }
  return true;
}

// The online softmax over split `split` of the window (cells [split·kSplitCells, +kSplitCells)
// in window order): m, l in w, the thread's output elements in acc. False: the window
// ends before this split (nothing walked, acc untouched).
template <typename KV>
__device__ bool walk_split(const Args& a, const float* q_sh, int64_t t, int64_t kvh, int64_t split,
                           Walk& w, float* acc) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int32_t* wrow = a.win + t * 2 * a.n_runs;
  const auto* kc = static_cast<const KV*>(a.kc);
  const auto* vc = static_cast<const KV*>(a.vc);
  // Skip to the split's first cell (every thread alike: uniform control flow).
  int64_t skip = split * kSplitCells;
  int64_t r = 0;
  while (r < a.n_runs && skip >= wrow[2 * r + 1]) skip -= wrow[2 * r + 1], ++r;
  if (r >= a.n_runs) return false;
  int64_t cur = wrow[2 * r] + skip;
  int64_t run_end = wrow[2 * r] + int64_t{wrow[2 * r + 1]};
  for (int k = 0; k < kPerThread; ++k) acc[k] = 0.0f;
  __syncthreads();  // the previous user of w is done
  if (tid == 0) {
    w.m = -INFINITY;
    w.l = 0.0f;
  }
  int64_t left = kSplitCells;
  while (left > 0) {
    int filled = 0;
    while (filled < kChunk && r < a.n_runs) {
      if (cur == run_end) {
        if (++r < a.n_runs) {
          cur = wrow[2 * r];
          run_end = cur + wrow[2 * r + 1];
        }
        continue;
      }
      if (tid == 0) w.cell_of[filled] = static_cast<int32_t>(cur);
      ++filled;
      ++cur;
    }
    if (filled == 0) break;
    left -= filled;
    __syncthreads();
    for (int i = warp; i < filled; i += kWarps) {
      const KV* kr = kc + static_cast<int64_t>(w.cell_of[i]) * a.row_k + kvh * a.hd;
      float part = 0.0f;
      for (int64_t d = lane; d < a.hd; d += 32) part += q_sh[d] * load_kv(kr, d);
      part = warp_sum(part);
      if (lane == 0) w.s[i] = part * a.scale;
    }
    __syncthreads();
    if (tid == 0) {
      float mc = -INFINITY;
      for (int i = 0; i < filled; ++i) mc = w.s[i] > mc ? w.s[i] : mc;
      w.rescale = mc > w.m ? 1 : 0;
      if (mc > w.m) {
        w.f = expf(w.m - mc);  // m = −inf on the first chunk: f = 0
        w.l *= w.f;
        w.m = mc;
      }
    }
    __syncthreads();
    if (w.rescale != 0) {
      for (int k = 0; k < kPerThread; ++k) acc[k] *= w.f;
    }
    if (tid < filled) w.s[tid] = expf(w.s[tid] - w.m);
    __syncthreads();
    if (tid == 0) {
      float l = w.l;
      for (int i = 0; i < filled; ++i) l += w.s[i];
      w.l = l;
    }
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t d = tid + int64_t{k} * kThreads;
      if (d >= a.hd_v) break;
      float x = acc[k];
      for (int i = 0; i < filled; ++i) {
        x = x +
            w.s[i] * load_kv(vc + static_cast<int64_t>(w.cell_of[i]) * a.row_v + kvh * a.hd_v, d);
      }
      acc[k] = x;
    }
    __syncthreads();
  }
  return true;
}

// kSplitBlocks false: one block per (token, head) walks every split and merges them.
// kSplitBlocks true: block (item, split) writes its split's state to a.partials.
template <typename KV, bool kSplitBlocks>
__global__ void attention_kernel(Args a) {
  extern __shared__ float q_sh[];  // [hd]
  __shared__ Walk w;
  const int64_t item = blockIdx.x;
  const int64_t t = item / a.n_head, h = item % a.n_head, kvh = h / a.group;
  const int tid = static_cast<int>(threadIdx.x);
  float* o = a.out + t * (a.n_head * a.hd_v) + h * a.hd_v;
  const bool first_split_block = !kSplitBlocks || blockIdx.y == 0;
  if (!window_ok(a, t, h, first_split_block ? o : nullptr)) {
    if constexpr (kSplitBlocks) {
      // no state: the combine kernel sees an empty split
      if (tid == 0) a.partials[(item * a.max_splits + blockIdx.y) * (2 + a.hd_v) + 1] = 0.0f;
    }
    return;
  }
  const float* qr = a.q + (t * a.n_head + h) * a.hd;
  for (int64_t d = tid; d < a.hd; d += kThreads) q_sh[d] = qr[d];
  float acc[kPerThread];
  if constexpr (kSplitBlocks) {
    float* p = a.partials + (item * a.max_splits + blockIdx.y) * (2 + a.hd_v);
    if (!walk_split<KV>(a, q_sh, t, kvh, blockIdx.y, w, acc)) {
      if (tid == 0) p[1] = 0.0f;  // l = 0: past the window's end
      return;
    }
    if (tid == 0) {
      p[0] = w.m;
      p[1] = w.l;
    }
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t d = tid + int64_t{k} * kThreads;
      if (d < a.hd_v) p[2 + d] = acc[k];
    }
    return;
  } else {
    float M = -INFINITY, L = 0.0f;
    float ACC[kPerThread] = {0.0f, 0.0f};
    for (int64_t split = 0; walk_split<KV>(a, q_sh, t, kvh, split, w, acc); ++split) {
      merge(M, L, ACC, w.m, w.l, acc);  // w.m, w.l: final after walk_split's last barrier
    }
    const float inv = L == 0.0f ? 0.0f : 1.0f / L;  // 0: a padding row
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t d = tid + int64_t{k} * kThreads;
      if (d < a.hd_v) o[d] = ACC[k] * inv;
    }
  }
}

// Merges the splits of one (token, head) in split order, as the one-block kernel does.
__global__ void combine_kernel(Args a) {
  const int64_t item = blockIdx.x;
  const int64_t t = item / a.n_head, h = item % a.n_head;
  const int tid = static_cast<int>(threadIdx.x);
  if (!window_ok(a, t, h, nullptr)) return;  // the split blocks wrote the zeros
  float M = -INFINITY, L = 0.0f;
  float ACC[kPerThread] = {0.0f, 0.0f};
  for (int64_t split = 0; split < a.max_splits; ++split) {
    const float* p = a.partials + (item * a.max_splits + split) * (2 + a.hd_v);
    if (p[1] == 0.0f) break;  // past the window's end (a walked split has l >= 1)
    float acc[kPerThread];
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t d = tid + int64_t{k} * kThreads;
      acc[k] = d < a.hd_v ? p[2 + d] : 0.0f;
    }
    merge(M, L, ACC, p[0], p[1], acc);
  }
  const float inv = L == 0.0f ? 0.0f : 1.0f / L;
  float* o = a.out + t * (a.n_head * a.hd_v) + h * a.hd_v;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t d = tid + int64_t{k} * kThreads;
    if (d < a.hd_v) o[d] = ACC[k] * inv;
  }
}

template <typename KV>
int attention(const NodeLaunch& l) {
  const TensorRef& qn = l.src[0];
  const TensorRef& kn = l.src[1];
  const TensorRef& vn = l.src[2];
  const TensorRef& wn = l.src[3];
  const int64_t n_tok = qn.ne[2];
  const int64_t n_head = l.params.n_head, n_head_kv = l.params.n_head_kv;
  Args a{.q = static_cast<const float*>(qn.data),
         .kc = kn.data,
         .vc = vn.data,
         .win = static_cast<const int32_t*>(wn.data),
         .out = static_cast<float*>(const_cast<void*>(l.dst.data)),
         .partials = nullptr,
         .hd = qn.ne[0],
         .hd_v = vn.ne[0] / n_head_kv,
         .n_head = n_head,
         .group = n_head / n_head_kv,
         .row_k = kn.ne[0],
         .row_v = vn.ne[0],
         .n_cells = kn.ne[1],
         .n_runs = wn.ne[0] / 2,
         .max_splits = 0,
         .scale = l.params.scale,
         .err = l.err,
         .node_id = l.node_id};
  if (a.hd_v > int64_t{kThreads} * kPerThread) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t items = n_tok * n_head;
  if (items == 0) return 0;
  const size_t shared = static_cast<size_t>(a.hd) * sizeof(float);
  const uint64_t split_bytes = attention_split_bytes(n_tok, n_head, a.hd_v, a.n_cells, a.n_runs);
  if (split_bytes > 0 && l.scratch != nullptr && l.scratch_bytes >= split_bytes) {
    a.partials = static_cast<float*>(l.scratch);
    a.max_splits = attention_max_splits(a.n_cells, a.n_runs);
    const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.max_splits));
    attention_kernel<KV, true><<<grid, kThreads, shared, stream_of(l)>>>(a);
    combine_kernel<<<static_cast<unsigned>(items), kThreads, 0, stream_of(l)>>>(a);
  } else {
    attention_kernel<KV, false>
        <<<static_cast<unsigned>(items), kThreads, shared, stream_of(l)>>>(a);
  }
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
