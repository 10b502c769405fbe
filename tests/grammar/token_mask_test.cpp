// Stage 14b tests: token masks on llama.cpp's vocab fixtures. The trie walk must give
// bitwise the same mask as checking every token on its own against a fresh matcher
// (its own StateTable, so no memoised transition is shared with the walk).
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include "../tokenizer/vocab_fixture.h"
#include "grammar/grammar.h"

namespace minfer::grammar {
namespace {

constexpr const char* kJson = R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

struct MaskCase {
  const char* grammar;
  std::vector<std::string> prefixes;  // states to compare masks at
};

const MaskCase kCases[] = {
    {kJson,
     {"", "{", "{\"", "{\"a", "{\"a\":", "{\"a\": 1", "{\"a\": 12.", "{\"a\": [tr",
      "{\"a\": \"\xC3", "{\"a\": \"\xE2\x9C", "{\"a\": \"\\u00", "{\"a\": {}}"}},
    {"root ::= [a-z]+ (\" \" [a-z]+)* \".\"", {"", "hello", "hello wor", "hi."}},
    {"root ::= \"é\" [^x]* | [0-9]{2,3}", {"", "\xC3", "é", "12", "123"}},
    {"root ::= \"<tag>\" ( [^<] | \"<\" [^/] )* \"</tag>\"", {"", "<ta", "<tag>", "<tag>a<"}},
};

void check_vocab(const char* name) {
  const auto* tok = tokenizer::testing::load_vocab(name);
  ASSERT_NE(tok, nullptr);
  const auto vocab = TokenVocab::build(*tok);
  ASSERT_EQ(vocab->n_vocab(), tok->n_vocab());
  for (const auto& c : kCases) {
    auto g = Grammar::parse(c.grammar);
    ASSERT_TRUE(g.ok()) << g.error().message;
    auto m = Matcher::create(*g);
    ASSERT_TRUE(m.ok());
    TokenMasker masker(m->table_ptr(), vocab);
    for (const auto& p : c.prefixes) {
      SCOPED_TRACE(std::string(name) + " grammar " + c.grammar + " after '" + p + "'");
      m->reset();
      ASSERT_TRUE(m->accept(p));
      auto fast = masker.mask(*m);
      ASSERT_TRUE(fast.ok()) << fast.error().message;
      auto fresh = Matcher::create(*g);
      ASSERT_TRUE(fresh.ok());
      ASSERT_TRUE(fresh->accept(p));
      TokenMasker oracle(fresh->table_ptr(), vocab);
      const TokenMask brute = oracle.mask_brute_force(*fresh);
      EXPECT_GT(brute.count(), 0u);
      if (!(**fast == brute)) {
        for (TokenId id = 0; id < vocab->n_vocab(); ++id) {
          if ((*fast)->test(id) != brute.test(id)) {
            ADD_FAILURE() << "first mismatch: token " << id << " '" << vocab->bytes(id)
                          << "' trie=" << (*fast)->test(id) << " brute=" << brute.test(id);
            break;
          }
        }
      }
      // allows() agrees with the mask, and a second mask() is a cache hit.
      for (TokenId id = 0; id < vocab->n_vocab(); id += 7) {
        ASSERT_EQ(masker.allows(*m, id), brute.test(id)) << "token " << id;
      }
      const auto hits = masker.stats().mask_cache_hits;
      auto again = masker.mask(*m);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(masker.stats().mask_cache_hits, hits + 1);
      EXPECT_TRUE(**again == brute);
    }
  }
}

TEST(TokenMask, TrieWalkEqualsPerTokenCheckGpt2_bitwise) {
  check_vocab("gpt-2");
}
TEST(TokenMask, TrieWalkEqualsPerTokenCheckLlamaSpm_bitwise) {
  check_vocab("llama-spm");
}

// EOG tokens are allowed exactly where the grammar can end; control tokens never.
TEST(TokenMask, EndOfGenerationOnlyWhereTheGrammarCanEnd) {
  const auto* tok = tokenizer::testing::load_vocab("llama-spm");
  ASSERT_NE(tok, nullptr);
  const auto vocab = TokenVocab::build(*tok);
  ASSERT_FALSE(vocab->eog_ids().empty());
  auto g = Grammar::parse("root ::= \"ab\" \"c\"?");
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(*g);
  ASSERT_TRUE(m.ok());
  TokenMasker masker(m->table_ptr(), vocab);
  const TokenId eos = vocab->eog_ids()[0];
  EXPECT_FALSE(masker.allows(*m, eos));
  EXPECT_TRUE(m->accept("a"));
  EXPECT_FALSE((*masker.mask(*m))->test(eos));
  EXPECT_TRUE(m->accept("b"));
  EXPECT_TRUE(masker.allows(*m, eos));
  EXPECT_TRUE((*masker.mask(*m))->test(eos));
  const TokenId bos = tok->special().bos;
  ASSERT_NE(bos, tokenizer::kNoToken);
  EXPECT_FALSE(masker.allows(*m, bos));
  EXPECT_TRUE(masker.accept_token(*m, eos));
}

// Byte tokens (<0xC3>, <0xA9>) spell a code point across two tokens.
TEST(TokenMask, CodePointSplitAcrossByteTokens) {
  const auto* tok = tokenizer::testing::load_vocab("llama-spm");
  ASSERT_NE(tok, nullptr);
  const auto vocab = TokenVocab::build(*tok);
  const TokenId c3 = tok->find_token("<0xC3>");
  const TokenId a9 = tok->find_token("<0xA9>");
  const TokenId a8 = tok->find_token("<0xA8>");
  ASSERT_NE(c3, tokenizer::kNoToken);
  auto g = Grammar::parse("root ::= \"é\"");
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(*g);
  ASSERT_TRUE(m.ok());
  TokenMasker masker(m->table_ptr(), vocab);
  EXPECT_FALSE(masker.allows(*m, a9));
  ASSERT_TRUE(masker.accept_token(*m, c3));
  EXPECT_FALSE(m->can_end());
  EXPECT_TRUE(masker.allows(*m, a9));
  EXPECT_FALSE(masker.allows(*m, a8));
  const TokenMask* mk = *masker.mask(*m);
  EXPECT_TRUE(mk->test(a9));
  EXPECT_EQ(mk->count(), 1u);
  ASSERT_TRUE(masker.accept_token(*m, a9));
  EXPECT_TRUE(m->can_end());
}

}  // namespace
}  // namespace minfer::grammar
