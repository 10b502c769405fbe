// Stage 12 (CUDA kernels): row movement — get_rows (F32, F16, BF16 and the legacy quant types,
// dequantized exactly as quant's scalar dequantize: bitwise the CPU) and kv_store into a
// persistent F32 / F16 region (f32 → f16 rounded to nearest even, as the CPU).
// Loud bounds: an id or cell out of range is reported through the error word (the host
// returns it, naming the node, at its next synchronisation) and its row is not written.
#include "backend/cuda/kernel_common.cuh"

namespace minfer::backend::cuda {
namespace {

constexpr int kThreads = 256;

template <DType T>
__global__ void get_rows_kernel(const uint8_t* table, uint64_t row_bytes, int64_t n_rows,
                                const int32_t* ids, float* out, int64_t ne0, int64_t n,
                                int32_t* err, int32_t node_id) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / ne0, j = i % ne0;
  const int32_t id = ids[r];
  if (id < 0 || id >= n_rows) {
    if (j == 0) report_error(err, node_id, DeviceError::kRowId, id, static_cast<int32_t>(r));
    return;
  }
  out[i] = dequant_elem<T>(table + static_cast<uint64_t>(id) * row_bytes, j);
}

template <DType T>
int get_rows(const NodeLaunch& l) {
  const TensorRef& t = l.src[0];
  const TensorRef& ids = l.src[1];
  const int64_t n = t.ne[0] * ids.ne[0] * ids.ne[1] * ids.ne[2] * ids.ne[3];
  if (n == 0) return 0;
  get_rows_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(
      static_cast<const uint8_t*>(t.data), t.row_bytes, t.ne[1],
      static_cast<const int32_t*>(ids.data), static_cast<float*>(const_cast<void*>(l.dst.data)),
      t.ne[0], n, l.err, l.node_id);
  return launched();
}

template <bool kHalf>
__global__ void kv_store_kernel(void* region, int64_t n_cells, const float* src,
                                const int32_t* cells, int64_t row, int64_t n, int32_t* err,
                                int32_t node_id) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const int64_t t = i / row, j = i % row;
  const int32_t cell = cells[t];
  if (cell == -1) return;  // a padding row of a bucketed batch stores nothing
  if (cell < -1 || cell >= n_cells) {
    if (j == 0) report_error(err, node_id, DeviceError::kCell, cell, static_cast<int32_t>(t));
    return;
  }
  const int64_t at = static_cast<int64_t>(cell) * row + j;
  if constexpr (kHalf) {
    static_cast<uint16_t*>(region)[at] = f2h(src[i]);
  } else {
    static_cast<float*>(region)[at] = src[i];
  }
}

template <bool kHalf>
int kv_store(const NodeLaunch& l) {
  const TensorRef& region = l.src[0];
  const TensorRef& cells = l.src[2];
  const int64_t row = region.ne[0];
  const int64_t n = row * cells.ne[0] * cells.ne[1] * cells.ne[2] * cells.ne[3];
  if (n == 0) return 0;
  // The result aliases the region: write through dst (the same address).
  kv_store_kernel<kHalf><<<grid_for(n, kThreads), kThreads, 0, stream_of(l)>>>(
      const_cast<void*>(l.dst.data), region.ne[1], static_cast<const float*>(l.src[1].data),
      static_cast<const int32_t*>(cells.data), row, n, l.err, l.node_id);
  return launched();
}

}  // namespace

int launch_get_rows_f32(const NodeLaunch& l) {
  return get_rows<DType::kF32>(l);
}
int launch_get_rows_f16(const NodeLaunch& l) {
  return get_rows<DType::kF16>(l);
}
int launch_get_rows_q4_0(const NodeLaunch& l) {
  return get_rows<DType::kQ4_0>(l);
}
int launch_get_rows_q4_1(const NodeLaunch& l) {
  return get_rows<DType::kQ4_1>(l);
}
int launch_get_rows_q5_0(const NodeLaunch& l) {
  return get_rows<DType::kQ5_0>(l);
}
int launch_get_rows_q5_1(const NodeLaunch& l) {
  return get_rows<DType::kQ5_1>(l);
}
int launch_get_rows_q8_0(const NodeLaunch& l) {
  return get_rows<DType::kQ8_0>(l);
}
int launch_get_rows_bf16(const NodeLaunch& l) {
  return get_rows<DType::kBF16>(l);
}
int launch_kv_store_f32(const NodeLaunch& l) {
  return kv_store<false>(l);
}
int launch_kv_store_f16(const NodeLaunch& l) {
  return kv_store<true>(l);
}

}  // namespace minfer::backend::cuda
