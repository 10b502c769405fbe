// Stage 1 tests: Result propagation, overflow-safe arithmetic, fp16/bf16 conversions,
// the dtype table and UTF-8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/result.h"
#include "core/utf8.h"

namespace minfer {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return make_error("value " + std::to_string(v) + " is not positive");
  return v;
}

Result<int> twice_positive(int v) {
  MINFER_TRY(int x, parse_positive(v));
  return 2 * x;
}

TEST(Result, PropagatesValueAndErrorWithMessage) {
  auto ok = twice_positive(4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8);
  auto bad = twice_positive(-3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "value -3 is not positive");
  EXPECT_EQ(bad.error().context("reading x").message, "reading x: value -3 is not positive");
}

TEST(CheckedMath, DetectsEveryOverflow) {
  uint64_t out = 0;
  EXPECT_TRUE(checked_add(1, 2, &out));
  EXPECT_EQ(out, 3u);
  EXPECT_FALSE(checked_add(std::numeric_limits<uint64_t>::max(), 1, &out));
  EXPECT_TRUE(checked_mul(1ull << 31, 1ull << 32, &out));
  EXPECT_EQ(out, 1ull << 63);
  EXPECT_FALSE(checked_mul(1ull << 32, 1ull << 32, &out));
  EXPECT_TRUE(checked_align_up(33, 32, &out));
  EXPECT_EQ(out, 64u);
  EXPECT_TRUE(checked_align_up(64, 32, &out));
  EXPECT_EQ(out, 64u);
  EXPECT_FALSE(checked_align_up(std::numeric_limits<uint64_t>::max() - 3, 32, &out));
}

TEST(Fp16, EveryHalfRoundTripsBitwise) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    EXPECT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  // 1 + 2^-11 is exactly halfway between 1 and the next half (1 + 2^-10): ties to even.
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // rounds to +inf
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
}

// Exact reference for the half fma: a finite half is an integer multiple of 2^-24, so
// a·b + c is an integer multiple of 2^-48 of magnitude below 2^82 (an __int128); it is
// rounded to the nearest half, ties to even, by a search over the ordered positive halves
// (0x7c00 stands for 65536 there, so 65520 and above round to infinity).
__extension__ typedef __int128 i128;  // GCC/Clang's 128-bit integer

i128 half_units(uint16_t h) {  // value · 2^24, finite h or 0x7c00 as 65536
  const int e = (h >> 10) & 31;
  const int64_t m = h & 1023;
  const int64_t mag = e == 0 ? m : (m | 1024) << (e - 1);
  return (h & 0x8000) ? -mag : mag;
}

uint16_t fma_f16_reference(uint16_t a, uint16_t b, uint16_t c) {
  const i128 s = half_units(a) * half_units(b) + half_units(c) * (i128{1} << 24);
  const i128 mag = s < 0 ? -s : s;
  uint32_t lo = 0, hi = 0x7bff;  // largest positive half <= mag
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (half_units(static_cast<uint16_t>(mid)) * (i128{1} << 24) <= mag) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const i128 dlo = mag - half_units(static_cast<uint16_t>(lo)) * (i128{1} << 24);
  const i128 dhi = half_units(static_cast<uint16_t>(lo + 1)) * (i128{1} << 24) - mag;
  const uint32_t r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>((s < 0 ? 0x8000u : 0u) | r);
}

uint16_t random_finite_half(std::mt19937& rng, int exp_lo, int exp_hi) {
  std::uniform_int_distribution<int> e(exp_lo, exp_hi), m(0, 1023), sg(0, 1);
  return static_cast<uint16_t>((sg(rng) << 15) | (e(rng) << 10) | m(rng));
}

