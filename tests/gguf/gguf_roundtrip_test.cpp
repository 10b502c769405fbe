// Stage 2 tests: writer → reader round trips (every value type, nested arrays, every
// tensor type, alignment) and Value::to_display.
// Bar: values and tensor bytes come back bit-identical; offsets respect alignment.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gguf/gguf.h"
#include "test_util.h"

namespace minfer::gguf {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<uint8_t>((k * 131 + seed * 7 + 3) ^ (k >> 3));
  return out;
}

std::vector<KeyValue> every_value_type() {
  return {
      {"u8", Value::u8(200)},
      {"i8", Value::i8(-100)},
      {"u16", Value::u16(60000)},
      {"i16", Value::i16(-30000)},
      {"u32", Value::u32(4000000000u)},
      {"i32", Value::i32(std::numeric_limits<int32_t>::min())},
      {"u64", Value::u64(std::numeric_limits<uint64_t>::max())},
      {"i64", Value::i64(std::numeric_limits<int64_t>::min())},
      {"f32", Value::f32(-0.0f)},
      {"f32.denorm", Value::f32(std::numeric_limits<float>::denorm_min())},
      {"f32.inf", Value::f32(std::numeric_limits<float>::infinity())},
      {"f64", Value::f64(1.0 / 3.0)},
      {"bool.t", Value::boolean(true)},
      {"bool.f", Value::boolean(false)},
      {"str", Value::string(std::string("with\0nul and ünïcode", 21))},
      {"str.empty", Value::string("")},
      {"arr.u8", Value::arr(ValueType::kUint8, {Value::u8(1), Value::u8(255)})},
      {"arr.i8", Value::arr(ValueType::kInt8, {Value::i8(-1)})},
      {"arr.u16", Value::arr(ValueType::kUint16, {Value::u16(7)})},
      {"arr.i16", Value::arr(ValueType::kInt16, {Value::i16(-7)})},
      {"arr.u32", Value::arr(ValueType::kUint32, {Value::u32(9), Value::u32(10)})},
      {"arr.i32", Value::i32_array({-5, 6})},
      {"arr.u64", Value::arr(ValueType::kUint64, {Value::u64(1ull << 40)})},
      {"arr.i64", Value::arr(ValueType::kInt64, {Value::i64(-(1ll << 40))})},
      {"arr.f32", Value::f32_array({0.5f, 1e30f})},
      {"arr.f64", Value::arr(ValueType::kFloat64, {Value::f64(2.5)})},
      {"arr.bool", Value::arr(ValueType::kBool, {Value::boolean(false), Value::boolean(true)})},
      {"arr.str", Value::string_array({"x", "", "yz"})},
      {"arr.empty", Value::arr(ValueType::kString, {})},
      {"arr.nested",
       Value::arr(ValueType::kArray, {Value::string_array({"a"}), Value::string_array({}),
                                      Value::string_array({"b", "c"})})},
      {"arr.nested3",
       Value::arr(ValueType::kArray, {Value::arr(ValueType::kArray, {Value::f32_array({1.0f}),
                                                                     Value::f32_array({})})})},
  };
}

TEST(GgufRoundTrip, EveryValueType_exact) {
  Writer w;
  const auto kvs = every_value_type();
  for (const auto& kv : kvs) w.set(kv.key, kv.value);
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;
  auto f = File::parse(*bytes, "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->version(), 3u);
  ASSERT_EQ((*f)->metadata().size(), kvs.size());
  for (size_t k = 0; k < kvs.size(); ++k) {
    const KeyValue& got = (*f)->metadata()[k];
    EXPECT_EQ(got.key, kvs[k].key);  // insertion order is kept
    EXPECT_EQ(got.value, kvs[k].value) << got.key << ": " << got.value.to_display();
    EXPECT_EQ((*f)->find(kvs[k].key), &got.value);
  }
  EXPECT_TRUE(std::signbit((*f)->find("f32")->f));
  EXPECT_EQ((*f)->find("missing"), nullptr);
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufRoundTrip, SetReplacesInPlace_keepsOrder) {
  Writer w;
  w.set("a", Value::u32(1));
  w.set("b", Value::u32(2));
  w.set("a", Value::string("x"));
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok());
  auto f = File::parse(*bytes, "mem");
  ASSERT_TRUE(f.ok());
  ASSERT_EQ((*f)->metadata().size(), 2u);
  EXPECT_EQ((*f)->metadata()[0].key, "a");
  EXPECT_EQ((*f)->metadata()[0].value.str, "x");
}

