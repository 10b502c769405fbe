// Tools (quant goldens): a large randomized differential check of src/quant against
// ggml, beyond what the committed goldens hold. Linked against ggml's objects and our
// minfer_quant/minfer_core libraries by `regenerate.sh --differential BUILD_DIR`.
// Invariant: exits non-zero if any row's quantized bytes or dequantized floats differ.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "ggml.h"
#include "quant/quant.h"

extern "C" void quantize_row_q8_K_ref(const float* x, void* y, int64_t k);
extern "C" void dequantize_row_q8_K(const void* x, float* y, int64_t k);

namespace {

using minfer::DType;

void ggml_quantize(ggml_type t, const float* x, void* y, int64_t n) {
  if (t == GGML_TYPE_Q8_K) {
    quantize_row_q8_K_ref(x, y, n);
  } else {
    ggml_get_type_traits(t)->from_float_ref(x, y, n);
  }
}

void ggml_dequantize(ggml_type t, const void* x, float* y, int64_t n) {
  if (t == GGML_TYPE_Q8_K) {
    dequantize_row_q8_K(x, y, n);
  } else {
    ggml_get_type_traits(t)->to_float(x, y, n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 400;
  const std::pair<ggml_type, DType> types[] = {
      {GGML_TYPE_F16, DType::kF16},   {GGML_TYPE_BF16, DType::kBF16},
      {GGML_TYPE_Q4_0, DType::kQ4_0}, {GGML_TYPE_Q4_1, DType::kQ4_1},
      {GGML_TYPE_Q5_0, DType::kQ5_0}, {GGML_TYPE_Q5_1, DType::kQ5_1},
      {GGML_TYPE_Q8_0, DType::kQ8_0}, {GGML_TYPE_Q2_K, DType::kQ2_K},
      {GGML_TYPE_Q3_K, DType::kQ3_K}, {GGML_TYPE_Q4_K, DType::kQ4_K},
      {GGML_TYPE_Q5_K, DType::kQ5_K}, {GGML_TYPE_Q6_K, DType::kQ6_K},
      {GGML_TYPE_Q8_K, DType::kQ8_K}};
  constexpr int64_t kN = 256 * 64;  // elements per row
  std::mt19937_64 rng(42);
  std::normal_distribution<float> gauss(0, 1);
  std::uniform_real_distribution<float> unif(-1, 1);
  std::vector<float> x(kN);
  int failures = 0;
  for (const auto& [gt, dt] : types) {
    long bad_q = 0, bad_d = 0, bad_rand = 0;
    for (int r = 0; r < rows; ++r) {
      // Eight shapes of data at scales 1e-8 .. 1e4.
      const float scale = std::pow(10.f, std::uniform_real_distribution<float>(-8, 4)(rng));
      for (int64_t i = 0; i < kN; ++i) {
        float v;
        switch (r % 8) {
          case 0:
            v = gauss(rng);
            break;
          case 1:
            v = unif(rng);
            break;
          case 2:
            v = std::fabs(gauss(rng)) + 0.1f;
            break;
          case 3:
            v = rng() % 50 == 0 ? 100 * gauss(rng) : gauss(rng);
            break;
          case 4:
            v = rng() % 4 == 0 ? 0.f : gauss(rng);
            break;
          case 5:
            v = std::round(unif(rng) * 16) / 4;
            break;
          case 6:
            v = -std::fabs(gauss(rng));
            break;
          default:
            v = gauss(rng) * gauss(rng) * gauss(rng);
            break;
        }
        x[i] = v * scale;
      }
      const size_t nb = ggml_row_size(gt, kN);
      std::vector<uint8_t> want(nb, 0), got(nb, 0);
      ggml_quantize(gt, x.data(), want.data(), kN);
      if (!minfer::quant::quantize(dt, x, got).ok()) return 2;
      bad_q += want != got;
      std::vector<float> dw(kN), dg(kN);
      ggml_dequantize(gt, want.data(), dw.data(), kN);
      if (!minfer::quant::dequantize(dt, want, dg).ok()) return 2;
      bad_d += std::memcmp(dw.data(), dg.data(), kN * 4) != 0;
      // Arbitrary bytes.
      for (auto& b : want) b = static_cast<uint8_t>(rng());
      ggml_dequantize(gt, want.data(), dw.data(), kN);
      if (!minfer::quant::dequantize(dt, want, dg).ok()) return 2;
      bad_rand += std::memcmp(dw.data(), dg.data(), kN * 4) != 0;
    }
    std::printf(
        "%-5s %d rows x %lld: quantize diffs %ld, dequantize diffs %ld, random-bytes diffs %ld\n",
        ggml_type_name(gt), rows, static_cast<long long>(kN), bad_q, bad_d, bad_rand);
    failures += (bad_q + bad_d + bad_rand) != 0;
  }
  std::printf("differential: %s\n", failures ? "MISMATCH" : "all bit-exact");
  return failures ? 1 : 0;
}