// fma_f16_exact (AVX512-FP16's vfmadd*ph, reproduced for llama.cpp's flash attention)
// is a·b + c rounded once: against the exact integer reference over every exponent
// (subnormals, overflow to infinity, terms 2^40 apart) and over exponents near 1 where
// the sum often lands on or next to a tie.
TEST(Fp16, FmaRoundsTheExactSumOnce) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300000; ++i) {
    const bool narrow = i % 2 == 0;
    const uint16_t a = random_finite_half(rng, narrow ? 12 : 0, narrow ? 17 : 30);
    const uint16_t b = random_finite_half(rng, narrow ? 12 : 0, narrow ? 17 : 30);
    const uint16_t c = random_finite_half(rng, narrow ? 10 : 0, narrow ? 18 : 30);
    const uint16_t want = fma_f16_reference(a, b, c);
    const uint16_t got = fma_f16_exact(a, b, c);
    if ((want & 0x7fff) == 0) {
      ASSERT_EQ(got & 0x7fff, 0) << std::hex << a << " " << b << " " << c;  // sign of 0 aside
    } else {
      ASSERT_EQ(got, want) << std::hex << a << " " << b << " " << c;
    }
  }
  // ties go to even: 1·2^-11 + 1 and 1·2^-11 + (1 + 2^-10)
  EXPECT_EQ(fma_f16_exact(0x3c00, 0x1000, 0x3c00), 0x3c00);
  EXPECT_EQ(fma_f16_exact(0x3c00, 0x1000, 0x3c01), 0x3c02);
  // (1 + 2^-10)(1 - 2^-10) + 2050 = 2051 - 2^-20, just below the tie 2051: 2050. Rounded
  // to float first it would be 2051 itself and go to the even neighbour 2052.
  EXPECT_EQ(fma_f16_reference(0x3c01, 0x3bfe, 0x6801), 0x6801);
  EXPECT_EQ(fma_f16_exact(0x3c01, 0x3bfe, 0x6801), 0x6801);
  EXPECT_EQ(fp32_to_fp16(static_cast<float>(2051.0 - std::ldexp(1.0, -20))), 0x6802);
  EXPECT_EQ(fma_f16_exact(0x7bff, 0x3c00, 0x5000), 0x7c00);  // 65504 + 32 → infinity
}

// AVX512-FP16 intrinsics need GCC 12+ or clang 16+ (Debian 12's clang 14 lacks them).
#if defined(__x86_64__) && (!defined(__clang__) || __clang_major__ >= 16)
bool cpu_has_avx512fp16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 16)) != 0 && (d & (1u << 23)) != 0;  // AVX512F, AVX512-FP16
}

__attribute__((target("avx512fp16,avx512vl,avx512f"))) uint16_t fma_f16_hardware(uint16_t a,
                                                                                 uint16_t b,
                                                                                 uint16_t c) {
  const __m128h va = _mm_castsi128_ph(_mm_cvtsi32_si128(a));
  const __m128h vb = _mm_castsi128_ph(_mm_cvtsi32_si128(b));
  const __m128h vc = _mm_castsi128_ph(_mm_cvtsi32_si128(c));
  return static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_castph_si128(_mm_fmadd_sh(va, vb, vc))));
}

// The twin: on a CPU with AVX512-FP16 the instruction llama.cpp's build uses gives the
// same bits for every pair of inputs tried.
TEST(Fp16, FmaEqualsAvx512Fp16Instruction_bitwise) {
  if (!cpu_has_avx512fp16()) GTEST_SKIP() << "CPU lacks AVX512-FP16";
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> any(0, 0xffff);
  for (int i = 0; i < 300000; ++i) {
    const bool narrow = i % 2 == 0;
    const uint16_t a = i % 5 == 4 ? static_cast<uint16_t>(any(rng))
                                  : random_finite_half(rng, narrow ? 12 : 0, narrow ? 17 : 30);
    const uint16_t b = random_finite_half(rng, narrow ? 12 : 0, narrow ? 17 : 30);
    const uint16_t c = random_finite_half(rng, narrow ? 10 : 0, narrow ? 18 : 30);
    const uint16_t hw = fma_f16_hardware(a, b, c);
    const uint16_t sw = fma_f16_exact(a, b, c);
    if ((hw & 0x7c00) == 0x7c00 && (hw & 0x3ff) != 0) {
      ASSERT_EQ(sw & 0x7c00, 0x7c00) << std::hex << a << " " << b << " " << c;  // NaN
      ASSERT_NE(sw & 0x3ff, 0) << std::hex << a << " " << b << " " << c;
    } else {
      ASSERT_EQ(sw, hw) << std::hex << a << " " << b << " " << c;
    }
  }
}
#endif