class GgufEveryTensorType : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufEveryTensorType, EveryTensorType_bytesIdentical) {
  const uint64_t alignment = GetParam();
  Writer w;
  if (alignment != kDefaultAlignment) w.set_alignment(alignment);
  w.set("general.architecture", Value::string("test"));
  struct Added {
    std::string name;
    DType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
  };
  std::vector<Added> added;
  uint32_t seed = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    auto info = dtype_info(id);
    if (!info) continue;
    Added a{"t." + std::string(info->name), info->type, {2ull * info->block_size, 3}, {}};
    if (id % 3 == 1) a.dims.push_back(1);  // vary the rank
    if (id % 5 == 2) a.dims = {info->block_size};
    auto n = tensor_nbytes(a.type, a.dims);
    ASSERT_TRUE(n.ok());
    a.data = pattern(n.value(), ++seed);
    ASSERT_TRUE(w.add_tensor(a.name, a.type, a.dims, a.data).ok());
    added.push_back(std::move(a));
  }
  ASSERT_EQ(added.size(), 32u);  // the whole ggml type table
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;
  auto f = File::parse(*bytes, "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->alignment(), alignment);
  EXPECT_EQ((*f)->data_offset() % alignment, 0u);
  ASSERT_EQ((*f)->tensors().size(), added.size());
  uint64_t expected_offset = 0;
  for (size_t k = 0; k < added.size(); ++k) {
    const TensorInfo& t = (*f)->tensors()[k];
    EXPECT_EQ(t.name, added[k].name);
    EXPECT_EQ(t.type, added[k].type);
    EXPECT_EQ(t.dims, added[k].dims);
    EXPECT_EQ(t.n_bytes, added[k].data.size());
    EXPECT_EQ(t.offset, expected_offset);
    EXPECT_EQ(t.offset % alignment, 0u);
    uint64_t ne = 1;
    for (uint64_t d : t.dims) ne *= d;
    EXPECT_EQ(t.n_elements, ne);
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(t.data, bytes->data() + (*f)->data_offset() + t.offset);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), added[k].data) << t.name;
    EXPECT_EQ((*f)->find_tensor(t.name), &t);
    expected_offset += (t.n_bytes + alignment - 1) / alignment * alignment;
  }
  EXPECT_EQ(bytes->size(), (*f)->data_offset() + expected_offset);  // last tensor padded too
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufEveryTensorType, ::testing::Values(32, 1, 8, 64, 4096));

TEST(GgufRoundTrip, FileOpen_mapsAndMatchesParse) {
  const std::string dir = testing::temp_dir();
  ASSERT_FALSE(dir.empty());
  Writer w;
  w.set("k", Value::u32(7));
  std::vector<uint8_t> data = pattern(4 * 10, 3);
  ASSERT_TRUE(w.add_tensor("w", DType::kF32, {10}, data).ok());
  const std::string path = dir + "/one.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->name(), path);
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*f)->file_size(), bytes->size());
  const TensorInfo* t = (*f)->find_tensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), data);
}

