// Stage 14 (logits → token): definitions of det_exp / det_log (see det_math.h).
// Invariant: compiled with -ffp-contract=off (src/sample/CMakeLists.txt) — no FMA.
#include "sample/det_math.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace minfer::sample {

double det_exp(double x) {
  if (x != x) return x;        // NaN passes through
  if (x < -745.2) return 0.0;  // below the smallest subnormal
  if (x > 709.7) return std::numeric_limits<double>::infinity();
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  // k = floor(x·log2e + 0.5) by truncation plus a correction (exact for |t| < 2^53),
  // avoiding a libm call in the softmax inner loop.
  const double t = x * kLog2e + 0.5;
  int64_t ki = static_cast<int64_t>(t);
  if (static_cast<double>(ki) > t) --ki;
  const double k = static_cast<double>(ki);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  constexpr double kInvFact[] = {1.0 / 479001600.0,
                                 1.0 / 39916800.0,
                                 1.0 / 3628800.0,
                                 1.0 / 362880.0,
                                 1.0 / 40320.0,
                                 1.0 / 5040.0,
                                 1.0 / 720.0,
                                 1.0 / 120.0,
                                 1.0 / 24.0,
                                 1.0 / 6.0,
                                 1.0 / 2.0,
                                 1.0,
                                 1.0};
  for (double c : kInvFact) p = p * r + c;
  // p in [0.7, 1.42]; scale by 2^k with exact power-of-two multiplies built from the
  // exponent bits (ldexp would be a libm call). k may be below the normal range
  // (-1022): split it so each factor is a normal power of two.
  auto pow2 = [](int64_t e) {
    return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52);
  };
  if (ki >= -1022) return p * pow2(ki);
  return (p * pow2(ki + 1000)) * pow2(-1000);
}

double det_log(double x) {
  if (x != x || x < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0.0) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  constexpr double kSqrtHalf = 0.70710678118654752440;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  int e = 0;
  double m = std::frexp(x, &e);
  if (m < kSqrtHalf) {
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double poly = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) poly = poly * s2 + 1.0 / k;
  const double ed = static_cast<double>(e);
  return ed * kLn2Hi + (ed * kLn2Lo + 2.0 * s * poly);
}

}  // namespace minfer::sample
