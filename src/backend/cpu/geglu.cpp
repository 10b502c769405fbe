// Stage 12 (kernels): GeGLU scalar reference and ggml's f16 gelu table (geglu.h).
#include "backend/cpu/geglu.h"

#include <cmath>
#include <vector>

#include "core/fp16.h"

namespace minfer::backend::cpu {

float gelu_tanh_f32(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

float gelu_tanh_f32_fma(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

namespace {

std::vector<float> make_table(float (*gelu)(float)) {
  std::vector<float> t(65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = fp16_to_fp32(static_cast<uint16_t>(h));
    t[h] = fp16_to_fp32(fp32_to_fp16(gelu(x)));
  }
  return t;
}

}  // namespace

const float* gelu_f16_table(bool fma) {
  // Built once each, thread-safe (function-local statics); 256 KiB each.
  if (fma) {
    static const std::vector<float> table = make_table(gelu_tanh_f32_fma);
    return table.data();
  }
  static const std::vector<float> table = make_table(gelu_tanh_f32);
  return table.data();
}

namespace {
template <bool kUp>
void geglu_scalar_t(int64_t n, const float* gate, const float* up, float* y, const float* table) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    float v;
    if (x <= -10.0f) {
      v = 0.0f;
    } else if (x >= 10.0f) {
      v = x;
    } else {
      v = table[fp32_to_fp16(x)];
    }
    y[i] = kUp ? (x <= -10.0f ? 0.0f : v * up[i]) : v;
  }
}
}  // namespace

void geglu_scalar(int64_t n, const float* gate, const float* up, float* y, const float* table) {
  if (up != nullptr) {
    geglu_scalar_t<true>(n, gate, up, y, table);
  } else {
    geglu_scalar_t<false>(n, gate, nullptr, y, table);
  }
}

}  // namespace minfer::backend::cpu
