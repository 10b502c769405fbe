// Stage 2 tests: the heap a parsed vocabulary-sized metadata array really takes.
// Bar: a Gemma-3-sized vocabulary (262144 tokens, scores, token types) parsed from a
// GGUF costs under 40 heap bytes per token for all three arrays together (one Value per
// element, as before, cost ~100 bytes per element per array); the values read back equal
// what was written; the parsed metadata writes back to the same bytes.
// Its own executable: it replaces the global operator new/delete to count live heap bytes
// (malloc_usable_size, so the allocator's own rounding is counted too).
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace {
std::atomic<int64_t> g_live_bytes{0};
}  // namespace

void* operator new(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  operator delete(p);
}

namespace minfer::gguf {
namespace {

constexpr size_t kVocab = 262144;  // Gemma 3's vocabulary
// Heap bytes per token for tokens + scores + token_type; the token texts below average
// ~10 bytes, stored once, plus 8 bytes of offset, 4 of score and 4 of type.
constexpr double kMaxBytesPerToken = 40.0;

TEST(GgufArrayMemory, VocabularySizedArrays_under40BytesPerTokenAndExact) {
  std::vector<std::string> tokens(kVocab);
  std::vector<float> scores(kVocab);
  std::vector<int32_t> types(kVocab);
  for (size_t k = 0; k < kVocab; ++k) {
    tokens[k] = "\xe2\x96\x81tok" + std::to_string(k * 7919 % 1000003);  // "▁tok<n>", unique
    scores[k] = -static_cast<float>(k) * 0.25f;
    types[k] = static_cast<int32_t>(k % 7);
  }
  Writer w;
  w.set("general.architecture", Value::string("gemma3"));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.scores", Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;

  const int64_t before = g_live_bytes.load();
  auto f = File::parse(*bytes, "vocab.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  const int64_t held = g_live_bytes.load() - before;
  const double per_token = static_cast<double>(held) / kVocab;
  std::printf("parsed vocabulary: %.1f heap bytes per token\n", per_token);
  EXPECT_LT(per_token, kMaxBytesPerToken) << held << " heap bytes held by the parsed file";
  // A floor too, so the measurement is not vacuous: the token texts alone are ~10 bytes.
  EXPECT_GT(per_token, 10.0);

  const Value* t = (*f)->find("tokenizer.ggml.tokens");
  const Value* s = (*f)->find("tokenizer.ggml.scores");
  const Value* y = (*f)->find("tokenizer.ggml.token_type");
  ASSERT_TRUE(t != nullptr && s != nullptr && y != nullptr);
  ASSERT_EQ(t->array.type(), ValueType::kString);
  ASSERT_EQ(t->array.size(), kVocab);
  ASSERT_EQ(s->array.size(), kVocab);
  ASSERT_EQ(y->array.size(), kVocab);
  for (size_t k = 0; k < kVocab; ++k) {
    ASSERT_EQ(t->array.string_at(k), tokens[k]) << "token " << k;
    ASSERT_EQ(static_cast<float>(s->array.float_at(k)), scores[k]) << "score " << k;
    ASSERT_EQ(y->array.int_at(k), types[k]) << "type " << k;
  }
  EXPECT_EQ(t->array[kVocab - 1].str, tokens.back());
  EXPECT_EQ(y->array[3].i, 3);

  // The parsed metadata writes back byte for byte.
  Writer again;
  for (const KeyValue& kv : (*f)->metadata()) again.set(kv.key, kv.value);
  auto rewritten = again.to_bytes();
  ASSERT_TRUE(rewritten.ok()) << rewritten.error().message;
  EXPECT_TRUE(*rewritten == *bytes);
}

}  // namespace
}  // namespace minfer::gguf
