// Stage 4 tests: WordPiece (`tokenizer.ggml.model = bert`).
// Invariants checked: on llama.cpp's GGUF of all-MiniLM-L6-v2's vocabulary, ids equal
// Hugging Face tokenizers' on every recorded string (with and without [CLS]/[SEP],
// with special-token text plain and parsed) and decode equals tokenizers' WordPiece
// decoder; on small hand-made vocabularies, each rule of the BERT normalizer,
// pre-tokenizer and WordPiece gives the ids written out by hand.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "vocab_fixture.h"

namespace minfer::tokenizer {
namespace {

using testing::first_mismatch;
using testing::show;

const std::string kMiniLmDir = std::string(MINFER_TESTDATA_DIR) + "/tokenizers/minilm";

std::unique_ptr<Tokenizer> load_minilm() {
  auto model = gguf::Model::open(kMiniLmDir + "/ggml-vocab-minilm.gguf");
  if (!model.ok()) {
    ADD_FAILURE() << model.error().message;
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(*model);
  if (!tok.ok()) {
    ADD_FAILURE() << tok.error().message;
    return nullptr;
  }
  return std::move(tok).value();
}

nlohmann::json load_vectors() {
  std::ifstream f(kMiniLmDir + "/vectors.json", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(WordPiece, ReadsLlamaCppBertMetadata) {
  const auto tok = load_minilm();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->model_name(), "bert");
  EXPECT_EQ(tok->n_vocab(), 30522);
  const SpecialIds& s = tok->special();
  EXPECT_EQ(s.bos, 101);
  EXPECT_EQ(s.eos, 102);
  EXPECT_EQ(s.sep, 102);
  EXPECT_EQ(s.unk, 100);
  EXPECT_EQ(s.pad, 0);
  EXPECT_EQ(s.mask, 103);
  EXPECT_TRUE(s.add_bos);
  EXPECT_TRUE(s.add_eos);
  EXPECT_FALSE(s.add_space_prefix);
  EXPECT_EQ(tok->token_text(7592), "\xE2\x96\x81hello");  // phantom-space form
}

TEST(WordPiece, MatchesHfTokenizersOnMiniLmVectors) {
  const auto tok = load_minilm();
  ASSERT_NE(tok, nullptr);
  const nlohmann::json doc = load_vectors();
  const auto& cases = doc.at("cases");
  ASSERT_GE(cases.size(), 300u);
  struct Mode {
    const char* key;
    EncodeOptions opts;
  };
  const Mode modes[] = {
      {"ids", {.add_special = true, .parse_special = false}},
      {"ids_no_special", {.add_special = false, .parse_special = false}},
      {"ids_parse_special", {.add_special = true, .parse_special = true}},
  };
  size_t failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i].at("text").get<std::string>();
    for (const Mode& m : modes) {
      const auto want = cases[i].at(m.key).get<std::vector<TokenId>>();
      auto got = tok->encode(text, m.opts);
      ASSERT_TRUE(got.ok()) << got.error().message;
      if (*got == want) continue;
      if (++failures <= 10) {
        ADD_FAILURE() << "case #" << i << " (" << m.key << ") '" << text << "'\n  expected "
                      << show(want) << "\n  actual   " << show(*got) << "\n  first mismatch at "
                      << first_mismatch(want, *got);
      }
    }
  }
  EXPECT_EQ(failures, 0u) << "of " << cases.size() * 3 << " encodings";
}

TEST(WordPiece, DecodeMatchesHfWordPieceDecoderOnMiniLmVectors) {
  const auto tok = load_minilm();
  ASSERT_NE(tok, nullptr);
  const nlohmann::json doc = load_vectors();
  size_t failures = 0;
  for (const auto& c : doc.at("cases")) {
    const auto plain = tok->decode(c.at("ids_no_special").get<std::vector<TokenId>>(), false);
    const auto with_special = tok->decode(c.at("ids").get<std::vector<TokenId>>(), true);
    if (plain != c.at("decoded").get<std::string>() && ++failures <= 10) {
      ADD_FAILURE() << "'" << c.at("text").get<std::string>() << "'\n  expected '"
                    << c.at("decoded").get<std::string>() << "'\n  actual   '" << plain << "'";
    }
    if (with_special != c.at("decoded_special").get<std::string>() && ++failures <= 10) {
      ADD_FAILURE() << "'" << c.at("text").get<std::string>() << "' (special)\n  expected '"
                    << c.at("decoded_special").get<std::string>() << "'\n  actual   '"
                    << with_special << "'";
    }
  }
  EXPECT_EQ(failures, 0u);
}

// A hand-made vocabulary in llama.cpp's phantom-space form ("▁" before a word's first
// piece, "##" dropped from continuations), ids in list order.
constexpr const char* kP = "\xE2\x96\x81";
enum : TokenId {
  kPad,
  kUnk,
  kCls,
  kSep,
  kMask,
  kWordUn,          // ▁un
  kContAff,         // aff
  kContAble,        // able
  kWordHello,       // ▁hello
  kWordCafe,        // ▁cafe
  kWordCafeAccent,  // ▁café
  kWordA,           // ▁a
  kContA,           // a
  kWordZhong,       // ▁中
  kWordWen,         // ▁文
  kWordLBracket,    // ▁[
  kWordSep,         // ▁sep
  kWordRBracket,    // ▁]
  kWordB,           // ▁b
  kWordDot,         // ▁.
  kWordI,           // ▁i
  kContCombDot,     // U+0307 (continuation)
  kWordIDot,        // ▁i + U+0307
  kVocabSize,
};

VocabData small_vocab() {
  VocabData d;
  d.model = "bert";
  const std::string p = kP;
  d.tokens = {"[PAD]", "[UNK]",      "[CLS]",      "[SEP]",    "[MASK]",     p + "un",
              "aff",   "able",       p + "hello",  p + "cafe", p + "café",   p + "a",
              "a",     p + "\u4e2d", p + "\u6587", p + "[",    p + "sep",    p + "]",
              p + "b", p + ".",      p + "i",      "\u0307",   p + "i\u0307"};
  d.token_types.assign(d.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (TokenId id : {kPad, kUnk, kCls, kSep, kMask}) {
    d.token_types[static_cast<size_t>(id)] = static_cast<int32_t>(TokenType::kControl);
  }
  d.bos = kCls;
  d.eos = kSep;
  d.sep = kSep;
  d.unk = kUnk;
  d.pad = kPad;
  d.mask = kMask;
  d.add_bos = true;
  d.add_eos = true;
  return d;
}

std::unique_ptr<Tokenizer> build(VocabData d) {
  EXPECT_EQ(d.tokens.size(), static_cast<size_t>(kVocabSize));
  auto tok = Tokenizer::from_vocab(std::move(d));
  EXPECT_TRUE(tok.ok()) << tok.error().message;
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::vector<TokenId> enc(const Tokenizer& tok, std::string_view text, bool add_special = false,
                         bool parse_special = false) {
  auto ids = tok.encode(text, {.add_special = add_special, .parse_special = parse_special});
  EXPECT_TRUE(ids.ok()) << ids.error().message;
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

TEST(WordPiece, ContinuationPiecesFollowTheLongestFirstPiece) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "unaffable"), (std::vector<TokenId>{kWordUn, kContAff, kContAble}));
  EXPECT_EQ(enc(*tok, "unaffable", true),
            (std::vector<TokenId>{kCls, kWordUn, kContAff, kContAble, kSep}));
  EXPECT_EQ(enc(*tok, "", true), (std::vector<TokenId>{kCls, kSep}));
}

TEST(WordPiece, WordWithAnUncoveredPartIsOneUnk) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  // "unaffablex": "x" has no piece, so the whole word is [UNK], not un+aff+able+[UNK].
  EXPECT_EQ(enc(*tok, "hello unaffablex hello"),
            (std::vector<TokenId>{kWordHello, kUnk, kWordHello}));
  EXPECT_EQ(enc(*tok, "zzz"), (std::vector<TokenId>{kUnk}));
}

TEST(WordPiece, WordOver100CharactersIsOneUnk) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  std::vector<TokenId> hundred(100, kContA);
  hundred[0] = kWordA;
  EXPECT_EQ(enc(*tok, std::string(100, 'a')), hundred);
  EXPECT_EQ(enc(*tok, std::string(101, 'a')), (std::vector<TokenId>{kUnk}));
  // Characters, not bytes: 60 two-byte "á" (120 bytes) are still one word of pieces.
  std::string accented;
  for (int i = 0; i < 60; ++i) accented += "\xC3\xA1";
  std::vector<TokenId> sixty(60, kContA);
  sixty[0] = kWordA;
  EXPECT_EQ(enc(*tok, accented), sixty);
}

