// Stage 12 (CUDA kernels): what every .cu file shares — half conversions, the device
// error word, launch geometry. Built with --fmad=false (CMakeLists.txt): no product is
// contracted into an add unless a kernel writes fmaf, as the CPU kernels are built with
// -ffp-contract=off, so elementwise results round where the CPU's do.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernel_list.h"
#include "quant/blocks.h"

namespace minfer::backend::cuda {

// IEEE conversions (round to nearest even), as core/fp16.h on the host.
__device__ __forceinline__ float h2f(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t f2h(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

// First failure wins: the node id + 1 claims word 0, then code, value and row follow.
__device__ __forceinline__ void report_error(int32_t* err, int32_t node_id, DeviceError code,
                                             int32_t value, int32_t row) {
  if (atomicCAS(err, 0, node_id + 1) == 0) {
    err[1] = static_cast<int32_t>(code);
    err[2] = value;
    err[3] = row;
  }
}

// Sum over the 32 lanes of a warp in a fixed butterfly order: every lane ends with the
// same bits, and the order never depends on the data or on other warps.
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ int32_t warp_sum_i32(int32_t v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

inline cudaStream_t stream_of(const NodeLaunch& l) {
  return static_cast<cudaStream_t>(l.stream);
}
inline unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
inline int launched() {
  return static_cast<int>(cudaGetLastError());
}

// Dequantizes element j (0..31) of a legacy 32-element block, as quant's scalar
// dequantize_row_* do (ggml's layout: the low nibbles are elements 0..15, the high
// nibbles 16..31; one multiply, then the minimum added, each rounded).
template <DType T>
__device__ __forceinline__ float dequant_elem(const uint8_t* row, int64_t j);

template <>
__device__ __forceinline__ float dequant_elem<DType::kF32>(const uint8_t* row, int64_t j) {
  return reinterpret_cast<const float*>(row)[j];
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kF16>(const uint8_t* row, int64_t j) {
  return h2f(reinterpret_cast<const uint16_t*>(row)[j]);
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kBF16>(const uint8_t* row, int64_t j) {
  return __uint_as_float(uint32_t{reinterpret_cast<const uint16_t*>(row)[j]} << 16);
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kQ8_0>(const uint8_t* row, int64_t j) {
  const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(row) + j / 32;
  return static_cast<float>(b->qs[j % 32]) * h2f(b->d);
}
__device__ __forceinline__ int nibble(const uint8_t* qs, int i) {
  return i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
}
__device__ __forceinline__ uint32_t load_qh(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kQ4_0>(const uint8_t* row, int64_t j) {
  const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(row) + j / 32;
  return static_cast<float>(nibble(b->qs, static_cast<int>(j % 32)) - 8) * h2f(b->d);
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kQ4_1>(const uint8_t* row, int64_t j) {
  const auto* b = reinterpret_cast<const quant::BlockQ4_1*>(row) + j / 32;
  return static_cast<float>(nibble(b->qs, static_cast<int>(j % 32))) * h2f(b->d) + h2f(b->m);
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kQ5_0>(const uint8_t* row, int64_t j) {
  const auto* b = reinterpret_cast<const quant::BlockQ5_0*>(row) + j / 32;
  const int i = static_cast<int>(j % 32);
  const int hi = static_cast<int>((load_qh(b->qh) >> i) & 1u) << 4;
  return static_cast<float>((nibble(b->qs, i) | hi) - 16) * h2f(b->d);
}
template <>
__device__ __forceinline__ float dequant_elem<DType::kQ5_1>(const uint8_t* row, int64_t j) {
  const auto* b = reinterpret_cast<const quant::BlockQ5_1*>(row) + j / 32;
  const int i = static_cast<int>(j % 32);
  const int hi = static_cast<int>((load_qh(b->qh) >> i) & 1u) << 4;
  return static_cast<float>(nibble(b->qs, i) | hi) * h2f(b->d) + h2f(b->m);
}

}  // namespace minfer::backend::cuda