TEST(GgufRoundTrip, Version2_accepted) {
  // v2 and v3 share the layout (v3 only added big-endian files).
  testing::RawGguf g;
  g.header(1, 1, 2).kv_u32("a", 5).tensor("t", {4}, 0, 0).pad(32).zeros(16);
  auto f = File::parse(g.b, "v2.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->data_offset(), 96u);  // 74 header bytes, aligned to 32
}

TEST(GgufRoundTrip, ZeroSizedDim_acceptedAsEmptyTensor) {
  // ggml accepts a dim of 0 (an empty tensor); so do we.
  testing::RawGguf g;
  g.header(2, 0).tensor("empty", {0, 5}, 0, 0).tensor("one", {1}, 0, 0).pad(32).zeros(4);
  auto f = File::parse(g.b, "zero.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->tensors()[0].n_elements, 0u);
  EXPECT_EQ((*f)->tensors()[0].n_bytes, 0u);
}

TEST(GgufRoundTrip, WriterRejectsBadInput_withMessage) {
  Writer w;
  std::vector<uint8_t> four(4);
  EXPECT_FALSE(w.add_tensor("", DType::kF32, {1}, four).ok());
  EXPECT_FALSE(w.add_tensor(std::string(64, 'x'), DType::kF32, {1}, four).ok());
  EXPECT_FALSE(w.add_tensor("bad\xff", DType::kF32, {1}, four).ok());
  EXPECT_FALSE(w.add_tensor("five", DType::kF32, {1, 1, 1, 1, 1}, four).ok());
  auto wrong = w.add_tensor("q", DType::kQ4_0, {31}, four);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("block size"), std::string::npos);
  auto size = w.add_tensor("f", DType::kF32, {2}, four);
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.error().message.find("bytes of data"), std::string::npos);
  ASSERT_TRUE(w.add_tensor("ok", DType::kF32, {1}, four).ok());
  EXPECT_FALSE(w.add_tensor("ok", DType::kF32, {1}, four).ok());  // duplicate
  w.set("", Value::u8(1));
  EXPECT_FALSE(w.to_bytes().ok());
  Writer w2;
  w2.set("general.alignment", Value::u64(32));
  auto b2 = w2.to_bytes();
  ASSERT_FALSE(b2.ok());
  EXPECT_NE(b2.error().message.find("general.alignment"), std::string::npos);
  // An array holds one element type: a mixed one cannot be built, so none reaches a file.
  Value bad = Value::arr(ValueType::kUint8, {Value::u8(1)});
  EXPECT_DEATH(bad.array.push_back(Value::u16(2)), "array element #1 has type u16, array holds u8");
}

TEST(GgufRoundTrip, TensorNbytes_blocksAndOverflow) {
  EXPECT_EQ(tensor_nbytes(DType::kQ4_0, std::vector<uint64_t>{64, 2}).value(), 2u * 2 * 18);
  EXPECT_EQ(tensor_nbytes(DType::kQ6_K, std::vector<uint64_t>{256}).value(), 210u);
  EXPECT_EQ(tensor_nbytes(DType::kF16, std::vector<uint64_t>{3, 0}).value(), 0u);
  EXPECT_FALSE(tensor_nbytes(DType::kQ8_0, std::vector<uint64_t>{48}).ok());
  EXPECT_FALSE(tensor_nbytes(DType::kF32, std::vector<uint64_t>{1ull << 62}).ok());
  EXPECT_FALSE(tensor_nbytes(DType::kF32, std::vector<uint64_t>{1ull << 32, 1ull << 32}).ok());
}

TEST(GgufValue, ToDisplay_exactAndTruncated) {
  EXPECT_EQ(Value::u64(18446744073709551615ull).to_display(), "18446744073709551615");
  EXPECT_EQ(Value::i8(-5).to_display(), "-5");
  EXPECT_EQ(Value::f32(0.1f).to_display(), "0.1");
  EXPECT_EQ(Value::f64(0.1).to_display(), "0.1");
  EXPECT_EQ(Value::f32(1e6f).to_display(), "1000000");
  EXPECT_EQ(Value::boolean(true).to_display(), "true");
  EXPECT_EQ(Value::string("a\"b\\c\n\x01").to_display(), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_EQ(Value::i32_array({1, 2, 3}).to_display(), "[1, 2, 3]");
  EXPECT_EQ(Value::i32_array({1, 2, 3}).to_display(2), "[1, 2, ... (3 i32 total)]");
  EXPECT_EQ(Value::string_array({"a", "b"}).to_display(0), "[... (2 string total)]");
  EXPECT_EQ(
      Value::arr(ValueType::kArray, {Value::i32_array({1}), Value::i32_array({})}).to_display(),
      "[[1], []]");
  EXPECT_EQ(Value::arr(ValueType::kUint8, {}).to_display(), "[]");
}

}  // namespace
}  // namespace minfer::gguf
