// Stage 2 tests: Model — split models (open, consistency checks), typed getters.
// Bar: a split model opens to the same metadata and tensor bytes as the unsplit file;
// every inconsistency is an error naming the key and the part.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/gguf.h"
#include "test_util.h"

namespace minfer::gguf {
namespace {

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

Writer sample_writer(size_t n_tensors) {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("llama.block_count", Value::u32(2));
  for (size_t k = 0; k < n_tensors; ++k) {
    std::vector<uint8_t> data(4 * (k + 1));
    for (size_t j = 0; j < data.size(); ++j) data[j] = static_cast<uint8_t>(k * 17 + j);
    std::string name = "t";
    name += std::to_string(k);  // not "t" + ...: GCC 12 warns falsely (-Wrestrict)
    EXPECT_TRUE(w.add_tensor(name, DType::kF32, {k + 1}, data).ok());
  }
  return w;
}

class GgufSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir();
    ASSERT_FALSE(dir_.empty());
  }
  std::string dir_;
};

TEST_F(GgufSplit, ThreeParts_sameTensorsAsSingleFile) {
  Writer w = sample_writer(7);
  ASSERT_TRUE(w.write(dir_ + "/single.gguf").ok());
  ASSERT_TRUE(w.write_split(dir_ + "/m", 3).ok());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/m-00001-of-00003.gguf"));
  auto single = Model::open(dir_ + "/single.gguf");
  ASSERT_TRUE(single.ok()) << single.error().message;
  EXPECT_EQ(single->files().size(), 1u);
  for (int start = 1; start <= 3; ++start) {  // opening any part opens the whole model
    auto m = Model::open(dir_ + "/m-0000" + std::to_string(start) + "-of-00003.gguf");
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_EQ(m->files().size(), 3u);
    EXPECT_TRUE(m->primary().name().ends_with("m-00001-of-00003.gguf"));
    EXPECT_EQ(m->get_string("general.architecture").value(), "llama");
    EXPECT_EQ(m->get_u64("split.count").value(), 3u);
    ASSERT_EQ(m->tensors().size(), 7u);
    uint32_t last_part = 0;
    for (size_t k = 0; k < 7; ++k) {
      const TensorInfo& a = single->tensors()[k];
      const TensorInfo& b = m->tensors()[k];
      EXPECT_EQ(a.name, b.name);  // part order, then file order
      EXPECT_EQ(a.dims, b.dims);
      EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + a.n_bytes),
                std::vector<uint8_t>(b.data, b.data + b.n_bytes));
      EXPECT_GE(b.split_index, last_part);
      last_part = b.split_index;
      EXPECT_EQ(m->files()[b.split_index]->find_tensor(b.name)->data, b.data);
      EXPECT_EQ(m->find_tensor(b.name), &b);
    }
    EXPECT_EQ(last_part, 2u);
  }
}

TEST_F(GgufSplit, OnePartSplit_andPlainFileNamedLikeSplit) {
  Writer w = sample_writer(2);
  ASSERT_TRUE(w.write_split(dir_ + "/one", 1).ok());
  auto m = Model::open(dir_ + "/one-00001-of-00001.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->tensors().size(), 2u);
  ASSERT_TRUE(w.write(dir_ + "/plain-00001-of-00002.gguf").ok());  // no split keys
  auto p = Model::open(dir_ + "/plain-00001-of-00002.gguf");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->files().size(), 1u);
}

TEST_F(GgufSplit, MissingPart_errorNamesPart) {
  Writer w = sample_writer(4);
  ASSERT_TRUE(w.write_split(dir_ + "/m", 3).ok());
  std::filesystem::remove(dir_ + "/m-00002-of-00003.gguf");
  auto m = Model::open(dir_ + "/m-00001-of-00003.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "part 2 of 3")) << m.error().message;
  EXPECT_TRUE(contains(m.error().message, "m-00002-of-00003.gguf")) << m.error().message;
}

TEST_F(GgufSplit, WrongSplitNo_error) {
  Writer w = sample_writer(4);
  ASSERT_TRUE(w.write_split(dir_ + "/m", 2).ok());
  // Put part 1 where part 2 belongs: split.no 0 at index 1.
  std::filesystem::copy_file(dir_ + "/m-00001-of-00002.gguf", dir_ + "/m-00002-of-00002.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  auto m = Model::open(dir_ + "/m-00001-of-00002.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "split.no")) << m.error().message;
}

