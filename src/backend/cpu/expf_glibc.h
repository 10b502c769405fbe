// Stage 12 (kernels): glibc's expf data (sysdeps/ieee754/flt-32/e_expf.c and
// __exp2f_data, from ARM's optimized-routines; unchanged since glibc 2.28), for the SIMD
// twins of expf (attn_exp_f32_avx2, attn_exp_f32_avx512). Both run the algorithm as
// glibc's x86-64 FMA variant __expf_fma does: k = round(x · 32/ln2) by the 1.5·2^52
// shift, r = x · 32/ln2 − k (fused), 2^(k/32) from the table with k's high bits added to
// its exponent, and a cubic in r with the same three fused multiply-adds — so every
// |x| < 88 gives expf's bits (the kernels send |x| >= 88 and NaN to std::exp).
#pragma once

#include <cstdint>

namespace minfer::backend::cpu::glibc_expf {

// Entry i: the bits of 2^(i/32) less i << 47.
inline constexpr uint64_t kTab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
inline constexpr uint64_t kInvLn2N = 0x40471547652b82fe;  // 32 / ln 2
inline constexpr uint64_t kShift = 0x4338000000000000;    // 0x1.8p52
// The cubic's coefficients of r^3, r^2, r (each pre-scaled by 1/32 per power of r).
inline constexpr uint64_t kPoly[3] = {0x3ebc6af84b912394, 0x3f2ebfce50fac4f3, 0x3f962e42ff0c52d6};

}  // namespace minfer::backend::cpu::glibc_expf
