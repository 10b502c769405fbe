// Stage 4 tests: special tokens (parse_special on/off, user-defined tokens, Phi-3's
// rstrip), BOS/EOS per vocabulary metadata, the end-of-generation set, decoding of
// control tokens, the stream decoder on split UTF-8, and load errors.
// Invariants checked: special text becomes one token only with parse_special; BOS /
// EOS follow add_special and the metadata; StreamDecoder never emits a cut sequence.
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/unicode.h"
#include "vocab_fixture.h"

namespace minfer::tokenizer::testing {
namespace {

bool contains(const std::vector<TokenId>& ids, TokenId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::vector<TokenId> enc(const Tokenizer& t, const std::string& s, bool add_special,
                         bool parse_special) {
  auto r = t.encode(s, EncodeOptions{.add_special = add_special, .parse_special = parse_special});
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<TokenId>{};
}

TEST(Special, parse_special_turns_control_text_into_tokens) {
  const Tokenizer* t = load_vocab("qwen2");
  ASSERT_NE(t, nullptr);
  const TokenId start = t->find_token("<|im_start|>");
  const TokenId end = t->find_token("<|im_end|>");
  ASSERT_NE(start, kNoToken);
  ASSERT_NE(end, kNoToken);
  const std::string text = "<|im_start|>user\nhi<|im_end|>";

  const auto on = enc(*t, text, false, true);
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on.front(), start);
  EXPECT_EQ(on.back(), end);
  EXPECT_EQ(on, [&] {
    std::vector<TokenId> v{start};
    const auto mid = enc(*t, "user\nhi", false, false);
    v.insert(v.end(), mid.begin(), mid.end());
    v.push_back(end);
    return v;
  }());

  const auto off = enc(*t, text, false, false);
  EXPECT_FALSE(contains(off, start));
  EXPECT_FALSE(contains(off, end));
  EXPECT_EQ(t->decode(off), text);  // the text survives as ordinary tokens
}

TEST(Special, control_tokens_decode_only_when_special) {
  const Tokenizer* t = load_vocab("qwen2");
  ASSERT_NE(t, nullptr);
  const TokenId start = t->find_token("<|im_start|>");
  EXPECT_EQ(t->token_to_bytes(start, false), "");
  EXPECT_EQ(t->token_to_bytes(start, true), "<|im_start|>");
  EXPECT_EQ(t->decode({start}, true), "<|im_start|>");
}

TEST(Special, spm_prefixes_a_space_after_special_tokens) {
  const Tokenizer* t = load_vocab("llama-spm");
  ASSERT_NE(t, nullptr);
  const auto with_bos = enc(*t, "Hello", true, false);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 1);  // <s>
  EXPECT_EQ(enc(*t, "<s>Hello", false, true), with_bos);
  EXPECT_EQ(t->decode(with_bos), " Hello");  // BOS first: its (empty) piece takes the strip
  EXPECT_EQ(t->decode(enc(*t, "Hello", false, false)), "Hello");
}

TEST(Special, phi3_special_tokens_strip_whitespace_on_their_right) {
  const Tokenizer* t = load_vocab("phi-3");
  ASSERT_NE(t, nullptr);
  const TokenId user = t->find_token("<|user|>");
  ASSERT_NE(user, kNoToken);
  EXPECT_TRUE(t->token_attr(user) & kAttrRstrip);
  EXPECT_EQ(enc(*t, "<|user|>\n Hello", false, true), enc(*t, "<|user|>Hello", false, true));
  EXPECT_FALSE(t->token_attr(t->find_token("<s>")) & kAttrRstrip);
}

TEST(Special, bos_eos_follow_add_special_and_metadata) {
  struct Case {
    const char* vocab;
    TokenId bos;  // kNoToken: no BOS is added
  };
  for (const Case c :
       {Case{"llama-spm", 1}, Case{"phi-3", 1}, Case{"llama-bpe", 128000},
        Case{"deepseek-coder", 32013}, Case{"gpt-2", kNoToken}, Case{"qwen2", kNoToken}}) {
    const Tokenizer* t = load_vocab(c.vocab);
    ASSERT_NE(t, nullptr);
    const auto plain = enc(*t, "Hi there", false, false);
    const auto with = enc(*t, "Hi there", true, false);
    if (c.bos == kNoToken) {
      EXPECT_EQ(with, plain) << c.vocab;
    } else {
      ASSERT_EQ(with.size(), plain.size() + 1) << c.vocab;
      EXPECT_EQ(with.front(), c.bos) << c.vocab;
      EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with.begin() + 1)) << c.vocab;
    }
    EXPECT_FALSE(t->special().add_eos) << c.vocab;
    EXPECT_EQ(enc(*t, "", true, false).size(), c.bos == kNoToken ? 0u : 1u) << c.vocab;
  }
}