TEST(Bf16, RoundsToNearestEvenAndQuietsNan) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f808000u)), 0x3f80);  // tie → even
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f818000u)), 0x3f82);  // tie → even (up)
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x7f800001u)) & 0x7fc0, 0x7fc0);
}

TEST(DType, TableMatchesGgmlSizes) {
  EXPECT_EQ(dtype_info(DType::kQ4_0).type_size, 18u);
  EXPECT_EQ(dtype_info(DType::kQ4_K).type_size, 144u);
  EXPECT_EQ(dtype_info(DType::kQ6_K).type_size, 210u);
  EXPECT_EQ(dtype_info(DType::kQ6_K).block_size, 256u);
  EXPECT_FALSE(dtype_info(4u).has_value());  // ids 4 and 5 were removed from ggml
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::kQ4_K);
  EXPECT_EQ(dtype_from_name("bf16"), DType::kBF16);
  EXPECT_FALSE(dtype_from_name("q9_9").has_value());
}

TEST(Utf8, EncodeThenStrictScanRoundTripsEveryScalarValue) {
  for (uint32_t cp = 0; cp <= utf8::kMaxCodePoint; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = utf8::encode(cp);
    ASSERT_EQ(s.size(), cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u) << cp;
    size_t len = 0;
    uint32_t back = 0;
    ASSERT_EQ(utf8::scan(reinterpret_cast<const unsigned char*>(s.data()), s.size(), len, back),
              utf8::Scan::kValid)
        << cp;
    ASSERT_EQ(len, s.size());
    ASSERT_EQ(back, cp);
    ASSERT_EQ(utf8::lead_length(static_cast<uint8_t>(s[0])), s.size());
  }
}

TEST(Utf8, StrictScanReportsMaximalIllFormedSubpartsAndTruncation) {
  auto kind = [](std::string_view s, size_t* len_out = nullptr) {
    size_t len = 0;
    uint32_t cp = 0;
    const auto k = utf8::scan(reinterpret_cast<const unsigned char*>(s.data()), s.size(), len, cp);
    if (len_out) *len_out = len;
    return k;
  };
  size_t len = 0;
  EXPECT_EQ(kind("\xC0\x80", &len), utf8::Scan::kInvalid);  // overlong lead
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(kind("\xE0\x80\x80", &len), utf8::Scan::kInvalid);  // overlong 3-byte form
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(kind("\xED\xA0\x80", &len), utf8::Scan::kInvalid);  // a surrogate
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(kind("\xF4\x90\x80\x80", &len), utf8::Scan::kInvalid);  // past U+10FFFF
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(kind("\xE4\xB8x", &len), utf8::Scan::kInvalid);  // two good bytes, then not
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(kind("\xF5", &len), utf8::Scan::kInvalid);
  EXPECT_EQ(kind("\xE4\xB8"), utf8::Scan::kTruncated);
  EXPECT_EQ(kind("\xF0\x9F\x99"), utf8::Scan::kTruncated);
  EXPECT_TRUE(utf8::is_valid("a\xC3\xA9\xE4\xB8\x96\xF0\x9F\x99\x82"));
  EXPECT_FALSE(utf8::is_valid("a\xC3"));
  EXPECT_FALSE(utf8::is_valid("\xED\xBF\xBF"));
  EXPECT_TRUE(utf8::is_valid(""));
}

TEST(Utf8, IncompleteTailCountsOnlyBytesThatCanStillComplete) {
  EXPECT_EQ(utf8::incomplete_tail(""), 0u);
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x99"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x99\x82"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xC3"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("\x80\x80\x80\x80"), 0u);  // can never complete
}

TEST(Utf8, LeadLengthIsLlamaCppsNibbleTable) {
  EXPECT_EQ(utf8::lead_length(0x41), 1u);
  EXPECT_EQ(utf8::lead_length(0x80), 1u);  // a stray continuation byte
  EXPECT_EQ(utf8::lead_length(0xC0), 2u);
  EXPECT_EQ(utf8::lead_length(0xEF), 3u);
  EXPECT_EQ(utf8::lead_length(0xF8), 4u);
  EXPECT_EQ(utf8::lead_length(0xFF), 4u);
}

}  // namespace
}  // namespace minfer
