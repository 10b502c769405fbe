// Stage 4 tests: decode(encode(s)) == s over the code points llama.cpp's
// test-tokenizer-1 covers (every scalar value except surrogates, U+40000..U+E0000 and
// U+2581), for every vocab fixture, encoded without special tokens.
// Invariant checked: byte-exact round trip. Code points go in runs of kRun so the
// whole range stays fast; a failure names the run's first code point and both texts.
#include <gtest/gtest.h>

#include "tokenizer/unicode.h"
#include "vocab_fixture.h"

namespace minfer::tokenizer::testing {
namespace {

constexpr uint32_t kRun = 48;

bool skipped(uint32_t cp) {
  return (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x40000 && cp <= 0xE0000) ||
         cp == 0x2581;  // '▁' decodes to a space in SentencePiece vocabularies
}

class RoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTrip, decode_encode_is_identity_bitwise) {
  const Tokenizer* tok = load_vocab(GetParam());
  ASSERT_NE(tok, nullptr);
  const EncodeOptions opts{.add_special = false, .parse_special = false};
  size_t failures = 0;
  for (uint32_t first = 0; first <= 0x10FFFF && failures < 5; first += kRun) {
    std::string text;
    for (uint32_t cp = first; cp < first + kRun && cp <= 0x10FFFF; ++cp) {
      if (!skipped(cp)) utf8::append(text, cp);
    }
    if (text.empty()) continue;
    auto ids = tok->encode(text, opts);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    const std::string back = tok->decode(*ids);
    if (back != text) {
      ++failures;
      ADD_FAILURE() << GetParam() << ": run from U+" << std::hex << first << " decodes to '" << back
                    << "' instead of '" << text << "'";
    }
  }
}

// The same, one code point at a time as llama.cpp does, over the BMP's first blocks.
TEST_P(RoundTrip, single_code_points_below_u3000_bitwise) {
  const Tokenizer* tok = load_vocab(GetParam());
  ASSERT_NE(tok, nullptr);
  for (uint32_t cp = 0; cp < 0x3000; ++cp) {
    if (skipped(cp)) continue;
    const std::string text = utf8::encode(cp);
    auto ids = tok->encode(text, EncodeOptions{.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(tok->decode(*ids), text) << GetParam() << " U+" << std::hex << cp;
  }
}

TEST_P(RoundTrip, mixed_text_with_spaces_and_newlines_bitwise) {
  const Tokenizer* tok = load_vocab(GetParam());
  ASSERT_NE(tok, nullptr);
  for (const std::string text :
       {"", " ", "  leading", "trailing  ", "Hello, world!\n\n\tTabs\r\nCRLF",
        "\xF0\x9F\x99\x82 emoji \xE4\xB8\x96\xE7\x95\x8C 1234567890",
        "caf\xC3\xA9 na\xC3\xAFve \xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
        "   \n\n   x   "}) {
    auto ids = tok->encode(text, EncodeOptions{.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(tok->decode(*ids), text) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, RoundTrip, ::testing::ValuesIn(kVocabs),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           std::string n = param.param;
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace minfer::tokenizer::testing
