// Stage 12 (kernels): the mul_mat kernel table — the one place a weight type is paired
// with its activation format (ggml's vec_dot_type) and an activation format with its
// converters; the ISA files name only their kernels (IsaDot), and this file joins them.
// A new weight type: one kPairs row plus its kernels in the ISA files' switches. A new
// ISA: one column function and one *_dot_kernel below.
// Invariant: every ISA column of a weight type reads the same activation bytes (the
// SIMD converters are tested byte-equal to the scalar ones).
#include <array>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_dot.h"

namespace minfer::backend::cpu {
namespace {

// An activation format: its reference converter and an AVX2 form giving the same bytes
// (nullptr: the reference serves every ISA).
struct ActFormat {
  DType act;
  FromF32Fn from_f32;
  FromF32Fn from_f32_avx2;
};

constexpr std::array kActs = {
    ActFormat{DType::kF32, from_f32_f32, nullptr},
    ActFormat{DType::kF16, from_f32_f16, from_f32_f16_avx2},
    ActFormat{DType::kBF16, from_f32_bf16, nullptr},
    ActFormat{DType::kQ8_0, from_f32_q8_0, from_f32_q8_0_avx2},
    ActFormat{DType::kQ8_1, from_f32_q8_1, from_f32_q8_1_avx2},
    ActFormat{DType::kQ8_K, from_f32_q8_k, from_f32_q8_k_avx2},
};

// Weight type → activation format: ggml's pairing (Q8_1 carries the block sum the
// Q4_1 / Q5_1 minimum needs; the K-quants take Q8_K super-blocks).
constexpr std::array kPairs = {
    std::pair{DType::kF32, DType::kF32},   std::pair{DType::kF16, DType::kF16},
    std::pair{DType::kBF16, DType::kBF16}, std::pair{DType::kQ4_0, DType::kQ8_0},
    std::pair{DType::kQ4_1, DType::kQ8_1}, std::pair{DType::kQ5_0, DType::kQ8_0},
    std::pair{DType::kQ5_1, DType::kQ8_1}, std::pair{DType::kQ8_0, DType::kQ8_0},
    std::pair{DType::kQ2_K, DType::kQ8_K}, std::pair{DType::kQ3_K, DType::kQ8_K},
    std::pair{DType::kQ4_K, DType::kQ8_K}, std::pair{DType::kQ5_K, DType::kQ8_K},
    std::pair{DType::kQ6_K, DType::kQ8_K},
};

const ActFormat* act_of(DType weight) {
  for (const auto& [w, act] : kPairs) {
    if (w != weight) continue;
    for (const ActFormat& a : kActs) {
      if (a.act == act) return &a;
    }
  }
  return nullptr;
}

// `d` with its weight type's activation format: the AVX2 converter for the SIMD columns.
DotKernel join(DType weight, const IsaDot& d, bool simd) {
  const ActFormat* a = act_of(weight);
  if (a == nullptr || d.dot == nullptr) return {};
  return {.vec_dot_type = a->act,
          .from_f32 = simd && a->from_f32_avx2 != nullptr ? a->from_f32_avx2 : a->from_f32,
          .vec_dot = d.dot,
          .gemm = d.gemm,
          .vec_dot_batch = d.dot_batch,
          .gemv_rows_max = d.gemv_rows_max,
          .batch_min_rows = d.batch_min_rows,
          .batch_w_rows_multiple = d.batch_w_rows_multiple};
}

}  // namespace

DotKernel scalar_dot_kernel(DType t) {
  return join(t, scalar_dot(t), false);
}
DotKernel avx2_dot_kernel(DType t) {
  return join(t, avx2_dot(t), true);
}
DotKernel avx512_dot_kernel(DType t) {
  return join(t, avx512_dot(t), true);
}

DotKernel avx2_or_scalar_dot_kernel(DType t) {
  DotKernel k = avx2_dot_kernel(t);
  return k.vec_dot != nullptr ? k : scalar_dot_kernel(t);
}

DotKernel avx512_or_avx2_dot_kernel(DType t) {
  DotKernel k = avx512_dot_kernel(t);
  return k.vec_dot != nullptr ? k : avx2_or_scalar_dot_kernel(t);
}

DotKernel llamacpp_dot_kernel(DType t) {
  DotKernel k = join(t, avx2_ggml_dot(t), true);
  return k.vec_dot != nullptr ? k : avx2_or_scalar_dot_kernel(t);
}

DotKernel llamacpp_avx2_build_dot_kernel(DType t) {
  DotKernel k = join(t, avx2_build_ggml_dot(t), true);
  return k.vec_dot != nullptr ? k : avx2_or_scalar_dot_kernel(t);
}

// llama.cpp's CPU_REPACK buffer (llamacpp_repacks): Q4_0 one f32 lane per row (AVX-512
// rows kernels where the CPU has them, the AVX2 form else: the same bits); Q4_K its GEMV
// for decode and for the rows after the last whole group of 4, its GEMM order (and 4-row
// activation quantizer) for the rest of a batch.
DotKernel llamacpp_repack_dot_kernel(DType t) {
  switch (t) {
    case DType::kQ4_0:
      return join(t,
                  detect_isa() == CpuIsa::kAvx512 ? avx512_rows_q4_0_repack_dot()
                                                  : IsaDot{.dot = dot_q4_0_q8_0_repack_avx2},
                  true);
    case DType::kQ4_K: {
      DotKernel k = join(
          t, {.dot = dot_q4_k_q8_k_repack_gemv_avx2, .dot_batch = dot_q4_k_q8_k_repack_gemm_avx2},
          true);
      k.batch_group = 4;
      k.from_f32_batch = from_f32_q8_k_mat4;
      return k;
    }
    default:
      return {};
  }
}

}  // namespace minfer::backend::cpu
