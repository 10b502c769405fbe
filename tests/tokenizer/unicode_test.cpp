// Stage 4 tests: UTF-8 decoding (llama.cpp's lenient rules), the GPT-2 byte table,
// incomplete-tail detection, the whitespace set and the WordPiece normalizer's
// categories, NFD and lowercase.
// Invariants checked: decode_utf8 matches llama.cpp on invalid input; the byte table
// is a bijection; is_whitespace equals PCRE2's \p{White_Space} on every code point;
// nfd decomposes fully and puts combining marks in canonical order.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>
#include <pcre2.h>

#include <set>

namespace minfer::tokenizer::unicode {
namespace {

TEST(Utf8, decode_valid_and_invalid_like_llama_cpp) {
  EXPECT_EQ(decode_utf8("a\xC3\xA9\xE4\xB8\x96\xF0\x9F\x99\x82"),
            (std::vector<uint32_t>{'a', 0xE9, 0x4E16, 0x1F642}));
  // A stray continuation byte, a truncated sequence and 0xFF each become one U+FFFD;
  // decoding resumes at the next byte.
  EXPECT_EQ(decode_utf8("\x80"
                        "a"),
            (std::vector<uint32_t>{kReplacementChar, 'a'}));
  EXPECT_EQ(decode_utf8("\xE4\xB8"), (std::vector<uint32_t>{kReplacementChar, kReplacementChar}));
  EXPECT_EQ(decode_utf8("\xFF"), (std::vector<uint32_t>{kReplacementChar}));
  // Overlong forms are accepted, as llama.cpp does.
  EXPECT_EQ(decode_utf8("\xC0\x80"), (std::vector<uint32_t>{0}));
}

TEST(Utf8, encode_decode_roundtrip_every_scalar_value) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const auto back = decode_utf8(utf8::encode(cp));
    ASSERT_EQ(back.size(), 1u) << cp;
    ASSERT_EQ(back[0], cp);
  }
}

TEST(ByteTable, gpt2_table_is_a_bijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_cp(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    ASSERT_TRUE(cp_to_byte(cp).has_value());
    EXPECT_EQ(*cp_to_byte(cp), b);
  }
  EXPECT_EQ(byte_to_cp(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_cp('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_cp('A'), uint32_t{'A'});
  EXPECT_FALSE(cp_to_byte(0x144).has_value());
}

TEST(Whitespace, equals_pcre2_white_space_property_everywhere) {
  int err = 0;
  PCRE2_SIZE off = 0;
  const char* pat = "^\\p{White_Space}$";
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  ASSERT_NE(re, nullptr);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = utf8::encode(cp);
    const bool pcre =
        pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >= 0;
    ASSERT_EQ(is_whitespace(cp), pcre) << std::hex << cp;
  }
  pcre2_match_data_free(md);
  pcre2_code_free(re);
}

TEST(Categories, punctuation_control_and_marks_by_general_category) {
  for (uint32_t cp :
       std::initializer_list<uint32_t>{'!', '_', '-', '(', 0xBF, 0x3001, 0x300C, 0x2014, 0xFF01}) {
    EXPECT_TRUE(is_punctuation(cp)) << cp;
  }
  for (uint32_t cp : std::initializer_list<uint32_t>{'$', '+', '^', 'a', '1', 0x4E2D, 0xA9})
    EXPECT_FALSE(is_punctuation(cp)) << cp;
  // Cc, Cf, Cs, Co — not Cn (U+0378 is unassigned), letters or spaces.
  for (uint32_t cp : {0x07, 0x7F, 0x200B, 0xFEFF, 0xD800, 0xE000}) {
    EXPECT_TRUE(is_control_format_surrogate_private(cp)) << cp;
  }
  for (uint32_t cp : std::initializer_list<uint32_t>{0x378, 'a', ' ', 0x3000}) {
    EXPECT_FALSE(is_control_format_surrogate_private(cp)) << cp;
  }
  EXPECT_TRUE(is_nonspacing_mark(0x301));
  EXPECT_TRUE(is_nonspacing_mark(0x307));
  EXPECT_FALSE(is_nonspacing_mark(0x903));  // Mc
  EXPECT_FALSE(is_nonspacing_mark('a'));
  // Beyond U+10FFFF (lenient decoding can produce it): unassigned, nothing else.
  EXPECT_FALSE(is_punctuation(0x110000));
  EXPECT_FALSE(is_control_format_surrogate_private(0x110000));
  EXPECT_FALSE(is_nonspacing_mark(0x1FFFFF));
}

TEST(Nfd, full_decomposition_in_canonical_order) {
  EXPECT_EQ(nfd({0xE9}), (std::vector<uint32_t>{'e', 0x301}));
  // U+1E69 s with dot below and dot above: decomposed twice over.
  EXPECT_EQ(nfd({0x1E69}), (std::vector<uint32_t>{'s', 0x323, 0x307}));
  // Marks after a base are sorted by combining class (U+0323: 220 before U+0307: 230),
  // stable among equals; a starter ends the run.
  EXPECT_EQ(nfd({'a', 0x307, 0x323, 'b', 0x301, 0x300}),
            (std::vector<uint32_t>{'a', 0x323, 0x307, 'b', 0x301, 0x300}));
  EXPECT_EQ(nfd({0xD55C}), (std::vector<uint32_t>{0x1112, 0x1161, 0x11AB}));  // Hangul
  EXPECT_EQ(nfd({0xF900}), (std::vector<uint32_t>{0x8C48}));  // compatibility ideograph
  EXPECT_EQ(nfd({0x130}), (std::vector<uint32_t>{'I', 0x307}));
  EXPECT_EQ(nfd({0xFB01}), (std::vector<uint32_t>{0xFB01}));  // a compatibility mapping only
  EXPECT_EQ(nfd({0x110000}), (std::vector<uint32_t>{0x110000}));
}

TEST(Lowercase, full_mapping_without_context) {
  auto lower = [](uint32_t cp) {
    std::vector<uint32_t> out;
    append_lowercase(cp, out);
    return out;
  };
  EXPECT_EQ(lower('A'), (std::vector<uint32_t>{'a'}));
  EXPECT_EQ(lower('1'), (std::vector<uint32_t>{'1'}));
  EXPECT_EQ(lower(0x130), (std::vector<uint32_t>{'i', 0x307}));
  EXPECT_EQ(lower(0x3A3), (std::vector<uint32_t>{0x3C3}));  // Σ → σ, never final ς
  EXPECT_EQ(lower(0x1C5), (std::vector<uint32_t>{0x1C6}));  // titlecase ǅ → ǆ
  EXPECT_EQ(lower(0x410), (std::vector<uint32_t>{0x430}));  // Cyrillic А
}

}  // namespace
}  // namespace minfer::tokenizer::unicode
