// Stage 15 tests: SequenceState — the gates of one sequence (n-predict, end of
// generation, stop strings, context), its text (a stop string never emitted, held
// bytes released at the end, valid UTF-8 when a character spans tokens) and its
// logprobs, on a hand-made SentencePiece vocabulary with one-hot logits (greedy).
#include "engine/sequence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace minfer::engine {
namespace {

// ids: 0 <unk>, 1 <s>, 2 </s>, 3 <0xE2>, 4 <0x82>, 5 <0xAC>, 6 "a", 7 "b", 8 "▁stop", 9 "x"
std::unique_ptr<tokenizer::Tokenizer> vocab() {
  tokenizer::VocabData d;
  d.model = "llama";
  d.tokens = {"<unk>",  "<s>", "</s>", "<0xE2>",           "<0x82>",
              "<0xAC>", "a",   "b",    "\xE2\x96\x81stop", "x"};
  d.token_types = {2, 3, 3, 6, 6, 6, 1, 1, 1, 1};
  d.bos = 1;
  d.eos = 2;
  auto t = tokenizer::Tokenizer::from_vocab(d);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return std::move(*t);
}

struct Fixture {
  std::unique_ptr<tokenizer::Tokenizer> tok = vocab();
  TokenBytes bytes{*tok};

  std::unique_ptr<SequenceState> make(SequenceOptions o) {
    o.sampler.temp = 0.0f;  // greedy: the one-hot logit decides
    o.sampler.repeat_penalty = 1.0f;
    if (o.n_ctx == 0) o.n_ctx = 64;
    auto s = SequenceState::create(*tok, bytes, o);
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
  // Drives `ids` through next(); returns the concatenated text and the last event.
  std::string run(SequenceState& s, const std::vector<TokenId>& ids, SeqEvent* last = nullptr) {
    std::string text;
    for (TokenId id : ids) {
      auto ev = s.next(one_hot(id));
      EXPECT_TRUE(ev.ok());
      text += ev->text;
      if (last) *last = *ev;
      if (!ev->feed) break;
    }
    return text;
  }
};

TEST(SequenceState, n_predict_stops_on_the_last_token_without_a_forward) {
  Fixture f;
  auto s = f.make({.n_predict = 3});
  SeqEvent last;
  EXPECT_EQ(f.run(*s, {6, 7, 6, 7}, &last), "aba");
  EXPECT_EQ(last.stop, SeqStop::kNPredict);
  EXPECT_FALSE(last.feed);
  EXPECT_EQ(s->n_generated(), 3);
  EXPECT_EQ(s->cursor(), 4);  // prompt 2 + the two fed tokens
}

TEST(SequenceState, feed_last_feeds_the_n_predict_th_token_and_stops) {
  // A chat keeps its whole reply in the KV: the last token comes with feed and the stop.
  Fixture f;
  auto s = f.make({.n_predict = 3, .feed_last = true});
  std::string text;
  SeqEvent ev;
  for (TokenId id : {6, 7, 6}) {
    auto e = s->next(f.one_hot(id));
    ASSERT_TRUE(e.ok());
    text += e->text;
    ev = *e;
    EXPECT_TRUE(ev.feed) << id;
  }
  EXPECT_EQ(text, "aba");
  EXPECT_EQ(ev.stop, SeqStop::kNPredict);
  EXPECT_EQ(ev.pos, 4);
  EXPECT_TRUE(s->done());
  EXPECT_EQ(s->cursor(), 5);  // prompt 2 + all three tokens fed
}

TEST(SequenceState, eog_is_not_emitted_or_counted) {
  Fixture f;
  auto s = f.make({});
  SeqEvent last;
  EXPECT_EQ(f.run(*s, {6, 2}, &last), "a");
  EXPECT_EQ(last.stop, SeqStop::kEog);
  EXPECT_EQ(s->n_generated(), 1);
}

TEST(SequenceState, stop_string_across_tokens_is_never_emitted) {
  Fixture f;
  auto s = f.make({.stop = {"b stop"}});
  std::string text;
  // "a", "b" (held: could begin "b stop"), " stop" completes it.
  auto e1 = s->next(f.one_hot(6));
  text += e1->text;
  auto e2 = s->next(f.one_hot(7));
  EXPECT_EQ(e2->text, "");  // held back
  text += e2->text;
  auto e3 = s->next(f.one_hot(8));
  text += e3->text;
  EXPECT_EQ(text, "a");
  EXPECT_EQ(e3->stop, SeqStop::kStopString);
}

TEST(SequenceState, held_prefix_is_released_when_the_run_ends_otherwise) {
  Fixture f;
  auto s = f.make({.n_predict = 2, .stop = {"b stop"}});
  EXPECT_EQ(f.run(*s, {6, 7}), "ab");
}

TEST(SequenceState, a_character_split_across_tokens_is_emitted_whole) {
  Fixture f;
  auto s = f.make({});
  auto e1 = s->next(f.one_hot(3));
  auto e2 = s->next(f.one_hot(4));
  EXPECT_EQ(e1->text, "");
  EXPECT_EQ(e2->text, "");
  auto e3 = s->next(f.one_hot(5));
  EXPECT_EQ(e3->text, "\xE2\x82\xAC");  // €
}

TEST(SequenceState, an_unfinished_character_at_the_end_is_never_emitted_raw) {
  Fixture f;
  auto s = f.make({.n_predict = 2});
  const std::string text = f.run(*s, {6, 3});
  EXPECT_EQ(text.substr(0, 1), "a");
  EXPECT_EQ(text.find('\xE2'), std::string::npos);  // no lone lead byte
}

TEST(SequenceState, context_gate_stops_before_a_position_past_n_ctx) {
  Fixture f;
  auto s = f.make({.n_ctx = 4});
  SeqEvent last;
  EXPECT_EQ(f.run(*s, {6, 6, 6, 6}, &last), "aaa");
  EXPECT_EQ(last.stop, SeqStop::kContext);
  EXPECT_EQ(s->n_generated(), 3);  // positions 2, 3 fed; the third token cannot be
}

TEST(SequenceState, context_gate_first_ends_at_a_full_context_without_sampling) {
  Fixture f;
  auto s = f.make({.n_ctx = 4, .context_gate_first = true});
  SeqEvent last;
  // Positions 2 and 3 take the two sampled tokens; the third step finds no position
  // left and samples nothing (the chat's gate): no token, no text, kContext.
  EXPECT_EQ(f.run(*s, {6, 6, 7, 7}, &last), "aa");
  EXPECT_EQ(last.stop, SeqStop::kContext);
  EXPECT_EQ(last.token, -1);
  EXPECT_FALSE(last.feed);
  EXPECT_EQ(s->n_generated(), 2);
  EXPECT_EQ(s->generated(), (std::vector<TokenId>{6, 6}));
}

TEST(SequenceState, context_shift_keeps_both_gates_open_and_discard_moves_the_cursor_back) {
  Fixture f;
  for (const bool gate_first : {false, true}) {
    auto s = f.make({.n_ctx = 4, .context_gate_first = gate_first, .context_shift = true});
    // Positions 2 and 3, then a token for position 4 = n_ctx: the driver makes room.
    auto a = s->next(f.one_hot(6));
    auto b = s->next(f.one_hot(6));
    auto c = s->next(f.one_hot(7));
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(b->pos, 3);
    EXPECT_TRUE(c->feed) << gate_first;
    EXPECT_EQ(c->pos, 4);
    EXPECT_EQ(c->stop, SeqStop::kNone);
    s->discard(2);  // positions 2 and 3 went: the token goes to 2, the next to 3
    EXPECT_EQ(s->cursor(), 3);
    auto d = s->next(f.one_hot(6));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->pos, 3);
    EXPECT_EQ(s->n_generated(), 4);
  }
}

TEST(SequenceState, logprobs_are_the_log_softmax_of_the_raw_logits) {
  Fixture f;
  auto s = f.make({.top_logprobs = 2});
  std::vector<float> l(static_cast<size_t>(f.tok->n_vocab()), 0.0f);
  l[7] = 2.0f;
  l[9] = 1.0f;
  auto ev = s->next(l);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->token, 7);
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  EXPECT_NEAR(ev->logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(ev->top.size(), 2u);
  EXPECT_EQ(ev->top[0].token, 7);
  EXPECT_EQ(ev->top[1].token, 9);
  EXPECT_NEAR(ev->top[1].logprob, 1.0 - std::log(z), 1e-5);
}

TEST(SequenceState, reset_starts_a_fresh_run_with_the_same_seed) {
  Fixture f;
  SequenceOptions o{.n_predict = 4, .n_ctx = 16};
  o.sampler.seed = 5;
  auto s = SequenceState::create(*f.tok, f.bytes, o);
  ASSERT_TRUE(s.ok());
  std::vector<float> l(static_cast<size_t>(f.tok->n_vocab()), 1.0f);  // flat: the RNG decides
  const std::vector<TokenId> prompt = {1};
  std::vector<TokenId> a, b;
  for (auto* out : {&a, &b}) {
    (*s)->reset(prompt);
    for (int i = 0; i < 4; ++i) {
      auto ev = (*s)->next(l);
      ASSERT_TRUE(ev.ok());
      out->push_back(ev->token);
    }
  }
  EXPECT_EQ(a, b);
}

// Allows only "b" (id 7) until it has seen two tokens, then only </s>.
class OnlyB final : public TokenConstraint {
 public:
  Status apply(std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i) {
      const bool ok = seen_ < 2 ? i == 7 : i == 2;
      if (!ok) logits[i] = -std::numeric_limits<float>::infinity();
    }
    return Ok{};
  }
  void accept(TokenId) override { seen_++; }
  void reset() override { seen_ = 0; }
  int seen_ = 0;
};

