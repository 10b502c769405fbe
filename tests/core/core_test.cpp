// Stage 1 tests: Result propagation, overflow-safe arithmetic, fp16/bf16 conversions
// and the dtype table.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/result.h"

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

}  // namespace
}  // namespace minfer
