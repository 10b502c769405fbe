// Stage 3 tests: our reference quantizers and dequantizers reproduce llama.cpp's bytes
// and floats bit for bit, on synthetic distributions and on slices of real weights.
// Invariant: goldens come from ggml itself (tools/quant_goldens/regenerate.sh); a
// failure prints the first differing case, block and byte/element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "quant/quant.h"
#include "tests/quant/goldens.h"

namespace minfer {
// Readable parameters in gtest output.
void PrintTo(DType t, std::ostream* os) {
  *os << dtype_name(t);
}
namespace quant {
namespace {

using test::GoldenInput;
using test::GoldenType;

const std::vector<DType> kGoldenTypes = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
    DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K,
};

const std::vector<GoldenInput>& inputs() {
  static const std::vector<GoldenInput> in = [] {
    auto r = test::read_inputs();
    MINFER_CHECK(r.ok(), "%s", r.ok() ? "" : r.error().message.c_str());
    return std::move(r).value();
  }();
  return in;
}

class QuantGolden : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    auto r = test::read_type(std::string(dtype_name(GetParam())) + ".bin");
    ASSERT_TRUE(r.ok()) << r.error().message;
    golden_ = std::move(r).value();
    ASSERT_EQ(golden_.type_id, static_cast<uint32_t>(GetParam()));
    ASSERT_EQ(golden_.cases.size(), inputs().size());
    for (size_t i = 0; i < inputs().size(); ++i) {
      ASSERT_EQ(golden_.cases[i].name, inputs()[i].name);
      ASSERT_EQ(golden_.cases[i].n, inputs()[i].x.size());
    }
  }
  GoldenType golden_;
};

TEST_P(QuantGolden, QuantizeMatchesGgml_bitwise) {
  const TypeTraits* t = traits(GetParam());
  ASSERT_NE(t, nullptr);
  size_t checked_bytes = 0;
  for (size_t c = 0; c < inputs().size(); ++c) {
    const auto& in = inputs()[c];
    const auto& want = golden_.cases[c].bytes;
    std::vector<uint8_t> got(want.size(), 0xAA);  // poison: every byte must be written
    ASSERT_TRUE(quantize(GetParam(), in.x, got).ok());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "case " << in.name << ": first differing byte " << i
                                 << " (block " << i / t->type_size << ", byte " << i % t->type_size
                                 << " of " << t->type_size << ")";
    }
    checked_bytes += want.size();
  }
  RecordProperty("checked_bytes", std::to_string(checked_bytes));
}

TEST_P(QuantGolden, DequantizeMatchesGgml_bitwise) {
  const TypeTraits* t = traits(GetParam());
  ASSERT_NE(t, nullptr);
  for (const auto& gc : golden_.cases) {
    std::vector<float> got(gc.n);
    ASSERT_TRUE(dequantize(GetParam(), gc.bytes, got).ok());
    for (size_t i = 0; i < gc.n; ++i) {
      // Compare bit patterns: -0.0 vs 0.0 and NaN payloads count.
      ASSERT_EQ(fp32_to_bits(got[i]), fp32_to_bits(gc.deq[i]))
          << "case " << gc.name << ": first differing element " << i << " (block "
          << i / t->block_size << "): ours " << got[i] << ", ggml " << gc.deq[i];
    }
  }
}

// Arbitrary bytes (random scales, signs, high bits; NaN/Inf scales included) decode to
// ggml's floats too — the layouts, not only the quantizers' outputs, are right.
TEST_P(QuantGolden, DequantizeRandomBytesMatchesGgml_bitwise) {
  auto r = test::read_random();
  ASSERT_TRUE(r.ok()) << r.error().message;
  const test::GoldenCase* gc = nullptr;
  for (const auto& [id, c] : *r) {
    if (id == static_cast<uint32_t>(GetParam())) gc = &c;
  }
  ASSERT_NE(gc, nullptr) << "no random-bytes golden for " << dtype_name(GetParam());
  std::vector<float> got(gc->n);
  ASSERT_TRUE(dequantize(GetParam(), gc->bytes, got).ok());
  const uint32_t block_size = traits(GetParam())->block_size;
  for (size_t i = 0; i < gc->n; ++i) {
    ASSERT_EQ(fp32_to_bits(got[i]), fp32_to_bits(gc->deq[i]))
        << "first differing element " << i << " (block " << i / block_size << "): ours " << got[i]
        << ", ggml " << gc->deq[i];
  }
}

std::string type_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantGolden, ::testing::ValuesIn(kGoldenTypes), type_param_name);

TEST(QuantGoldenFiles, CoverEveryTypeWithTraits) {
  // Every type in the traits table has goldens, and the inputs include real weights.
  for (DType t : kGoldenTypes) EXPECT_NE(traits(t), nullptr) << dtype_name(t);
  size_t real = 0;
  for (const auto& in : inputs()) real += in.name.rfind("real:", 0) == 0 ? 1 : 0;
  EXPECT_GE(real, 5u);
  EXPECT_GE(inputs().size(), 15u);
}

}  // namespace
}  // namespace quant
}  // namespace minfer
