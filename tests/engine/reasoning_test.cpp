// Stage 15 tests: a thinking block split from the answer — ThinkSplitter on byte
// feeds (tags across feeds, forced-open prompts, whitespace framing) and SequenceState
// with it (the reasoning budget's forced close, stop strings and the constraint on the
// answer only), on a hand-made SentencePiece vocabulary with one-hot logits (greedy).
#include "engine/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/sequence.h"

namespace minfer::engine {
namespace {

struct Split {
  std::string reasoning, content;
};

Split feed_all(ThinkSplitter& s, const std::vector<std::string>& feeds, bool flush = true) {
  Split out;
  for (const std::string& f : feeds) s.feed(f, out.reasoning, out.content);
  if (flush) s.flush(out.reasoning, out.content);
  return out;
}

TEST(ThinkSplitter, forced_open_block_splits_at_a_close_tag_spanning_feeds) {
  ThinkSplitter s(/*forced_open=*/true);
  const Split out = feed_all(s, {"\nLet me ", "think.\n</th", "ink>", "\n\nThe answer."});
  EXPECT_EQ(out.reasoning, "Let me think.");
  EXPECT_EQ(out.content, "The answer.");
  EXPECT_EQ(s.phase(), ThinkSplitter::Phase::kContent);
}

TEST(ThinkSplitter, open_tag_written_by_the_model_spanning_feeds) {
  ThinkSplitter s;
  const Split out = feed_all(s, {" <", "thi", "nk>", "hmm", "</think>", "ok"});
  EXPECT_EQ(out.reasoning, "hmm");
  EXPECT_EQ(out.content, "ok");
}

TEST(ThinkSplitter, text_without_a_block_is_all_content_as_written) {
  ThinkSplitter s;
  const Split out = feed_all(s, {" <th", "ing> and </think> stay"});
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, " <thing> and </think> stay");
}

TEST(ThinkSplitter, only_a_possible_close_tag_prefix_is_held) {
  ThinkSplitter s(/*forced_open=*/true);
  Split out;
  s.feed("a b</t", out.reasoning, out.content);
  EXPECT_EQ(out.reasoning, "a b");  // "</t" may begin the close tag
  s.feed("x", out.reasoning, out.content);
  EXPECT_EQ(out.reasoning, "a b</tx");  // it did not
  s.feed("  ", out.reasoning, out.content);
  EXPECT_EQ(out.reasoning, "a b</tx");  // whitespace waits for what follows it
  s.feed("y", out.reasoning, out.content);
  EXPECT_EQ(out.reasoning, "a b</tx  y");
  EXPECT_EQ(out.content, "");
}

TEST(ThinkSplitter, an_unclosed_block_is_reasoning_at_the_end) {
  ThinkSplitter s(/*forced_open=*/true);
  const Split out = feed_all(s, {"still thinking </thi"});
  EXPECT_EQ(out.reasoning, "still thinking </thi");
  EXPECT_EQ(out.content, "");
}

TEST(ThinkSplitter, every_way_of_cutting_the_stream_gives_the_same_split) {
  // Streaming invariance: the bytes cut at any one or two points split exactly as the
  // whole text fed at once does.
  const std::vector<std::pair<std::string, bool>> texts = {
      {"<think>\n a </thi b\n</think>\n\n answer </think> end", false},
      {"  <thin", false},
      {"x <think>y</think>", false},
      {"reason </ing>\n</think>answer", true},
      {"\n\n</think>\n", true},
  };
  for (const auto& [text, forced] : texts) {
    ThinkSplitter whole(forced);
    const Split want = feed_all(whole, {text});
    if (text.starts_with("<think>\n a")) {
      ASSERT_EQ(want.reasoning, "a </thi b");
      ASSERT_EQ(want.content, "answer </think> end");  // one block: a later tag is text
    }
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t j = i; j <= text.size(); ++j) {
        ThinkSplitter s(forced);
        const Split got = feed_all(s, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
        ASSERT_EQ(got.reasoning, want.reasoning) << text << " cut at " << i << ", " << j;
        ASSERT_EQ(got.content, want.content) << text << " cut at " << i << ", " << j;
      }
    }
  }
}