TEST(WordPiece, NormalizerStripsAccentsAndLowercasesByDefault) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "CAFÉ Café cafe\xCC\x81"),
            (std::vector<TokenId>{kWordCafe, kWordCafe, kWordCafe}));
  // İ: NFD gives I + U+0307 and the mark is stripped.
  EXPECT_EQ(enc(*tok, "\xC4\xB0"), (std::vector<TokenId>{kWordI}));

  VocabData keep = small_vocab();
  keep.strip_accents = false;  // lowercase only: "é" stays
  const auto tok_keep = build(std::move(keep));
  ASSERT_NE(tok_keep, nullptr);
  EXPECT_EQ(enc(*tok_keep, "CAFÉ"), (std::vector<TokenId>{kWordCafeAccent}));
  // İ's full lowercase is i + U+0307 (not the simple mapping to i).
  EXPECT_EQ(enc(*tok_keep, "\xC4\xB0"), (std::vector<TokenId>{kWordIDot}));

  VocabData cased = small_vocab();
  cased.lowercase = false;  // strip_accents follows lowercase unless set
  const auto tok_cased = build(std::move(cased));
  ASSERT_NE(tok_cased, nullptr);
  EXPECT_EQ(enc(*tok_cased, "café Hello"), (std::vector<TokenId>{kWordCafeAccent, kUnk}));
}

