// Tests (chat): conversations over a tiny random Llama with the real Qwen2 vocabulary
// (its <|im_start|>/<|im_end|> specials make the ChatML render tokenize as a model's
// would), plus the reference every KV-consistency test compares against: a fresh
// engine that prefills the canonical render in one go.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../engine/engine_fixture.h"
#include "chat/conversation.h"

namespace minfer::chat::testing {

using engine::testing::make_engine;
using engine::testing::same_bits;
using engine::testing::TinyEngine;
using minfer::testing::TinySpec;

inline std::string qwen2_vocab() {
  return minfer::testing::vocab_path("ggml-vocab-qwen2.gguf");
}

inline TinySpec chat_spec() {
  return TinySpec{.n_ctx_train = 4096, .vocab_gguf = qwen2_vocab(), .seed = 3};
}

inline TinyEngine chat_engine(uint32_t n_ctx, const std::string& stem) {
  return make_engine(chat_spec(), 1, n_ctx, stem);
}

// The id of a text that is one token (special text included).
inline TokenId token_id(const engine::Engine& e, const std::string& text) {
  auto ids = e.tokenizer().encode(text, {.add_special = false, .parse_special = true});
  EXPECT_TRUE(ids.ok() && ids->size() == 1) << "'" << text << "' is not one token";
  return ids.ok() && ids->size() == 1 ? (*ids)[0] : 0;
}

// Greedy replies pinned to one token: every step's argmax is `id` (a +100 bias), so a
// reply of n tokens is n copies of it — text that retokenizes to the same tokens.
inline ConversationOptions pinned(const engine::Engine& e, const std::string& token,
                                  int32_t n_predict) {
  ConversationOptions o;
  o.n_predict = n_predict;
  o.sampler.temp = 0.0f;
  o.sampler.repeat_penalty = 1.0f;
  o.sampler.logit_bias = {{.id = token_id(e, token), .bias = 100.0f}};
  return o;
}

inline std::unique_ptr<Conversation> make_conversation(engine::Engine& e, const ChatRenderer& r,
                                                       ConversationOptions o) {
  auto c = Conversation::create(e, r, std::move(o));
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? std::move(*c) : nullptr;
}

inline TurnStats turn(Conversation& c, const std::string& text, std::string* shown = nullptr) {
  auto r = c.user_turn(text, [&](std::string_view s) {
    if (shown) shown->append(s);
  });
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : TurnStats{};
}

// Logits of the last position after prefilling `tokens` at 0.. in one forward.
inline std::vector<float> fresh_prefill_logits(engine::Engine& fresh,
                                               const std::vector<TokenId>& tokens, uint32_t n_ctx) {
  EXPECT_TRUE(fresh.set_n_ctx(n_ctx).ok());
  return engine::testing::run(fresh, tokens, engine::testing::iota_positions(tokens.size()), 1);
}

}  // namespace minfer::chat::testing
