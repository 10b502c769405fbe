// Stage 2 tests: a corpus of broken GGUF files built from valid ones — truncations
// at every header byte, hostile counts and lengths, bad types, offsets, names.
// Bar: each one is an error (never a crash, never a huge allocation) whose message
// names the offending field; run under ASan/UBSan in the asan-ubsan preset.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>

#include "gguf/gguf.h"
#include "test_util.h"

namespace minfer::gguf {
namespace {

using testing::RawGguf;

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

std::vector<uint8_t> valid_file() {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("a.u32", Value::u32(3));
  w.set("a.strs", Value::string_array({"x", "yy", "zzz"}));
  w.set("a.nested", Value::arr(ValueType::kArray, {Value::i32_array({1, 2})}));
  w.set("a.f64", Value::f64(2.5));
  std::vector<uint8_t> d1(4 * 8, 1), d2(2 * 18, 2), d3(2 * 3, 3);
  EXPECT_TRUE(w.add_tensor("t.f32", DType::kF32, {8}, d1).ok());
  EXPECT_TRUE(w.add_tensor("t.q40", DType::kQ4_0, {32, 2}, d2).ok());
  EXPECT_TRUE(w.add_tensor("t.f16", DType::kF16, {3}, d3).ok());
  return w.to_bytes().value();
}

TEST(GgufMalformed, ValidBase_parses) {
  auto b = valid_file();
  auto f = File::parse(b, "base");
  ASSERT_TRUE(f.ok()) << f.error().message;
}

TEST(GgufMalformed, TruncatedEverywhere_errorsNamingByteOffset) {
  const auto b = valid_file();
  auto full = File::parse(b, "base");
  ASSERT_TRUE(full.ok());
  const TensorInfo& last = (*full)->tensors().back();
  const size_t data_end = (*full)->data_offset() + last.offset + last.n_bytes;
  size_t n_cases = 0;
  // Every byte of the header (magic .. data section start), then every 3rd byte of
  // the data up to the end of the last tensor's bytes (its padding is optional).
  for (size_t cut = 0; cut < data_end; cut += cut < (*full)->data_offset() ? 1 : 3) {
    std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<ptrdiff_t>(cut));
    auto f = File::parse(t, "cut.gguf");
    ASSERT_FALSE(f.ok()) << "truncated at " << cut << " parsed";
    const std::string& m = f.error().message;
    EXPECT_TRUE(contains(m, "cut.gguf: ")) << m;
    EXPECT_TRUE(contains(m, "end of file") || contains(m, "file ends at byte") ||
                contains(m, "remain"))
        << "cut at " << cut << ": " << m;
    ++n_cases;
  }
  EXPECT_GT(n_cases, 200u);
  // Cutting only the final padding leaves a valid file.
  std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<ptrdiff_t>(data_end));
  EXPECT_TRUE(File::parse(t, "cut.gguf").ok());
}

struct Case {
  std::string name;
  std::function<RawGguf()> build;
  std::vector<std::string> expect;  // substrings of the error message
};

RawGguf one_tensor_file(const std::function<void(RawGguf&)>& tensor_info, size_t data = 64) {
  RawGguf g;
  g.header(1, 0);
  tensor_info(g);
  g.pad(32).zeros(data);
  return g;
}