// ids: 0 <unk>, 1 <s>, 2 </s>, 3 "<th", 4 "ink>", 5 "</th", 6 "a", 7 "b", 8 <0x0A>, 9 "{"
struct Fixture {
  std::unique_ptr<tokenizer::Tokenizer> tok = [] {
    tokenizer::VocabData d;
    d.model = "llama";
    d.tokens = {"<unk>", "<s>", "</s>", "<th", "ink>", "</th", "a", "b", "<0x0A>", "{"};
    d.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 6, 1};
    d.bos = 1;
    d.eos = 2;
    auto t = tokenizer::Tokenizer::from_vocab(d);
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    return std::move(*t);
  }();
  TokenBytes bytes{*tok};

  std::unique_ptr<SequenceState> make(SequenceOptions o,
                                      std::unique_ptr<TokenConstraint> c = nullptr) {
    o.sampler.temp = 0.0f;
    o.sampler.repeat_penalty = 1.0f;
    if (o.n_ctx == 0) o.n_ctx = 64;
    auto s = SequenceState::create(*tok, bytes, o, std::move(c));
    EXPECT_TRUE(s.ok());
    const std::vector<TokenId> prompt = {1, 6};
    (*s)->reset(prompt);
    return std::move(*s);
  }
  std::vector<float> one_hot(TokenId id) const {
    std::vector<float> l(static_cast<size_t>(tok->n_vocab()), 0.0f);
    l[static_cast<size_t>(id)] = 10.0f;
    return l;
  }
  // Drives the model's wishes `ids` through next(); the split text and the tokens taken.
  Split run(SequenceState& s, const std::vector<TokenId>& ids, std::vector<TokenId>* taken) {
    Split out;
    for (TokenId id : ids) {
      auto ev = s.next(one_hot(id));
      EXPECT_TRUE(ev.ok());
      out.reasoning += ev->reasoning;
      out.content += ev->text;
      if (taken != nullptr && ev->token >= 0) taken->push_back(ev->token);
      if (!ev->feed) break;
    }
    return out;
  }
};

TEST(SequenceStateReasoning, budget_closes_the_block_with_the_close_tokens_then_the_answer) {
  Fixture f;
  SequenceOptions o{.n_predict = 9};
  o.reasoning = {.track = true, .forced_open = true, .budget = 3, .close_tokens = {5, 4, 8, 8}};
  auto s = f.make(o);
  std::vector<TokenId> taken;
  // The model would say "a" forever; after 3 reasoning tokens the close is fed.
  const Split out = f.run(*s, std::vector<TokenId>(12, 6), &taken);
  EXPECT_EQ(taken, (std::vector<TokenId>{6, 6, 6, 5, 4, 8, 8, 6, 6}));
  EXPECT_EQ(out.reasoning, "aaa");
  EXPECT_EQ(out.content, "aa");
  EXPECT_EQ(s->n_reasoning(), 3);
  EXPECT_TRUE(s->in_answer());
}

TEST(SequenceStateReasoning, budget_zero_closes_a_block_the_model_opens) {
  Fixture f;
  SequenceOptions o{.n_predict = 6};
  o.reasoning = {.track = true, .budget = 0, .close_tokens = {5, 4}};
  auto s = f.make(o);
  std::vector<TokenId> taken;
  const Split out = f.run(*s, {3, 4, 6, 6, 7, 7, 7}, &taken);
  EXPECT_EQ(taken, (std::vector<TokenId>{3, 4, 5, 4, 7, 7}));
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "bb");
}

TEST(SequenceStateReasoning, not_split_keeps_the_tags_in_the_text_and_the_budget_still_holds) {
  Fixture f;
  SequenceOptions o{.n_predict = 6};
  o.reasoning = {
      .track = true, .split = false, .forced_open = true, .budget = 2, .close_tokens = {5, 4}};
  auto s = f.make(o);
  const Split out = f.run(*s, std::vector<TokenId>(8, 6), nullptr);
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "aa</think>aa");
}

TEST(SequenceStateReasoning, stop_strings_apply_to_the_answer_only) {
  Fixture f;
  SequenceOptions o{.stop = {"b"}};
  o.reasoning = {.track = true, .forced_open = true};
  auto s = f.make(o);
  SeqEvent last;
  Split out;
  for (TokenId id : std::vector<TokenId>{7, 6, 5, 4, 6, 7, 6}) {
    auto ev = s->next(f.one_hot(id));
    ASSERT_TRUE(ev.ok());
    out.reasoning += ev->reasoning;
    out.content += ev->text;
    last = *ev;
    if (!ev->feed) break;
  }
  EXPECT_EQ(out.reasoning, "ba");
  EXPECT_EQ(out.content, "a");
  EXPECT_EQ(last.stop, SeqStop::kStopString);
}

// Allows "{" only, and counts what it is asked and told.
class OnlyBrace final : public TokenConstraint {
 public:
  Status apply(std::span<float> logits) override {
    applied++;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (i != 9) logits[i] = -1e30f;
    }
    return Ok{};
  }
  void accept(TokenId) override { accepted++; }
  void reset() override { applied = accepted = 0; }
  int applied = 0, accepted = 0;
};

TEST(SequenceStateReasoning, the_constraint_starts_after_the_block) {
  Fixture f;
  SequenceOptions o{.n_predict = 6};
  o.reasoning = {.track = true, .forced_open = true, .budget = 2, .close_tokens = {5, 4}};
  auto c = std::make_unique<OnlyBrace>();
  OnlyBrace* seen = c.get();
  auto s = f.make(o, std::move(c));
  std::vector<TokenId> taken;
  const Split out = f.run(*s, std::vector<TokenId>(6, 7), &taken);
  EXPECT_EQ(taken, (std::vector<TokenId>{7, 7, 5, 4, 9, 9}));
  EXPECT_EQ(out.reasoning, "bb");
  EXPECT_EQ(out.content, "{{");
  EXPECT_EQ(seen->accepted, 2);  // the answer's tokens only
  EXPECT_EQ(seen->applied, 2);
}

}  // namespace
}  // namespace minfer::engine
