// Stage 4 tests: the PCRE2 pre-tokenizer gives llama.cpp's splits.
// Invariants checked: known splits for the GPT-2, Llama-3, Qwen2 and DeepSeek-Coder
// regexes, including the cases where a plain PCRE2 run would differ (non-ASCII
// whitespace, \s+(?!\S) backtracking, pieces limiting lookaheads); unknown names fail
// with the name in the message.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

namespace minfer::tokenizer {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  auto spec = find_pre_tokenizer(pre);
  EXPECT_TRUE(spec.ok()) << pre;
  auto p = PreTokenizer::create(spec->regexes);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  auto words = p->split(text);
  EXPECT_TRUE(words.ok());
  return *words;
}

using W = std::vector<std::string>;

TEST(PreTokenizer, gpt2_splits_like_the_gpt2_regex) {
  EXPECT_EQ(split("gpt-2", "Hello world's  test!!"),
            (W{"Hello", " world", "'s", " ", " test", "!!"}));
  // \s+(?!\S) backtracks one whitespace before a word, which then takes it.
  EXPECT_EQ(split("gpt-2", "a  \n b"), (W{"a", "  \n", " b"}));
  EXPECT_EQ(split("gpt-2", "x   "), (W{"x", "   "}));
  EXPECT_EQ(split("gpt-2", "123abc"), (W{"123", "abc"}));
  EXPECT_EQ(split("gpt-2", ""), W{});
}

TEST(PreTokenizer, llama3_splits_digits_by_three_and_keeps_newlines) {
  EXPECT_EQ(split("llama-bpe", "1234567 I'M ok\n\n  x"),
            (W{"123", "456", "7", " I", "'M", " ok", "\n\n", " ", " x"}));
  EXPECT_EQ(split("llama-bpe", "hi!\n\nthere"), (W{"hi", "!\n\n", "there"}));
}

TEST(PreTokenizer, qwen2_single_digits) {
  EXPECT_EQ(split("qwen2", "ab 12"), (W{"ab", " ", "1", "2"}));
}

TEST(PreTokenizer, non_ascii_whitespace_is_whitespace_as_in_llama_cpp) {
  // U+3000 IDEOGRAPHIC SPACE and U+0085 NEXT LINE are whitespace for llama.cpp.
  // Only an ASCII space may lead a word, so both ideographic spaces stand alone.
  EXPECT_EQ(split("gpt-2",
                  "a\xE3\x80\x80\xE3\x80\x80"
                  "b"),
            (W{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
  EXPECT_EQ(split("gpt-2", "a\xC2\x85"), (W{"a", "\xC2\x85"}));
  // deepseek-coder's CJK range [\x{800}-\x{4E00}] contains U+3000, but llama.cpp never
  // lets whitespace reach it: the space stays out of the CJK piece.
  EXPECT_EQ(split("deepseek-coder", "\xE4\xB8\x80\xE3\x80\x80\xE4\xB8\x80"),
            (W{"\xE4\xB8\x80", "\xE3\x80\x80", "\xE4\xB8\x80"}));
}

TEST(PreTokenizer, later_regexes_stay_inside_earlier_pieces) {
  // starcoder: digits are split first, so " 12" cannot become one " ?\p{N}+" word.
  EXPECT_EQ(split("starcoder", "a 12"), (W{"a", " ", "1", "2"}));
}

TEST(PreTokenizer, invalid_utf8_becomes_replacement_char) {
  EXPECT_EQ(split("gpt-2", "a\xFF"), (W{"a", "\xEF\xBF\xBD"}));
}

TEST(PreTokenizer, translate_uses_ascii_space_class) {
  EXPECT_EQ(PreTokenizer::translate(R"(\s+(?!\S)|[^\s\p{L}])"),
            R"([\t-\r ]+(?![^\t-\r ])|[^\t-\r \p{L}])");
  EXPECT_EQ(PreTokenizer::translate(R"(\d{3}[\d,])"), R"([0-9]{3}[0-9,])");
}

TEST(PreTokenizer, every_known_name_compiles) {
  for (const auto& name : known_pre_tokenizers()) {
    auto spec = find_pre_tokenizer(name);
    ASSERT_TRUE(spec.ok()) << name;
    auto p = PreTokenizer::create(spec->regexes);
    EXPECT_TRUE(p.ok()) << name << ": " << (p.ok() ? "" : p.error().message);
  }
}

TEST(PreTokenizer, unknown_name_is_an_error_naming_it) {
  auto spec = find_pre_tokenizer("no-such-pre");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.error().message.find("'no-such-pre'"), std::string::npos);
  EXPECT_TRUE(find_pre_tokenizer("").ok());  // missing → default, as llama.cpp
}

}  // namespace
}  // namespace minfer::tokenizer