std::vector<Case> corpus() {
  constexpr uint64_t kHuge = std::numeric_limits<uint64_t>::max();
  std::vector<Case> c;
  c.push_back({"bad_magic",
               [] { return RawGguf().u32(0x46554746).u32(3).u64(0).u64(0); },
               {"magic", "byte 0"}});
  c.push_back(
      {"ggml_magic", [] { return RawGguf().u32(0x67676d6c).u32(3).u64(0).u64(0); }, {"magic"}});
  c.push_back({"version_0", [] { return RawGguf().header(0, 0, 0); }, {"version", "byte 4"}});
  c.push_back({"version_1", [] { return RawGguf().header(0, 0, 1); }, {"version", "v1"}});
  c.push_back({"version_4", [] { return RawGguf().header(0, 0, 4); }, {"version", "4"}});
  c.push_back(
      {"big_endian", [] { return RawGguf().header(0, 0, 0x03000000); }, {"version", "big-endian"}});
  c.push_back(
      {"huge_tensor_count", [] { return RawGguf().header(kHuge, 0); }, {"tensor count", "byte 8"}});
  c.push_back({"tensor_count_past_eof",
               [] { return RawGguf().header(1000, 0).zeros(100); },
               {"tensor count 1000"}});
  c.push_back({"huge_kv_count",
               [] { return RawGguf().header(0, 1ull << 60); },
               {"key/value count", "byte 16"}});
  c.push_back({"key_length_huge",
               [] { return RawGguf().header(0, 1).u64(kHuge).zeros(16); },
               {"metadata key #0", "key length", "limit"}});
  c.push_back({"key_length_past_eof",
               [] { return RawGguf().header(0, 1).u64(1000).zeros(16); },
               {"key length 1000", "past end of file"}});
  c.push_back(
      {"key_empty", [] { return RawGguf().header(0, 1).str("").u32(4).u32(1); }, {"key is empty"}});
  c.push_back({"key_invalid_utf8",
               [] { return RawGguf().header(0, 1).kv_u32("a\xff", 1); },
               {"key", "UTF-8"}});
  c.push_back({"key_overlong_utf8",
               [] { return RawGguf().header(0, 1).kv_u32("\xc0\x80", 1); },
               {"UTF-8"}});
  c.push_back({"key_surrogate_utf8",
               [] { return RawGguf().header(0, 1).kv_u32("\xed\xa0\x80", 1); },
               {"UTF-8"}});
  c.push_back({"duplicate_key",
               [] { return RawGguf().header(0, 2).kv_u32("k", 1).kv_u32("k", 2); },
               {"metadata key #1 'k'", "duplicate key"}});
  c.push_back({"unknown_value_type",
               [] { return RawGguf().header(0, 1).str("k").u32(13).u64(0); },
               {"'k'", "value type 13"}});
  c.push_back({"unknown_value_type_max",
               [] { return RawGguf().header(0, 1).str("k").u32(0xFFFFFFFF).u64(0); },
               {"value type 4294967295"}});
  c.push_back({"array_unknown_elem_type",
               [] { return RawGguf().header(0, 1).str("k").u32(9).u32(99).u64(1).u32(0); },
               {"'k'", "array element type 99"}});
  c.push_back({"array_count_huge",
               [] { return RawGguf().header(0, 1).str("k").u32(9).u32(0).u64(kHuge).zeros(8); },
               {"'k'", "array count", "limit"}});
  c.push_back({"array_count_past_eof",
               [] { return RawGguf().header(0, 1).str("k").u32(9).u32(4).u64(1000).zeros(64); },
               {"'k'", "array count 1000", "remain"}});
  c.push_back({"string_array_count_past_eof",
               [] { return RawGguf().header(0, 1).str("k").u32(9).u32(8).u64(1u << 29).zeros(64); },
               {"array count 536870912", "string"}});
  c.push_back(
      {"array_elem_string_past_eof",
       [] {
         return RawGguf().header(0, 1).str("k").u32(9).u32(8).u64(2).str("ok").u64(500).zeros(8);
       },
       {"'k'", "value[1] length 500", "past end of file"}});
  c.push_back({"string_value_over_limit",
               [] { return RawGguf().header(0, 1).str("k").u32(8).u64(1ull << 40).zeros(8); },
               {"'k'", "value length 1099511627776", "limit"}});
  c.push_back({"tensor_name_over_limit",
               [] { return RawGguf().header(1, 0).u64(1ull << 33).zeros(40); },
               {"tensor info #0", "tensor name length", "limit"}});
  c.push_back({"string_value_past_eof",
               [] { return RawGguf().header(0, 1).str("k").u32(8).u64(1000).zeros(8); },
               {"'k'", "value length", "past end of file"}});
  c.push_back({"nested_too_deep",
               [] {
                 RawGguf g;
                 g.header(0, 1).str("k").u32(9);
                 for (int k = 0; k < 100; ++k) g.u32(9).u64(1);
                 return g.u32(4).u64(0);
               },
               {"'k'", "nested more than 64"}});
  c.push_back({"scalar_past_eof",
               [] { return RawGguf().header(0, 1).str("k").u32(10).u32(1); },
               {"'k'", "value at byte", "needs 8 bytes"}});
  c.push_back({"alignment_zero",
               [] { return RawGguf().header(0, 1).kv_u32("general.alignment", 0); },
               {"general.alignment", "power of two"}});
  c.push_back({"alignment_not_pow2",
               [] { return RawGguf().header(0, 1).kv_u32("general.alignment", 48); },
               {"general.alignment", "48"}});
  c.push_back({"alignment_past_limit",  // a power of two, but 2 GiB of padding per tensor
               [] { return RawGguf().header(0, 1).kv_u32("general.alignment", 1u << 31); },
               {"general.alignment", "2147483648", "past the limit of 1048576 bytes"}});
  c.push_back({"alignment_wrong_type",
               [] { return RawGguf().header(0, 1).str("general.alignment").u32(10).u64(32); },
               {"general.alignment", "u32", "u64"}});
  c.push_back({"alignment_string",
               [] { return RawGguf().header(0, 1).kv_str("general.alignment", "32"); },
               {"general.alignment", "string"}});
  c.push_back({"tensor_name_empty",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("", {4}, 0, 0); }); },
               {"tensor info #0", "tensor name is empty"}});
  c.push_back({"tensor_name_invalid_utf8",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("w\x80", {4}, 0, 0); }); },
               {"tensor info #0", "tensor name", "UTF-8"}});
  c.push_back({"tensor_name_too_long",
               [] {
                 return one_tensor_file(
                     [](RawGguf& g) { g.tensor(std::string(64, 'n'), {4}, 0, 0); });
               },
               {"tensor name", "64 bytes", "63"}});
  c.push_back({"tensor_name_nul",
               [] {
                 return one_tensor_file(
                     [](RawGguf& g) { g.tensor(std::string("a\0b", 3), {4}, 0, 0); });
               },
               {"tensor name", "NUL"}});
  c.push_back({"tensor_name_past_eof",
               [] { return RawGguf().header(1, 0).u64(1000).zeros(40); },
               {"tensor info #0", "tensor name length", "past end of file"}});
  c.push_back({"duplicate_tensor_name",
               [] {
                 RawGguf g;
                 g.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).zeros(64);
                 return g;
               },
               {"tensor 'w' (tensor info #1", "duplicate tensor name"}});
  c.push_back({"n_dims_0",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {}, 0, 0); }); },
               {"tensor 'w'", "n_dims 0"}});
  c.push_back({"n_dims_5",
               [] {
                 return one_tensor_file([](RawGguf& g) { g.tensor("w", {1, 1, 1, 1, 1}, 0, 0); });
               },
               {"tensor 'w'", "n_dims 5"}});
  c.push_back(
      {"n_dims_huge",
       [] { return one_tensor_file([](RawGguf& g) { g.str("w").u32(0xFFFFFFFF).u64(4); }); },
       {"n_dims 4294967295"}});
  c.push_back({"dim_negative",
               [] {
                 return one_tensor_file([](RawGguf& g) { g.tensor("w", {4, 1ull << 63}, 0, 0); });
               },
               {"tensor 'w'", "dim 1", "INT64_MAX"}});
  c.push_back({"elements_overflow",
               [] {
                 return one_tensor_file([](RawGguf& g) {
                   g.tensor("w", {1ull << 32, 1ull << 32, 1ull << 32}, 0, 0);
                 });
               },
               {"tensor 'w'", "element count", "overflows"}});
  c.push_back({"elements_int64_max",
               [] {
                 return one_tensor_file([](RawGguf& g) { g.tensor("w", {1ull << 62, 2}, 1, 0); });
               },
               {"tensor 'w'", "element count"}});
  c.push_back(
      {"bytes_overflow",
       [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {1ull << 62}, 0, 0); }); },
       {"tensor 'w'", "byte size", "overflows"}});
  c.push_back({"tensor_type_removed_q4_2",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {32}, 4, 0); }); },
               {"tensor 'w'", "tensor type 4", "not a known ggml type"}});
  c.push_back({"tensor_type_huge",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {32}, 1000, 0); }); },
               {"tensor type 1000"}});
  c.push_back({"ne0_not_block_multiple",
               [] { return one_tensor_file([](RawGguf& g) {
                      g.tensor("w", {33, 2}, 2, 0);
                    }); },
               {"tensor 'w'", "ne[0] = 33", "block size 32"}});
  c.push_back({"offset_misaligned",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {4}, 0, 1); }); },
               {"tensor 'w'", "offset 0x1", "alignment 32"}});
  c.push_back(
      {"offset_past_eof",
       [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {4}, 0, 1ull << 20); }); },
       {"tensor 'w' (tensor info #0 at byte 24)", "offset 0x100000", "past end of file"}});
  c.push_back(
      {"offset_wraps",
       [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {4}, 0, kHuge - 31); }); },
       {"tensor 'w'", "past end of file"}});
  c.push_back({"data_past_eof",
               [] { return one_tensor_file([](RawGguf& g) { g.tensor("w", {1024}, 0, 0); }, 64); },
               {"tensor 'w'", "size 4096", "extends past end of file"}});
  c.push_back({"data_section_past_eof",
               [] { return RawGguf().header(1, 0).tensor("w", {0}, 0, 0); },
               {"data section", "past end of file"}});
  c.push_back({"overlapping_tensors",
               [] {
                 RawGguf g;
                 g.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad(32).zeros(128);
                 return g;
               },
               {"tensor 'b' (tensor info #1", "overlaps", "'a'"}});
  c.push_back({"same_offset_tensors",
               [] {
                 RawGguf g;
                 g.header(2, 0).tensor("a", {4}, 0, 0).tensor("b", {4}, 0, 0).pad(32).zeros(64);
                 return g;
               },
               {"tensor 'b'", "overlaps"}});
  c.push_back({"gap_between_tensors",
               [] {
                 RawGguf g;
                 g.header(2, 0).tensor("a", {4}, 0, 0).tensor("b", {4}, 0, 64).pad(32).zeros(128);
                 return g;
               },
               {"tensor 'b'", "gap", "expected 0x20"}});
  c.push_back(
      {"tensor_type_past_eof",
       [] { return RawGguf().header(1, 0).str("wwwwwwwwwwww").u32(1).u64(4).u32(0).zeros(4); },
       {"tensor 'wwwwwwwwwwww'", "data offset at byte", "needs 8 bytes"}});
  return c;
}

