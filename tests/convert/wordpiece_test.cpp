// The WordPiece pieces of the converter: SHA-256 against FIPS 180-4's examples, the
// fingerprint of the uncased BERT vocabulary against the value convert_hf_to_gguf.py
// lists for it (bge-small-en-v1.5 / jina-embeddings-v2-base-en), the phantom-space
// token list, and refusals of what the converter would not name.
#include "convert/wordpiece.h"

#include <gtest/gtest.h>

#include <fstream>

#include "convert/sha256.h"

namespace minfer::convert {
namespace {

using nlohmann::json;

json bert_uncased() {
  std::ifstream f(std::string(MINFER_TESTDATA_DIR) + "/tokenizers/minilm/tokenizer.json");
  return json::parse(f);
}

TEST(ConvertSha256, MatchesFips180Examples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // 64 bytes: the padding takes a block of its own.
  EXPECT_EQ(sha256_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(ConvertWordPiece, UncasedBertFingerprintIsTheConvertersListedHash) {
  auto fp = wordpiece_fingerprint(bert_uncased());
  ASSERT_TRUE(fp.ok()) << fp.error().message;
  EXPECT_EQ(*fp, "0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f");
}

TEST(ConvertWordPiece, TokensTakeThePhantomSpaceForm) {
  auto v = wordpiece_vocab(bert_uncased(), 30522);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->pre, "jina-v2-en");  // listed after bert-bge with the same hash: it wins
  ASSERT_EQ(v->tokens.size(), 30522u);
  EXPECT_EQ(v->tokens[0], "[PAD]");  // control tokens stay as they are
  EXPECT_EQ(v->types[0], 3);
  EXPECT_EQ(v->tokens[101], "[CLS]");
  EXPECT_EQ(v->tokens[1], "\xe2\x96\x81[unused0]");  // not an added token: a word
  EXPECT_EQ(v->types[1], 1);

  EXPECT_EQ(v->tokens[1996], "\xe2\x96\x81the");
  EXPECT_EQ(v->tokens[30521], "\xef\xbd\x9e");  // "##～" → "～"
  // A larger vocab_size pads with UNUSED "[PAD{i}]".
  auto padded = wordpiece_vocab(bert_uncased(), 30524);
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->tokens[30523], "[PAD30523]");
  EXPECT_EQ(padded->types[30523], 5);
}

TEST(ConvertWordPiece, RefusesWhatTheConverterWouldNotName) {
  json tok = bert_uncased();
  auto small = wordpiece_vocab(tok, 30000);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message.find("outside config.json's vocab_size 30000"),
            std::string::npos);

  json cut = tok;
  cut["model"]["vocab"].erase("apple");  // a word of the check text: another fingerprint
  auto r = wordpiece_vocab(cut, 30522);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("does not recognise (fingerprint"), std::string::npos)
      << r.error().message;

  json cased = tok;
  cased["normalizer"]["lowercase"] = false;
  r = wordpiece_vocab(cased, 30522);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("only the uncased BERT normalizer"), std::string::npos);

  json bpe = tok;
  bpe["model"]["type"] = "BPE";
  r = wordpiece_vocab(bpe, 30522);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("WordPiece only"), std::string::npos);
}

}  // namespace
}  // namespace minfer::convert
