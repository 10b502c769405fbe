// Stage 3 (quant): F32, F16 and BF16 — element-wise formats (block size 1).
// Invariant: conversions are core/fp16.h's, which match ggml's
// ggml_fp16_to_fp32_row / ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref bit for bit
// (round-to-nearest-even; NaN stays NaN; bf16 NaN quieted).
#include <cstring>

#include "core/fp16.h"
#include "quant/kernels.h"

namespace minfer::quant::detail {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// Tensor bytes may be unaligned for uint16_t (a GGUF only promises its alignment for
// the tensor start), so elements are read and written with memcpy.
void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = fp16_to_fp32(h);
  }
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

}  // namespace minfer::quant::detail