TEST(GgufMalformed, Corpus_eachErrorNamesField) {
  const auto cases = corpus();
  EXPECT_GE(cases.size(), 50u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RawGguf g = c.build();
    auto f = File::parse(g.b, c.name + ".gguf");
    ASSERT_FALSE(f.ok()) << c.name << " parsed";
    const std::string& m = f.error().message;
    EXPECT_TRUE(contains(m, c.name + ".gguf: ")) << m;
    for (const auto& e : c.expect) EXPECT_TRUE(contains(m, e)) << "want '" << e << "' in: " << m;
  }
}

TEST(GgufMalformed, CorpusFromDisk_sameErrorsThroughMmap) {
  const std::string dir = testing::temp_dir();
  ASSERT_FALSE(dir.empty());
  for (const Case& c : corpus()) {
    const std::string path = dir + "/" + c.name + ".gguf";
    testing::write_bytes(path, c.build().b);
    auto m = Model::open(path);
    ASSERT_FALSE(m.ok()) << c.name;
    for (const auto& e : c.expect) EXPECT_TRUE(contains(m.error().message, e)) << m.error().message;
  }
  testing::write_bytes(dir + "/empty.gguf", {});
  auto e = File::open(dir + "/empty.gguf");
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.error().message, "magic")) << e.error().message;
}

// Deterministic byte flips of a valid file: parse may succeed or fail, but must not
// crash (the libFuzzer target in tests/fuzz/ explores much further).
TEST(GgufMalformed, RandomByteFlips_neverCrash) {
  const auto base = valid_file();
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  size_t n_ok = 0, n_err = 0;
  for (int round = 0; round < 20000; ++round) {
    auto b = base;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = next() % b.size();
      b[at] = next() % 3 == 0 ? static_cast<uint8_t>(0xFF) : static_cast<uint8_t>(next());
    }
    auto f = File::parse(b, "flip");
    if (f.ok()) {
      ++n_ok;
      for (const auto& t : (*f)->tensors()) {  // every view lies inside the buffer
        ASSERT_GE(t.data, b.data());
        ASSERT_LE(t.data + t.n_bytes, b.data() + b.size());
      }
    } else {
      ++n_err;
    }
  }
  EXPECT_GT(n_err, 0u);
  EXPECT_GT(n_ok, 0u);  // flips inside tensor data are harmless
}

}  // namespace
}  // namespace minfer::gguf
