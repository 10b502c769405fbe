// Stage 16 tests (sessions): delta prefill counts, KV consistency against a fresh
// prefill of the canonical render (bitwise), the end-of-turn seam, /regen seeding,
// /clear and the overflow policy — on a tiny random model with the Qwen2 vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chat_fixture.h"

namespace minfer::chat {
namespace {

using testing::chat_engine;
using testing::fresh_prefill_logits;
using testing::make_conversation;
using testing::pinned;
using testing::same_bits;
using testing::turn;

const ChatMlRenderer kChatMl;

std::vector<TokenId> encode(const Conversation& c, const std::string& text) {
  auto r = c.tokenize(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::vector<TokenId>{};
}

bool is_prefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

TEST(Conversation, FirstTurnPrefillsTheWholeRenderAndKeepsCursorEqualToMirror) {
  auto t = chat_engine(512, "chat-first");
  ASSERT_TRUE(t.engine);
  ConversationOptions o = pinned(*t, " a", 4);
  o.system = "You are terse.";
  auto c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  const TurnStats s = turn(*c, "Hi there");
  const auto expect = encode(*c,
                             "<|im_start|>system\nYou are terse.<|im_end|>\n"
                             "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(s.n_prompt, static_cast<int32_t>(expect.size()));
  EXPECT_EQ(s.n_prefilled, static_cast<int32_t>(expect.size()));
  EXPECT_EQ(s.n_reused, 0);
  EXPECT_EQ(s.n_generated, 4);
  EXPECT_EQ(s.end, ReplyEnd::kNPredict);
  EXPECT_EQ(s.reply, " a a a a");
  EXPECT_EQ(c->cursor(), c->stream().size());
  EXPECT_EQ(c->cursor(), expect.size() + 4);
  ASSERT_EQ(c->messages().size(), 3u);
  EXPECT_EQ(c->messages()[2].role, "assistant");
}

TEST(Conversation, LaterTurnsPrefillOnlyTheDeltaWithTheSeamExactCount) {
  auto t = chat_engine(512, "chat-delta");
  ASSERT_TRUE(t.engine);
  auto c = make_conversation(*t, kChatMl, pinned(*t, " a", 3));
  ASSERT_TRUE(c);
  turn(*c, "first question");
  const std::vector<std::string> msgs = {"second one", "and a third, longer question here",
                                         "fourth"};
  for (size_t i = 0; i < msgs.size(); ++i) {
    const uint32_t before = c->cursor();
    const uint64_t fwd_before = t->stats().executes;
    const TurnStats s = turn(*c, msgs[i]);
    // The reply ended by -n (no <|im_end|> in the KV): the delta closes it (the seam)
    // and opens the next turn — and nothing else is forwarded.
    const auto delta = encode(
        *c, "<|im_end|>\n<|im_start|>user\n" + msgs[i] + "<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(s.turn, static_cast<int32_t>(i) + 2);
    EXPECT_TRUE(s.seam);
    EXPECT_EQ(s.n_rewound, 0);
    EXPECT_EQ(s.n_reused, static_cast<int32_t>(before));
    EXPECT_EQ(s.n_prefilled, static_cast<int32_t>(delta.size())) << "turn " << s.turn;
    EXPECT_EQ(c->cursor(), before + delta.size() + 3);
    // One prefill forward plus one decode forward per generated token.
    EXPECT_EQ(t->stats().executes - fwd_before, 1u + 3u);
  }
}

TEST(Conversation, EogIsDecodedIntoTheKvAndTheNextDeltaStartsAfterIt) {
  auto t = chat_engine(512, "chat-eog");
  ASSERT_TRUE(t.engine);
  // <|im_end|> pinned: every reply is empty and ends at once with end-of-turn.
  auto c = make_conversation(*t, kChatMl, pinned(*t, "<|im_end|>", 16));
  ASSERT_TRUE(c);
  const TurnStats s1 = turn(*c, "hello");
  EXPECT_EQ(s1.end, ReplyEnd::kEog);
  EXPECT_EQ(s1.n_generated, 0);
  EXPECT_EQ(c->stream().back(), testing::token_id(*t, "<|im_end|>"));
  const uint32_t before = c->cursor();
  const TurnStats s2 = turn(*c, "again");
  EXPECT_FALSE(s2.seam);
  EXPECT_EQ(s2.n_reused, static_cast<int32_t>(before));
  EXPECT_EQ(s2.n_prefilled, static_cast<int32_t>(encode(*c,
                                                        "\n<|im_start|>user\nagain<|im_end|>\n"
                                                        "<|im_start|>assistant\n")
                                                     .size()));
}

// The KV-consistency invariant, end to end: after N turns of every ending kind, the
// logits for the next token equal a fresh engine's prefill of the canonical render.
TEST(Conversation, KvAfterNTurnsMatchesFreshPrefillOfCanonicalRenderBitwise) {
  auto t = chat_engine(1024, "chat-kv");
  auto fresh = chat_engine(1024, "chat-kv-fresh");
  ASSERT_TRUE(t.engine && fresh.engine);
  ConversationOptions o;
  o.n_predict = 6;
  o.sampler.seed = 11;
  o.sampler.temp = 0.9f;
  // The sampler this test was written with (before the defaults became llama.cpp's):
  // its replies never start with a token that merges with the generation prompt, so the
  // mirror stays a prefix of the canonical render (a merge is the rewind case, covered
  // by the rewind tests).
  o.sampler.min_p = 0.0f;
  o.sampler.repeat_penalty = 1.1f;
  o.system = "Be brief.";
  o.stop = {"zzzz-never"};
  std::vector<float> first_logits;
  bool want = false;
  o.on_logits = [&](std::span<const float> l) {
    if (want) first_logits.assign(l.begin(), l.end());
    want = false;
  };
  auto c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  const std::vector<std::string> msgs = {"one", "two two", "three: a longer message", "four",
                                         "five?"};
  for (const std::string& m : msgs) {
    want = true;
    const TurnStats s = turn(*c, m);
    ASSERT_FALSE(first_logits.empty());
    auto text = c->render(false);
    ASSERT_TRUE(text.ok());
    // The mirror is a prefix of the canonical render's tokens...
    const auto canon = encode(*c, *text);
    // (the render ends with the reply's <|im_end|>\n, which the KV has not seen yet)
    // ...and the logits the reply started from equal a fresh prefill of the render up
    // to the generation prompt.
    std::vector<Message> upto(c->messages().begin(), c->messages().end() - 1);
    auto prompt_text = kChatMl.render(upto, true);
    ASSERT_TRUE(prompt_text.ok());
    const auto prompt = encode(*c, *prompt_text);
    EXPECT_EQ(s.n_prompt, static_cast<int32_t>(prompt.size()));
    EXPECT_TRUE(same_bits(first_logits, fresh_prefill_logits(*fresh, prompt, 1024)))
        << "turn " << s.turn << " (reused " << s.n_reused << ", rewound " << s.n_rewound << ")";
    EXPECT_TRUE(is_prefix(
        std::vector<TokenId>(c->stream().begin(), c->stream().begin() + s.n_prompt), canon));
  }
}

TEST(Conversation, RegenReplaysTheDeltaAndAttemptZeroReproducesTheReplyExactly) {
  auto t = chat_engine(512, "chat-regen");
  ASSERT_TRUE(t.engine);
  ConversationOptions o;
  o.n_predict = 8;
  o.sampler.seed = 7;
  o.sampler.temp = 0.8f;
  auto c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  turn(*c, "warm-up");
  std::string shown;
  const TurnStats s0 = turn(*c, "tell me something", &shown);
  const std::vector<TokenId> stream0 = c->stream();
  const uint32_t turn_pos = c->turn_pos();
  EXPECT_EQ(shown, s0.reply);

  auto r1 = c->regen([](std::string_view) {});
  ASSERT_TRUE(r1.ok()) << r1.error().message;
  EXPECT_TRUE(r1->regen);
  EXPECT_EQ(r1->turn, s0.turn);
  EXPECT_EQ(r1->attempt, 1);
  // O(1) rollback to the turn start, then the same delta again.
  EXPECT_EQ(r1->n_reused, static_cast<int32_t>(turn_pos));
  EXPECT_EQ(r1->n_prefilled, s0.n_prefilled);
  EXPECT_EQ(r1->n_rewound, 0);
  EXPECT_EQ(c->messages().size(), 4u);

  // Replaying draw 0 gives the first reply back, token for token.
  auto r0 = c->regen([](std::string_view) {}, 0);
  ASSERT_TRUE(r0.ok()) << r0.error().message;
  EXPECT_EQ(r0->reply, s0.reply);
  EXPECT_EQ(c->stream(), stream0);

  // Another conversation with the same seed and history draws the same attempt 1.
  auto c2 = make_conversation(*t, kChatMl, o);
  t->clear_kv();
  turn(*c2, "warm-up");
  turn(*c2, "tell me something");
  auto r1b = c2->regen([](std::string_view) {});
  ASSERT_TRUE(r1b.ok());
  EXPECT_EQ(r1b->reply, r1->reply);
}

TEST(Conversation, RegenAtTemperatureZeroGivesTheSameReply) {
  auto t = chat_engine(512, "chat-regen0");
  ASSERT_TRUE(t.engine);
  ConversationOptions o;
  o.n_predict = 6;
  o.sampler.temp = 0.0f;
  auto c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  const TurnStats s = turn(*c, "hello");
  auto r = c->regen([](std::string_view) {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reply, s.reply);
  EXPECT_EQ(r->n_generated, s.n_generated);
}

TEST(Conversation, RegenWithoutAReplyIsAnError) {
  auto t = chat_engine(256, "chat-regen-none");
  ASSERT_TRUE(t.engine);
  auto c = make_conversation(*t, kChatMl, pinned(*t, " a", 2));
  auto r = c->regen([](std::string_view) {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "no assistant reply to regenerate");
}

TEST(Conversation, ClearKeepsTheSystemPromptAndRestartsTurnNumbering) {
  auto t = chat_engine(512, "chat-clear");
  ASSERT_TRUE(t.engine);
  ConversationOptions o = pinned(*t, " a", 2);
  o.system = "sys";
  auto c = make_conversation(*t, kChatMl, o);
  const TurnStats a = turn(*c, "x");
  turn(*c, "y");
  c->clear();
  EXPECT_EQ(c->cursor(), 0u);
  ASSERT_EQ(c->messages().size(), 1u);
  EXPECT_EQ(c->messages()[0].role, "system");
  const TurnStats b = turn(*c, "x");
  EXPECT_EQ(b.turn, 1);
  EXPECT_EQ(b.n_prefilled, a.n_prefilled);
  EXPECT_EQ(b.reply, a.reply);
}

// --n-ctx 160 with 12 turns of ~20 tokens each: the oldest turns are dropped (system
// prompt kept), the system prompt's rows are reused, and the KV stays consistent.
TEST(Conversation, ConversationLongerThanNctxDropsOldestTurnsAndStaysConsistent) {
  constexpr uint32_t kCtx = 160;
  auto t = chat_engine(kCtx, "chat-overflow");
  auto fresh = chat_engine(kCtx, "chat-overflow-fresh");
  ASSERT_TRUE(t.engine && fresh.engine);
  ConversationOptions o = pinned(*t, " a", 10);
  o.system = "You are a helpful assistant.";
  std::vector<float> first;
  bool want = false;
  o.on_logits = [&](std::span<const float> l) {
    if (want) first.assign(l.begin(), l.end());
    want = false;
  };
  auto c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  const auto system_tokens =
      encode(*c, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
  int dropped = 0;
  for (int i = 0; i < 12; ++i) {
    want = true;
    const TurnStats s = turn(*c, "message number " + std::to_string(i) + " with some words");
    ASSERT_EQ(s.n_generated, 10) << "turn " << i;
    dropped += s.n_dropped_turns;
    EXPECT_LE(c->cursor(), kCtx);
    ASSERT_EQ(c->messages().front().role, "system");
    if (s.n_dropped_turns > 0) {
      // The system prompt's rows (and the "<|im_start|>user\nmessage number" that the
      // next kept message happens to share) stay; the rest is re-prefilled once.
      EXPECT_EQ(s.n_reused, static_cast<int32_t>(system_tokens.size()) + 6) << "turn " << i;
      EXPECT_EQ(s.n_prefilled, s.n_prompt - s.n_reused);
    }
    std::vector<Message> upto(c->messages().begin(), c->messages().end() - 1);
    const auto prompt = encode(*c, *kChatMl.render(upto, true));
    EXPECT_TRUE(same_bits(first, fresh_prefill_logits(*fresh, prompt, kCtx))) << "turn " << i;
  }
  EXPECT_GT(dropped, 3);
  EXPECT_LT(c->messages().size(), 1u + 2u * 12u);
}

TEST(Conversation, ReplyReachingNctxEndsTheTurnCleanlyAndTheNextTurnStillWorks) {
  constexpr uint32_t kCtx = 96;
  auto t = chat_engine(kCtx, "chat-ctxfull");
  ASSERT_TRUE(t.engine);
  auto c = make_conversation(*t, kChatMl, pinned(*t, " a", -1));
  ASSERT_TRUE(c);
  const TurnStats s1 = turn(*c, "fill it up");
  EXPECT_EQ(s1.end, ReplyEnd::kContext);
  EXPECT_EQ(c->cursor(), kCtx);
  const TurnStats s2 = turn(*c, "and again");
  EXPECT_EQ(s2.end, ReplyEnd::kContext);
  EXPECT_EQ(s2.n_dropped_turns, 1);
  EXPECT_EQ(c->cursor(), kCtx);
}

// With a context shift a reply runs past n_ctx: at every step — after each shift too —
// the logits the reply samples from equal a fresh prefill of the KV mirror at that
// moment (no row computed while a discarded token was visible), the mirror keeps the
// turn's first `keep` tokens, and the next turn re-syncs with the canonical render.
TEST(Conversation, ContextShiftLetsAReplyRunPastNctxAndTheKvStaysAFreshPrefill_bitwise) {
  constexpr uint32_t kCtx = 64;
  constexpr int32_t kReply = 150;
  auto t = chat_engine(kCtx, "chat-shift");
  auto fresh = chat_engine(kCtx, "chat-shift-fresh");
  ASSERT_TRUE(t.engine && fresh.engine);
  ConversationOptions o = pinned(*t, " a", kReply);
  o.context_shift = true;
  o.keep = 5;
  o.n_batch = 7;
  std::unique_ptr<Conversation> c;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<TokenId>> streams;  // the KV mirror at each sampling step
  o.on_logits = [&](std::span<const float> l) {
    logits.emplace_back(l.begin(), l.end());
    streams.push_back(c->stream());
  };
  c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  const TurnStats s1 = turn(*c, "go on and on");
  EXPECT_EQ(s1.end, ReplyEnd::kNPredict);
  EXPECT_EQ(s1.n_generated, kReply);
  EXPECT_EQ(s1.n_keep, 5);  // the Qwen2 vocabulary adds no BOS
  const int32_t n_discard = (static_cast<int32_t>(kCtx) - 5) / 2;
  EXPECT_GT(s1.n_shifts, 1);
  EXPECT_EQ(s1.n_discarded, s1.n_shifts * n_discard);
  EXPECT_LE(c->cursor(), kCtx);
  EXPECT_EQ(c->cursor(), c->stream().size());
  ASSERT_EQ(logits.size(), static_cast<size_t>(kReply));
  size_t checked = 0;
  for (size_t i = 1; i < streams.size(); ++i) {
    if (streams[i].size() >= streams[i - 1].size()) continue;  // no shift before step i
    EXPECT_TRUE(std::equal(streams[0].begin(), streams[0].begin() + 5, streams[i].begin()));
    EXPECT_TRUE(same_bits(logits[i], fresh_prefill_logits(*fresh, streams[i], kCtx)))
        << "step " << i;
    checked++;
  }
  // The reply's last token is fed too: a shift it needed has no later step to check.
  const bool last_feed_shifted = c->stream().size() != streams.back().size() + 1;
  EXPECT_GT(checked, 0u);
  EXPECT_EQ(checked + (last_feed_shifted ? 1 : 0), static_cast<size_t>(s1.n_shifts));
  // The history holds the whole reply; the next turn rewinds to the shift at the latest.
  EXPECT_EQ(c->messages().back().content.size(), 2u * kReply);  // " a" x 150
  const TurnStats s2 = turn(*c, "and again");
  EXPECT_GT(s2.n_dropped_turns + s2.n_rewound, 0);
  EXPECT_EQ(s2.n_generated, kReply);
  EXPECT_EQ(c->cursor(), c->stream().size());
}

TEST(Conversation, AMessageThatCannotFitIsRefusedAndTheHistoryIsKept) {
  auto t = chat_engine(64, "chat-toolong");
  ASSERT_TRUE(t.engine);
  auto c = make_conversation(*t, kChatMl, pinned(*t, " a", 2));
  ASSERT_TRUE(c);
  turn(*c, "ok");
  const auto before = c->messages();
  std::string big;
  for (int i = 0; i < 80; ++i) big += "word ";
  auto r = c->user_turn(big, [](std::string_view) {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("context full"), std::string::npos) << r.error().message;
  EXPECT_EQ(c->messages(), before);
}

TEST(Conversation, StopStringEndsTheReplyAndTheNextTurnRewindsToTheCanonicalRender) {
  auto t = chat_engine(512, "chat-stop");
  ASSERT_TRUE(t.engine);
  ConversationOptions o = pinned(*t, " a", 10);
  o.stop = {"a a"};
  auto c = make_conversation(*t, kChatMl, o);
  ASSERT_TRUE(c);
  std::string shown;
  const TurnStats s1 = turn(*c, "q", &shown);
  EXPECT_EQ(s1.end, ReplyEnd::kStopString);
  EXPECT_EQ(s1.reply, " ");
  EXPECT_EQ(shown, " ");  // the start of the stop string was held back, never shown
  const TurnStats s2 = turn(*c, "r");
  // The KV holds " a" (decoded before the stop matched) where the render has " ":
  // the next turn rewinds past it and re-prefills from the common prefix.
  EXPECT_GE(s2.n_rewound, 1);
  EXPECT_EQ(static_cast<int32_t>(c->turn_pos()), s2.n_reused);
}

TEST(Conversation, ReplySeedIsTheRunSeedForTheFirstReplyAndDistinctAfter) {
  EXPECT_EQ(Conversation::reply_seed(42, 1, 0), 42u);
  EXPECT_NE(Conversation::reply_seed(42, 2, 0), 42u);
  EXPECT_NE(Conversation::reply_seed(42, 1, 1), Conversation::reply_seed(42, 2, 0));
  EXPECT_EQ(Conversation::reply_seed(42, 3, 2), Conversation::reply_seed(42, 3, 2));
}

// ChatML whose generation prompt opens a thinking block, as DeepSeek-R1's templates do
// (the model starts inside it); past replies are rendered whole.
class ThinkingChatMl final : public ChatRenderer {
 public:
  Result<std::string> render(std::span<const Message> messages,
                             bool add_generation_prompt) const override {
    MINFER_TRY(std::string text, kChatMl.render(messages, add_generation_prompt));
    if (add_generation_prompt) text += "<think>\n";
    return text;
  }
  std::string name() const override { return "thinking ChatML"; }
  using ChatRenderer::render_json;
  Result<std::string> render_json(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                  const nlohmann::ordered_json& vars) const override {
    return kChatMl.render_json(messages, tools, add_generation_prompt, vars);
  }
  std::string_view source() const override { return "</think>"; }
};

TEST(Conversation, ThinkingReplySplitsTheBlockOffTheSinkAndKeepsItInTheHistory) {
  auto t = chat_engine(512, "chat-think");
  ASSERT_TRUE(t.engine);
  const ThinkingChatMl renderer;
  ConversationOptions o = pinned(*t, " a", 10);
  o.thinking = true;
  o.reasoning_budget = 2;  // two " a" inside the block, then the close tag is fed
  std::string thought;
  o.on_reasoning = [&](std::string_view s) { thought.append(s); };
  auto c = make_conversation(*t, renderer, o);
  ASSERT_TRUE(c);
  for (int k = 1; k <= 2; ++k) {
    thought.clear();
    std::string shown;
    const TurnStats s = turn(*c, "question " + std::to_string(k), &shown);
    EXPECT_EQ(s.n_generated, 10);
    EXPECT_EQ(thought, "a a") << "turn " << k;
    EXPECT_FALSE(shown.empty());
    EXPECT_EQ(shown.find("think"), std::string::npos) << shown;
    EXPECT_EQ(shown.find_first_not_of("a "), std::string::npos) << shown;
    EXPECT_EQ(s.reply, "a a\n</think>\n\n" + shown);
    EXPECT_EQ(c->messages().back().content, s.reply);
    EXPECT_EQ(c->cursor(), c->stream().size());
  }
  // Not split: the block is reply text, as before.
  ConversationOptions whole = pinned(*t, " a", 10);
  whole.thinking = true;
  whole.reasoning_split = false;
  whole.reasoning_budget = 2;
  thought.clear();
  whole.on_reasoning = [&](std::string_view s) { thought.append(s); };
  auto d = make_conversation(*t, renderer, whole);
  ASSERT_TRUE(d);
  std::string shown;
  const TurnStats s = turn(*d, "question", &shown);
  EXPECT_TRUE(thought.empty());
  EXPECT_TRUE(shown.starts_with(" a a\n</think>\n\n")) << shown;
  EXPECT_EQ(s.reply, shown);
}

}  // namespace
}  // namespace minfer::chat
