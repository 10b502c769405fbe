// Stage 14 (logits → token): exp and log the sampler can trust to the bit.
// Invariant: built only from IEEE-754 double +,-,*,/ and exact exponent manipulation, so
// results are identical on every machine and C library (libm's are not specified).
#pragma once

namespace minfer::sample {

// exp(x) in plain double arithmetic (softmax weights are exp(logit - max) <= 1).
// libm's exp is not specified to the bit and differs between glibc versions and other
// C libraries, which would make a probability — and so a drawn token — depend on the
// machine. Method: Cody–Waite reduction x = k·ln2 + r with |r| <= ln2/2 (ln2 split in a
// high part with trailing zero bits, so k·ln2_hi is exact), then a degree-13 Taylor
// polynomial in Horner form (truncation error < 2e-17 relative on that interval), then
// scaling by 2^k with exact power-of-two multiplies. Accuracy: a few ulp of double — far below
// the float probabilities built from it. Defined out of line in det_math.cpp, which is built
// with -ffp-contract=off so no FMA is fused in on some machines and not others.
double det_exp(double x);

// ln(x) for x > 0, same guarantees as det_exp. Method: x = m·2^e with m in
// [sqrt(1/2), sqrt(2)) (frexp is exact), then ln m = 2·atanh(s), s = (m-1)/(m+1),
// |s| <= 0.172, by its odd series to s^23 (first omitted term < 1e-19 relative), plus
// e·ln2 with ln2 split so e·ln2_hi is exact.
double det_log(double x);

// 2^y and log2(x) through the two above.
inline double det_exp2(double y) {
  return det_exp(y * 0.69314718055994530942);
}
inline double det_log2(double x) {
  return det_log(x) * 1.44269504088896340736;
}

}  // namespace minfer::sample