TEST(SequenceState, a_constraint_masks_a_copy_and_sees_every_accepted_token) {
  Fixture f;
  SequenceOptions o{.n_ctx = 16, .top_logprobs = 0};
  o.sampler.temp = 0.0f;
  auto s = SequenceState::create(*f.tok, f.bytes, o, std::make_unique<OnlyB>());
  ASSERT_TRUE(s.ok());
  const std::vector<TokenId> prompt = {1};
  for (int run = 0; run < 2; ++run) {  // reset() resets the constraint too
    (*s)->reset(prompt);
    std::string text;
    SeqEvent last;
    for (int i = 0; i < 4; ++i) {
      auto ev = (*s)->next(f.one_hot(6));  // the model wants "a"; the constraint says "b"
      ASSERT_TRUE(ev.ok());
      text += ev->text;
      last = *ev;
      if (!ev->feed) break;
    }
    EXPECT_EQ(text, "bb");
    EXPECT_EQ(last.stop, SeqStop::kEog);
    EXPECT_LT(last.logprob, -5.0f);  // logprobs are the model's, not the masked ones
  }
}

TEST(SequenceState, invalid_sampler_config_is_an_error) {
  Fixture f;
  SequenceOptions o;
  o.n_ctx = 8;
  o.sampler.top_p = 2.0f;
  EXPECT_FALSE(SequenceState::create(*f.tok, f.bytes, o).ok());
  o.sampler.top_p = 0.9f;
  o.n_ctx = 0;
  EXPECT_FALSE(SequenceState::create(*f.tok, f.bytes, o).ok());
}

}  // namespace
}  // namespace minfer::engine
