// Stage 3 (quant): the per-sub-block scale searches the k-quant reference quantizers
// use (ggml-quants.c: nearest_int, make_qx_quants, make_q3_quants, make_qkx2_quants).
// Invariant: float arithmetic in ggml's order, in float, never contracted to FMA —
// the chosen codes and scales, hence the bytes, depend on every rounding.
#pragma once

#include <cstdint>

#include "core/fp16.h"

namespace minfer::quant::detail {

// Round to nearest, ties to even, by adding 1.5 * 2^23: the sum's mantissa then holds
// the rounded integer offset by 2^22. Valid for |x| < 2^22 (the callers' codes are
// tiny); identical to ggml's nearest_int, including its result for larger inputs.
inline int nearest_int(float x) {
  const float shifted = x + 12582912.0f;
  return static_cast<int>(fp32_to_bits(shifted) & 0x007fffffu) - 0x00400000;
}

// Symmetric fit (ggml's make_qx_quants with rmse_type 1, no importance weights): codes
// L[i] in [0, 2 * nmax) for l = L - nmax in [-nmax, nmax - 1], weights x^2, the
// least-squares scale for l tried at 19 inverse scales -(nmax + 0.1 * is) / max.
// Returns the scale to multiply l by; 0 for a block whose magnitudes are all < 1e-15.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L);

// Symmetric fit for Q3_K: weights x^2, then up to 5 passes of per-element code moves
// that improve the weighted least-squares objective. L[i] in [0, 2 * nmax).
float fit_symmetric_q3(int n, int nmax, const float* x, int8_t* L);

// Affine fit x ≈ scale * L + min with L in [0, nmax], min <= 0, minimising the
// `weights`-weighted squared (or absolute, `use_mad`) error over nstep + 1 trial
// inverse scales (rmin + rdelta * is + nmax) / (max - min). Returns scale; *neg_min =
// -min (>= 0). `scratch` holds n codes.
struct AffineSearch {
  float rmin;
  float rdelta;
  int nstep;
  bool use_mad;
};
float fit_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min,
                 uint8_t* scratch, AffineSearch search);

}  // namespace minfer::quant::detail
