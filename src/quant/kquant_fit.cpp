// Stage 3 (quant): scale searches for the k-quant reference quantizers.
// Invariant: each loop mirrors ggml-quants.c's arithmetic (operand order, float
// accumulators, integer codes promoted to float where ggml promotes them) so the same
// candidate wins every comparison; see kquant_fit.h.
#include "quant/kquant_fit.h"

#include <algorithm>
#include <cmath>

namespace minfer::quant::detail {
namespace {

// ggml's GROUP_MAX_EPS: below this absolute maximum a sub-block is treated as zero.
constexpr float kGroupMaxEps = 1e-15f;

// The element of largest magnitude with its sign (first one on ties) and |it|.
void signed_absmax(int n, const float* x, float* max, float* amax) {
  *max = 0.0f;
  *amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > *amax) {
      *amax = ax;
      *max = x[i];
    }
  }
}

int clamp_code(int l, int lo, int hi) {
  return std::max(lo, std::min(hi, l));
}

}  // namespace

float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max, amax;
  signed_absmax(n, x, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  // Weighted least squares: for codes l, the best scale is sum(w x l) / sum(w l^2)
  // and the error it leaves decreases with sum(w x l)^2 / sum(w l^2).
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = 0.0f;
    suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float fit_symmetric_q3(int n, int nmax, const float* x, int8_t* L) {
  float max, amax;
  signed_absmax(n, x, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  // Coordinate descent: move one code to the value that is optimal for the others
  // (given the current scale), keep the move if sumlx^2 / suml2 grows.
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int new_l = clamp_code(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const float nl = static_cast<float>(new_l);
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float fit_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min,
                 uint8_t* scratch, AffineSearch search) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;  // the offset only ever lowers the range
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -min;
    return 0.0f;
  }
  const auto error_of = [&](float scale, float mn, const uint8_t* codes) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = scale * static_cast<float>(codes[i]) + mn - x[i];
      diff = search.use_mad ? std::fabs(diff) : diff * diff;
      err += weights[i] * diff;
    }
    return err;
  };

  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_code(nearest_int(iscale * (x[i] - min)), 0, nmax));
  }
  float best_error = error_of(scale, min, L);
  if (search.nstep < 1) {
    *neg_min = -min;
    return scale;
  }
  for (int is = 0; is <= search.nstep; ++is) {
    iscale = (search.rmin + search.rdelta * static_cast<float>(is) + static_cast<float>(nmax)) /
             (max - min);
    float sum_l = 0.0f;
    float sum_l2 = 0.0f;
    float sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_code(nearest_int(iscale * (x[i] - min)), 0, nmax);
      scratch[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    // Weighted least squares for (scale, min) given the codes; a positive min is
    // replaced by 0 and the scale refit alone.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      const float cur_error = error_of(this_scale, this_min, scratch);
      if (cur_error < best_error) {
        std::copy(scratch, scratch + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

}  // namespace minfer::quant::detail