TEST(Special, eog_set_holds_eos_and_known_end_tokens) {
  const Tokenizer* qwen = load_vocab("qwen2");
  ASSERT_NE(qwen, nullptr);
  EXPECT_TRUE(qwen->is_eog(qwen->find_token("<|im_end|>")));
  EXPECT_TRUE(qwen->is_eog(qwen->find_token("<|endoftext|>")));
  EXPECT_FALSE(qwen->is_eog(qwen->find_token("<|im_start|>")));
  const Tokenizer* llama3 = load_vocab("llama-bpe");
  ASSERT_NE(llama3, nullptr);
  EXPECT_TRUE(llama3->is_eog(128001));  // <|end_of_text|>, the eos
  EXPECT_TRUE(llama3->is_eog(llama3->find_token("<|eot_id|>")));
  EXPECT_EQ(llama3->special().eot, llama3->find_token("<|eot_id|>"));
  EXPECT_FALSE(llama3->is_eog(llama3->find_token("Hello")));
  EXPECT_FALSE(llama3->is_eog(kNoToken));
}

TEST(StreamDecoder, holds_back_split_utf8_until_complete) {
  const Tokenizer* t = load_vocab("llama-spm");
  ASSERT_NE(t, nullptr);
  // U+1F642 is not in the Llama 2 vocabulary: four byte tokens <0xF0><0x9F><0x99><0x82>.
  const auto ids = enc(*t, "\xF0\x9F\x99\x82", false, false);
  ASSERT_GE(ids.size(), 4u);
  StreamDecoder dec(*t);
  std::string got;
  for (size_t i = 0; i + 4 < ids.size(); ++i) got += dec.push(ids[i]);  // the "▁"
  const size_t b = ids.size() - 4;
  EXPECT_EQ(dec.push(ids[b]), "");
  EXPECT_EQ(dec.push(ids[b + 1]), "");
  EXPECT_EQ(dec.push(ids[b + 2]), "");
  EXPECT_EQ(dec.push(ids[b + 3]), "\xF0\x9F\x99\x82");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, every_chunk_is_complete_utf8_and_all_bytes_arrive) {
  const std::string text =
      "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x99\x82\xF0\x9F\x8E\x89 "
      "\xD8\xB3\xD9\x84\xD8\xA7\xD9\x85";
  for (const char* name : kVocabs) {
    const Tokenizer* t = load_vocab(name);
    ASSERT_NE(t, nullptr);
    const auto ids = enc(*t, text, false, false);
    StreamDecoder dec(*t);
    std::string all, expected;
    for (const TokenId id : ids) {
      const std::string chunk = dec.push(id);
      EXPECT_EQ(utf8::incomplete_tail(chunk), 0u) << name;
      all += chunk;
      expected += t->token_to_bytes(id);
    }
    all += dec.flush();
    EXPECT_EQ(all, expected) << name;
  }
}

TEST(StreamDecoder, flush_returns_an_incomplete_tail) {
  const Tokenizer* t = load_vocab("llama-spm");
  ASSERT_NE(t, nullptr);
  StreamDecoder dec(*t);
  EXPECT_EQ(dec.push(t->find_token("<0xE4>")), "");
  EXPECT_EQ(dec.flush(), "\xE4");
}

TEST(Load, unknown_pre_tokenizer_is_an_error_naming_it) {
  VocabData d;
  d.model = "gpt2";
  d.pre = "made-up-pre";
  d.tokens = {"a", "b", "ab"};
  d.merges = {"a b"};
  auto t = Tokenizer::from_vocab(d);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("made-up-pre"), std::string::npos) << t.error().message;
}

TEST(Load, unknown_model_is_an_error_naming_it) {
  VocabData d;
  d.model = "wordpiece-x";
  d.tokens = {"a"};
  auto t = Tokenizer::from_vocab(d);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("wordpiece-x"), std::string::npos);
}

TEST(Load, tiny_bpe_from_vocab_data_merges_by_rank) {
  VocabData d;
  d.model = "gpt2";
  d.pre = "gpt-2";
  d.tokens = {"a", "b", "c", "ab", "bc", "abc"};
  d.merges = {"b c", "a b", "a bc"};  // "b c" outranks "a b"
  auto t = Tokenizer::from_vocab(d);
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto ids = (*t)->encode("abc", EncodeOptions{.add_special = false});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{5}));  // a + bc → abc
  ids = (*t)->encode("ab", EncodeOptions{.add_special = false});
  EXPECT_EQ(*ids, (std::vector<TokenId>{3}));
}

}  // namespace
}  // namespace minfer::tokenizer::testing