TEST_F(GgufSplit, WrongSplitCount_error) {
  Writer a = sample_writer(2);
  ASSERT_TRUE(a.write_split(dir_ + "/m", 2).ok());
  Writer b = sample_writer(0);
  b.set("split.no", Value::u16(1));
  b.set("split.count", Value::u16(3));
  ASSERT_TRUE(b.write(dir_ + "/m-00002-of-00002.gguf").ok());
  auto m = Model::open(dir_ + "/m-00001-of-00002.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "split.count")) << m.error().message;
}

TEST_F(GgufSplit, WrongTensorsCount_error) {
  Writer w = sample_writer(3);
  w.set("split.no", Value::u16(0));
  w.set("split.count", Value::u16(1));
  w.set("split.tensors.count", Value::i32(4));
  ASSERT_TRUE(w.write(dir_ + "/x.gguf").ok());
  auto m = Model::open(dir_ + "/x.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "split.tensors.count")) << m.error().message;
}

TEST_F(GgufSplit, DuplicateTensorAcrossParts_error) {
  Writer a = sample_writer(1);
  a.set("split.no", Value::u16(0));
  a.set("split.count", Value::u16(2));
  ASSERT_TRUE(a.write(dir_ + "/d-00001-of-00002.gguf").ok());
  a.set("split.no", Value::u16(1));
  ASSERT_TRUE(a.write(dir_ + "/d-00002-of-00002.gguf").ok());
  auto m = Model::open(dir_ + "/d-00001-of-00002.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "tensor 't0' is also in part 1")) << m.error().message;
}

TEST_F(GgufSplit, SplitKeysButBadFileName_error) {
  Writer w = sample_writer(1);
  w.set("split.no", Value::u16(0));
  w.set("split.count", Value::u16(2));
  ASSERT_TRUE(w.write(dir_ + "/renamed.gguf").ok());
  auto m = Model::open(dir_ + "/renamed.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "-00001-of-00002.gguf")) << m.error().message;
}

TEST_F(GgufSplit, MissingFile_errorNamesPath) {
  auto m = Model::open(dir_ + "/nope.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.error().message, "nope.gguf"));
}

class GgufGetters : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir();
    Writer w;
    w.set("s", Value::string("hello"));
    w.set("u8", Value::u8(7));
    w.set("i8.neg", Value::i8(-3));
    w.set("u64.big", Value::u64(~0ull));
    w.set("f32", Value::f32(0.5f));
    w.set("b", Value::boolean(true));
    w.set("strs", Value::string_array({"a", "b"}));
    w.set("f32s", Value::f32_array({1.0f, 2.5f}));
    w.set("i32s", Value::i32_array({-1, 2}));
    w.set("u32s", Value::arr(ValueType::kUint32, {Value::u32(5), Value::u32(4000000000u)}));
    w.set("u8s", Value::arr(ValueType::kUint8, {Value::u8(5)}));
    ASSERT_TRUE(w.write(dir_ + "/g.gguf").ok());
    auto m = Model::open(dir_ + "/g.gguf");
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::make_unique<Model>(std::move(m).value());
  }
  std::string dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(GgufGetters, Values_exact) {
  const Model& m = *model_;
  EXPECT_EQ(m.get_string("s").value(), "hello");
  EXPECT_EQ(m.get_u64("u8").value(), 7u);
  EXPECT_EQ(m.get_i64("u8").value(), 7);
  EXPECT_EQ(m.get_i64("i8.neg").value(), -3);
  EXPECT_EQ(m.get_u64("u64.big").value(), ~0ull);
  EXPECT_EQ(m.get_f64("f32").value(), 0.5);
  EXPECT_EQ(m.get_f64("i8.neg").value(), -3.0);
  EXPECT_TRUE(m.get_bool("b").value());
  EXPECT_EQ(m.get_string_array("strs").value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.get_f32_array("f32s").value(), (std::vector<float>{1.0f, 2.5f}));
  EXPECT_EQ(m.get_i32_array("i32s").value(), (std::vector<int32_t>{-1, 2}));
  EXPECT_EQ(m.get_i32_array("u8s").value(), (std::vector<int32_t>{5}));
  EXPECT_TRUE(m.has("s"));
  EXPECT_FALSE(m.has("nope"));
}

TEST_F(GgufGetters, Errors_nameKeyAndTypes) {
  const Model& m = *model_;
  auto expect_err = [](const auto& r, std::vector<std::string> parts) {
    ASSERT_FALSE(r.ok());
    for (const auto& p : parts) EXPECT_TRUE(contains(r.error().message, p)) << r.error().message;
  };
  expect_err(m.get_string("nope"), {"'nope'", "not found"});
  expect_err(m.get_string("u8"), {"'u8'", "type u8", "expected string"});
  expect_err(m.get_u64("s"), {"'s'", "type string", "integer"});
  expect_err(m.get_u64("i8.neg"), {"'i8.neg'", "-3"});
  expect_err(m.get_i64("u64.big"), {"'u64.big'", "int64"});
  expect_err(m.get_f64("b"), {"'b'", "type bool"});
  expect_err(m.get_bool("u8"), {"'u8'", "expected bool"});
  expect_err(m.get_string_array("f32s"), {"'f32s'", "array of f32", "array of string"});
  expect_err(m.get_f32_array("strs"), {"'strs'", "array of string"});
  expect_err(m.get_i32_array("u32s"), {"'u32s'", "element #1", "4000000000"});
  expect_err(m.get_i32_array("s"), {"'s'", "type string"});
}

}  // namespace
}  // namespace minfer::gguf
