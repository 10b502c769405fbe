// Stage 14b tests: the GBNF parser and matcher on data-driven cases (llama.cpp's
// grammar-integration cases, see data/README.md) and malformed grammars.
#include <gtest/gtest.h>

#include <chrono>

#include "grammar/grammar.h"
#include "grammar_test_util.h"

namespace minfer::grammar {
namespace {

using testing::read_cases;

bool full_match(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  auto m = Matcher::create(g);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return false;
  return m->accept(s) && m->can_end();
}

TEST(Gbnf, IntegrationCasesAcceptAndReject) {
  const auto cases = read_cases("gbnf_cases.txt");
  ASSERT_GE(cases.size(), 15u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = Grammar::parse(c.body);
    ASSERT_TRUE(g.ok()) << g.error().message << "\n" << c.body;
    for (const auto& s : c.sections.at("pass")) EXPECT_TRUE(full_match(*g, s)) << "'" << s << "'";
    for (const auto& s : c.sections.at("fail")) EXPECT_FALSE(full_match(*g, s)) << "'" << s << "'";
  }
}

// Byte by byte gives the same answer as all at once, and a prefix of an accepted
// string is always accepted (the matcher tracks prefixes of sentences).
TEST(Gbnf, ByteByByteEqualsWhole) {
  for (const auto& c : read_cases("gbnf_cases.txt")) {
    SCOPED_TRACE(c.name);
    auto g = Grammar::parse(c.body);
    ASSERT_TRUE(g.ok());
    for (const auto& s : c.sections.at("pass")) {
      auto m = Matcher::create(*g);
      ASSERT_TRUE(m.ok());
      for (char ch : s) ASSERT_TRUE(m->accept(std::string_view(&ch, 1))) << "'" << s << "'";
      EXPECT_TRUE(m->can_end());
    }
  }
}

TEST(Gbnf, MalformedGrammarsGiveLineColumnErrors) {
  const auto cases = read_cases("gbnf_errors.txt");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = Grammar::parse(c.body);
    ASSERT_FALSE(g.ok()) << c.body;
    const std::string& want = c.sections.at("error").at(0);
    EXPECT_NE(g.error().message.find(want), std::string::npos)
        << "got: " << g.error().message << "\nwant: " << want;
  }
}

TEST(Gbnf, RejectedInputLeavesStateUnchanged) {
  auto g = Grammar::parse("root ::= \"ab\" \"c\"*");
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(*g);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->accept("a"));
  const MatchState before = m->state();
  EXPECT_FALSE(m->accept("bx"));
  EXPECT_EQ(m->state(), before);
  EXPECT_TRUE(m->accept("bcc"));
  EXPECT_TRUE(m->can_end());
}

// UTF-8 split across calls is held as a partial code point; invalid UTF-8 (stray
// continuation bytes, overlongs, surrogates) is rejected.
TEST(Gbnf, PartialAndInvalidUtf8) {
  auto g = Grammar::parse("root ::= [é-ê] \"😀\" [^x]*");
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(*g);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->can_accept("\xC3\xA8"));  // è: below the range
  EXPECT_TRUE(m->accept("\xC3"));           // could still be é or ê
  EXPECT_FALSE(m->can_end());
  EXPECT_FALSE(m->can_accept("\xA8"));
  EXPECT_TRUE(m->accept("\xA9"));  // é
  EXPECT_TRUE(m->accept("\xF0\x9F"));
  EXPECT_FALSE(m->can_accept("\x98\x81"));  // 😁
  EXPECT_TRUE(m->accept("\x98\x80"));
  EXPECT_TRUE(m->can_end());
  EXPECT_FALSE(m->can_accept("\x80"));              // stray continuation byte
  EXPECT_FALSE(m->can_accept("\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(m->can_accept("\xE0\x80\x80"));      // overlong
  EXPECT_FALSE(m->can_accept("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(m->can_accept("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(m->can_accept("\xFF"));
  EXPECT_TRUE(m->can_accept("\xED\x9F\xBF"));  // U+D7FF
  EXPECT_TRUE(m->can_accept("abc\xF4\x8F\xBF\xBF"));
}

// llama.cpp's "hang" grammar: six nested {0,99} around a nullable star. It compiles;
// the matcher either handles it or stops loudly at its state limit — quickly.
TEST(Gbnf, NestedNullableRepetitionsDoNotHang) {
  auto g = Grammar::parse("root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const auto t0 = std::chrono::steady_clock::now();
  auto m = Matcher::create(*g);
  if (m.ok()) {
    m->accept("abc");
  } else {
    EXPECT_NE(m.error().message.find("grammar state too large"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

// `.` under 60 nested `+` (found by fuzz_gbnf): exponentially many ways to split the
// input; each step's work is bounded, so it ends quickly, loudly if at all.
TEST(Gbnf, AmbiguousNestedPlusHitsTheStepLimitQuickly) {
  auto g = Grammar::parse("root ::= ." + std::string(60, '+'));
  ASSERT_TRUE(g.ok()) << g.error().message;
  const auto t0 = std::chrono::steady_clock::now();
  auto m = Matcher::create(*g);
  ASSERT_TRUE(m.ok());
  for (int i = 0; i < 16 && m->accept("x"); ++i) {
  }
  if (m->table().error()) {
    EXPECT_NE(m->table().error()->message.find("grammar state too large"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

TEST(Gbnf, PrintsBackToAnEquivalentGrammar) {
  for (const auto& c : read_cases("gbnf_cases.txt")) {
    SCOPED_TRACE(c.name);
    auto g = Grammar::parse(c.body);
    ASSERT_TRUE(g.ok());
    auto g2 = Grammar::parse((*g)->to_gbnf());
    ASSERT_TRUE(g2.ok()) << g2.error().message << "\n" << (*g)->to_gbnf();
    for (const auto& s : c.sections.at("pass")) EXPECT_TRUE(full_match(*g2, s)) << s;
    for (const auto& s : c.sections.at("fail")) EXPECT_FALSE(full_match(*g2, s)) << s;
  }
}

// A rule the text names like a generated one ("root-1") keeps printing unambiguous.
TEST(Gbnf, GeneratedNamesDoNotClashWhenPrinted) {
  auto g = Grammar::parse("root ::= (\"a\" | \"b\") root-1\nroot-1 ::= \"c\"");
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto g2 = Grammar::parse((*g)->to_gbnf());
  ASSERT_TRUE(g2.ok()) << g2.error().message << "\n" << (*g)->to_gbnf();
  EXPECT_TRUE(full_match(*g2, "ac"));
  EXPECT_FALSE(full_match(*g2, "aa"));
}

}  // namespace
}  // namespace minfer::grammar