TEST(WordPiece, CjkIdeographsAndPunctuationAreWordsOfTheirOwn) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "\u4e2d\u6587"), (std::vector<TokenId>{kWordZhong, kWordWen}));
  EXPECT_EQ(enc(*tok, "a\u4e2db"), (std::vector<TokenId>{kWordA, kWordZhong, kWordB}));
  EXPECT_EQ(enc(*tok, "hello.a.b"),
            (std::vector<TokenId>{kWordHello, kWordDot, kWordA, kWordDot, kWordB}));
}

TEST(WordPiece, CleanTextDropsControlAndFormatCharacters) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  // NUL, U+200B (Cf), U+FEFF (Cf) and invalid bytes vanish inside a word; \t\n\r and
  // U+3000 separate words.
  EXPECT_EQ(enc(*tok, std::string("hel\0lo", 6)), (std::vector<TokenId>{kWordHello}));
  EXPECT_EQ(enc(*tok, "he\u200bllo\ufeff"), (std::vector<TokenId>{kWordHello}));
  EXPECT_EQ(enc(*tok, "hel\xFFlo\xC3"), (std::vector<TokenId>{kWordHello}));
  EXPECT_EQ(enc(*tok, "a\tb\nhello\r\u3000a"),
            (std::vector<TokenId>{kWordA, kWordB, kWordHello, kWordA}));
}

TEST(WordPiece, SpecialTokenTextIsParsedOnlyWithParseSpecial) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "a[SEP]b", false, true), (std::vector<TokenId>{kWordA, kSep, kWordB}));
  EXPECT_EQ(enc(*tok, "a[SEP]b", false, false),
            (std::vector<TokenId>{kWordA, kWordLBracket, kWordSep, kWordRBracket, kWordB}));
}

TEST(WordPiece, ClosingTokenFollowsTheAddEosFlag) {
  VocabData no_flags = small_vocab();  // as older converters wrote it: no add_* keys
  no_flags.add_bos.reset();
  no_flags.add_eos.reset();
  no_flags.eos.reset();
  const auto tok = build(std::move(no_flags));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(enc(*tok, "a", true), (std::vector<TokenId>{kCls, kWordA, kSep}));

  VocabData bare = small_vocab();
  bare.add_bos = false;
  bare.add_eos = false;
  const auto tok_bare = build(std::move(bare));
  ASSERT_NE(tok_bare, nullptr);
  EXPECT_EQ(enc(*tok_bare, "a", true), (std::vector<TokenId>{kWordA}));
}

TEST(WordPiece, VocabularyWithoutUnknownTokenIsAnError) {
  VocabData d = small_vocab();
  d.tokens[kUnk] = "[NOT_UNK]";
  d.unk.reset();
  // The default [UNK] id (100) is out of range for this vocabulary.
  auto tok = Tokenizer::from_vocab(std::move(d));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("unknown token"), std::string::npos) << tok.error().message;
}

TEST(WordPiece, DecodeJoinsContinuationsAndSpacesWords) {
  const auto tok = build(small_vocab());
  ASSERT_NE(tok, nullptr);
  const std::vector<TokenId> ids = {kCls, kWordUn, kContAff, kContAble, kWordHello, kSep};
  EXPECT_EQ(tok->decode(ids, false), "unaffable hello");
  EXPECT_EQ(tok->decode(ids, true), "[CLS] unaffable hello [SEP]");
  EXPECT_EQ(tok->token_to_bytes(kWordHello), " hello");
  EXPECT_EQ(tok->token_to_bytes(kContAble), "able");
  EXPECT_EQ(tok->token_to_bytes(kSep, false), "");
}

}  // namespace
}  // namespace minfer::tokenizer
