// Stage 3 tests: the traits table and the checked quantize/dequantize doors.
// Invariant: geometry comes from core's dtype table; size mismatches, unknown types
// and misaligned blocks are errors, never silent truncation.
#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer::quant {
namespace {

TEST(QuantTraits, GeometryEqualsDtypeTable) {
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                         DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                         DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};
  for (DType t : types) {
    const TypeTraits* tt = traits(t);
    ASSERT_NE(tt, nullptr) << dtype_name(t);
    EXPECT_EQ(tt->type, t);
    EXPECT_EQ(tt->block_size, dtype_info(t).block_size) << dtype_name(t);
    EXPECT_EQ(tt->type_size, dtype_info(t).type_size) << dtype_name(t);
    EXPECT_NE(tt->dequantize, nullptr);
    EXPECT_NE(tt->quantize_ref, nullptr);
  }
  EXPECT_EQ(sizeof(BlockQ4_K), dtype_info(DType::kQ4_K).type_size);
}

TEST(QuantTraits, UnsupportedTypesHaveNoTraits) {
  EXPECT_EQ(traits(DType::kQ8_1), nullptr);
  EXPECT_EQ(traits(DType::kIQ2_XXS), nullptr);
  EXPECT_EQ(traits(DType::kI32), nullptr);
  std::vector<float> out(32);
  std::vector<uint8_t> in(18);
  auto st = dequantize(DType::kIQ4_NL, in, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("iq4_nl"), std::string::npos) << st.error().message;
}

TEST(QuantApi, RejectsPartialBlocksAndWrongSizes) {
  std::vector<float> x(48, 1.0f);
  std::vector<uint8_t> q(36);
  auto partial = quantize(DType::kQ4_0, x, q);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.error().message.find("48 elements"), std::string::npos)
      << partial.error().message;

  std::vector<float> x64(64, 1.0f);
  std::vector<uint8_t> small(35);
  EXPECT_FALSE(quantize(DType::kQ4_0, x64, small).ok());
  std::vector<uint8_t> exact(36);
  EXPECT_TRUE(quantize(DType::kQ4_0, x64, exact).ok());
  std::vector<float> y(63);
  EXPECT_FALSE(dequantize(DType::kQ4_0, exact, y).ok());
}

TEST(QuantApi, RowBytesIsBlocksTimesTypeSize) {
  auto r = row_bytes(DType::kQ6_K, 4096);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 16u * 210u);
  EXPECT_FALSE(row_bytes(DType::kQ6_K, 4000).ok());
  EXPECT_EQ(*row_bytes(DType::kBF16, 3), 6u);
}

TEST(QuantApi, RejectsMisalignedBlocks) {
  std::vector<uint8_t> buf(18 + 1);
  std::vector<float> y(32);
  auto st = dequantize(DType::kQ4_0, std::span<const uint8_t>(buf).subspan(1), y);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("aligned"), std::string::npos) << st.error().message;
  // Element-wise formats have no alignment requirement.
  std::vector<uint8_t> h(2 * 32 + 1);
  EXPECT_TRUE(dequantize(DType::kF16, std::span<const uint8_t>(h).subspan(1), y).ok());
}

}  // namespace
}  // namespace minfer::quant
