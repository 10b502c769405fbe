// Stage 12 (CUDA kernels): the one list of (op, key dtype) pairs that have a CUDA kernel,
// and the launch record the host hands a kernel. Plain C++ (no CUDA header): the
// backend's supports_op, its dispatch table and the host-only tests all read this list.
// Invariant: an entry exists exactly when a launcher of that name is defined in a .cu
// file (the dispatch table takes every launcher's address, so a missing one fails the
// link), and supports_op accepts a node only through an entry (cuda_plan.cpp).
#pragma once

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "graph/ops.h"

namespace minfer::backend::cuda {

// X(op, key dtype, launcher): the key dtype is the dtype of source 0 — the table of
// get_rows, the region of kv_store, K of attention, the weight of mul_mat — and F32 for
// the float-only ops. kCont copies bytes of any dtype (its entry: F32, matched for all).
#define MINFER_CUDA_KERNELS(X)       \
  X(kGetRows, kF32, get_rows_f32)    \
  X(kGetRows, kF16, get_rows_f16)    \
  X(kGetRows, kQ4_0, get_rows_q4_0)  \
  X(kGetRows, kQ4_1, get_rows_q4_1)  \
  X(kGetRows, kQ5_0, get_rows_q5_0)  \
  X(kGetRows, kQ5_1, get_rows_q5_1)  \
  X(kGetRows, kQ8_0, get_rows_q8_0)  \
  X(kGetRows, kBF16, get_rows_bf16)  \
  X(kRmsNorm, kF32, rms_norm)        \
  X(kRmsNormMul, kF32, rms_norm_mul) \
  X(kSoftmax, kF32, softmax)         \
  X(kAdd, kF32, add)                 \
  X(kMul, kF32, mul)                 \
  X(kScale, kF32, scale)             \
  X(kSilu, kF32, silu)               \
  X(kSwiglu, kF32, swiglu)           \
  X(kTanh, kF32, tanh)               \
  X(kGeglu, kF32, geglu)             \
  X(kGelu, kF32, gelu)               \
  X(kCont, kF32, cont)               \
  X(kRope, kF32, rope)               \
  X(kKvStore, kF32, kv_store_f32)    \
  X(kKvStore, kF16, kv_store_f16)    \
  X(kAttention, kF32, attention_f32) \
  X(kAttention, kF16, attention_f16) \
  X(kMulMat, kF32, mul_mat_f32)      \
  X(kMulMat, kF16, mul_mat_f16)      \
  X(kMulMat, kBF16, mul_mat_bf16)    \
  X(kMulMat, kQ4_0, mul_mat_q4_0)    \
  X(kMulMat, kQ4_1, mul_mat_q4_1)    \
  X(kMulMat, kQ5_0, mul_mat_q5_0)    \
  X(kMulMat, kQ5_1, mul_mat_q5_1)    \
  X(kMulMat, kQ8_0, mul_mat_q8_0)    \
  X(kMulMat, kQ4_K, mul_mat_q4_k)    \
  X(kMulMat, kQ5_K, mul_mat_q5_k)    \
  X(kMulMat, kQ6_K, mul_mat_q6_k)

// One operand of a launch: its device address, dtype and shape (ggml order).
struct TensorRef {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  uint64_t row_bytes = 0;  // bytes of one ne[0] row (quantized types: whole blocks)
};

// Everything a launcher needs, resolved on the host from the graph and the split's
// NodeData (no graph types cross into the .cu files).
struct NodeLaunch {
  int32_t node_id = -1;
  graph::Op op = graph::Op::kInput;
  graph::OpParams params;
  TensorRef dst;
  std::array<TensorRef, 4> src;
  int32_t n_src = 0;
  uint64_t dst_bytes = 0;   // bytes of the output (kCont)
  void* scratch = nullptr;  // device work memory (mul_mat's converted activations)
  uint64_t scratch_bytes = 0;
  int32_t* err = nullptr;  // device-visible error word (kernel_common.cuh)
  void* stream = nullptr;  // cudaStream_t
};

// A launcher queues its kernels on l.stream and returns the cudaError_t of the launch
// (0: queued). Bounds found on the device (an id, a cell, a window) are reported through
// l.err and read by the host at its next synchronisation.
using LaunchFn = int (*)(const NodeLaunch& l);

#define MINFER_CUDA_DECLARE(op, dtype, name) int launch_##name(const NodeLaunch& l);
MINFER_CUDA_KERNELS(MINFER_CUDA_DECLARE)
#undef MINFER_CUDA_DECLARE

// Codes of the device error word: word[0] = failing node id + 1 (first failure wins),
// word[1] = code, word[2] = the bad value, word[3] = the row / query it was found at.
enum class DeviceError : int32_t { kNone = 0, kRowId = 1, kCell = 2, kWindow = 3 };

}  // namespace minfer::backend::cuda
