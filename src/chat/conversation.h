// Stage 16 (sessions): a multi-turn conversation on one append-only KV — the host
// mirror of the KV token stream, the write cursor, delta prefill, /regen rollback,
// the overflow policy, the context shift and session files (seed design §2.6;
// minfer-features §3).
// Invariants (KV consistency): cursor() == stream().size() always; positions
// [0, cursor) of the KV hold exactly stream() (a context shift during a reply drops
// tokens from both), and after every turn's prefill stream()
// is a prefix of tokenize(render(messages)) (with a thinking block planned, of the
// planned render: plan_thinking may close or open the block after it) — so the
// next-token logits equal those of a fresh engine that prefills the canonical full
// render in one go (tests/chat proves it bit for bit). KV contents past the cursor are garbage and
// never read: attention windows end at the query's position (ARCHITECTURE §2.3).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/renderer.h"
#include "core/result.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "engine/text.h"
#include "sample/sampler_config.h"

namespace minfer::chat {

using TokenId = engine::TokenId;

struct ConversationOptions {
  // Reply cap in tokens (-n); < 0: until end-of-generation or a full context.
  int32_t n_predict = -1;
  std::vector<std::string> stop;  // stop strings, matched on each reply's bytes
  sample::SamplerConfig sampler;  // seed: see reply_seed()
  std::string system;             // first message when non-empty (--system)
  bool ignore_eos = false;        // --ignore-eos: EOG logits at -inf (replies end at -n)
  int32_t n_batch = 0;            // -b: prefill chunk in tokens; 0: a turn's delta at once
  // --grammar / --json-schema: each reply gets a fresh constraint from this (so it
  // applies to every reply on its own, from its start); none when unset.
  std::function<std::unique_ptr<engine::TokenConstraint>()> make_constraint;
  // Called with the raw logits (F32 [n_vocab]) each time a reply samples, before the
  // sampler — step 0 is the last token of the turn's delta. Tests and tracing.
  std::function<void(std::span<const float>)> on_logits;
  // A thinking template's block: each reply's turn render is planned with
  // chat::plan_thinking (budget 0 closes the block in the prompt), the block is bounded
  // by `reasoning_budget` (-1: no limit) and, with `reasoning_split`, its text goes to
  // `on_reasoning` instead of the reply's sink. The history keeps the whole reply, block
  // included (the template decides what a later render shows of it).
  bool thinking = false;
  bool reasoning_split = true;
  int32_t reasoning_budget = -1;
  engine::TextSink on_reasoning;
  // --context-shift: a reply that reaches n_ctx goes on — the oldest half of the
  // positions after the first `keep` tokens of its turn's prompt is discarded and the
  // rest prefilled again (engine::shift_context). `keep` is llama.cpp's --keep N
  // (engine::keep_count against the turn's prompt: the whole conversation rendered up
  // to the reply; -1: all of it). Off: the reply ends at a full context (kContext).
  bool context_shift = false;
  int32_t keep = 0;
};

// Why a reply ended. Every end except kEog leaves the reply without the template's
// end-of-turn in the KV; the next turn's delta then begins with it (the seam).
enum class ReplyEnd : uint8_t { kEog, kNPredict, kStopString, kContext, kInterrupted };
std::string_view reply_end_name(ReplyEnd e);

struct TurnStats {
  int32_t turn = 0;     // 1-based index of the user turn since start / clear
  int32_t attempt = 0;  // 0 = first reply, k = k-th /regen draw
  bool regen = false;
  int32_t n_prompt = 0;         // tokens of the canonical render (with generation prompt)
  int32_t n_reused = 0;         // of those, already in the KV (not prefilled)
  int32_t n_prefilled = 0;      // the delta forwarded this turn
  int32_t n_rewound = 0;        // mirror tokens past the common prefix, rewound (not erased)
  int32_t n_dropped_turns = 0;  // oldest turns dropped by the overflow policy
  bool seam = false;            // the delta starts by closing a reply that ended without EOG
  int32_t n_generated = 0;      // reply tokens (the EOG token is not counted)
  int32_t n_shifts = 0;         // context shifts during the reply (context_shift)
  int32_t n_discarded = 0;      // positions they discarded
  int32_t n_keep = 0;           // positions each shift kept
  ReplyEnd end = ReplyEnd::kEog;
  double prefill_s = 0.0;
  double decode_s = 0.0;  // sampling + forwards of the reply, EOG decode included
  std::string reply;      // the assistant message stored in the history
};

// What a session file held, after a successful load.
struct SessionInfo {
  size_t n_messages = 0;
  uint32_t n_kv_tokens = 0;  // KV positions restored (no forward ran)
};

class Conversation {
 public:
  // `engine` must have a tokenizer and a context (set_n_ctx). The renderer outlives
  // the conversation. Error: sampler config invalid for the vocabulary.
  static Result<std::unique_ptr<Conversation>> create(engine::Context& engine,
                                                      const ChatRenderer& renderer,
                                                      ConversationOptions options);

  // One user turn: append the message, render the canonical conversation, keep the
  // KV's common prefix with it, prefill only the delta, decode the reply (streamed to
  // `sink`) and append it as the assistant message. Errors leave the history as it
  // was before the call (the message is not kept): empty input, context too small
  // even for [system, message] (context full), engine errors.
  Result<TurnStats> user_turn(std::string_view text, const engine::TextSink& sink);

  // Drops the last reply, rewinds the cursor to the start of its turn's delta (O(1):
  // nothing is erased, the stale KV rows are overwritten as the turn replays) and
  // decodes a new reply. attempt < 0: the next draw (previous attempt + 1); attempt
  // k >= 0 replays draw k — /regen 0 reproduces the original reply exactly.
  // Error: no assistant reply to regenerate.
  Result<TurnStats> regen(const engine::TextSink& sink, int32_t attempt = -1);

  // Forgets every message but the system prompt (the first message when its role is
  // system — a resumed session's own included) and frees the KV (the next turn
  // prefills the system prompt again). Turn numbering restarts at 1.
  void clear();

  // Stops the reply being decoded at its next step (kInterrupted). Async-signal-safe:
  // the CLI's SIGINT handler calls it. Cleared when the next reply starts.
  void interrupt() { interrupted_.store(true, std::memory_order_relaxed); }

  // --session: the history, the mirror, the cursor state and the KV rows [0, cursor),
  // in one versioned, checksummed file bound to the model (session_file.h).
  Status save(const std::string& path) const;
  // Restores a saved conversation with zero prefill. Error (and nothing changed):
  // unreadable file, bad checksum, other model, more tokens than n_ctx.
  Result<SessionInfo> load(const std::string& path);

  // The sampler seed of reply `attempt` of turn `turn` (1-based): seed for turn 1's
  // first reply (so a one-turn conversation draws as single-shot does), and a fixed
  // odd-constant offset per turn and per attempt otherwise. A reply is a pure
  // function of (seed, turn, attempt, the KV prefix) — resumed sessions and replays
  // draw the same tokens.
  static uint64_t reply_seed(uint64_t seed, int32_t turn, int32_t attempt);

  const std::vector<Message>& messages() const { return messages_; }
  const std::vector<TokenId>& stream() const { return stream_; }
  uint32_t cursor() const { return static_cast<uint32_t>(stream_.size()); }
  uint32_t turn_pos() const { return turn_pos_; }
  int32_t n_turns() const { return n_turns_; }
  uint32_t n_ctx() const { return engine_.n_ctx(); }
  const ConversationOptions& options() const { return options_; }

  // Tokens of a rendered prompt, as this conversation tokenizes them (special-token
  // text parsed; BOS added when the vocabulary asks and the render does not already
  // start with its text). Tests use it to build the "fresh engine" reference.
  Result<std::vector<TokenId>> tokenize(const std::string& text) const;
  Result<std::string> render(bool add_generation_prompt) const;

 private:
  Conversation(engine::Context& engine, const ChatRenderer& renderer, ConversationOptions options);

  // Render (with the generation prompt), apply the overflow policy, rewind to the
  // common prefix, prefill the delta. Fills the prompt-side fields of `stats`.
  Status prefill_turn(TurnStats& stats);
  // Prefill tokens [from, tokens.size()) at their positions; keeps the last logits.
  Status prefill_from(const std::vector<TokenId>& tokens, size_t from);
  // One decode of `tokens` (sequence 0, from pos0); keeps the last row's logits.
  Status decode_run(std::span<const TokenId> tokens, int32_t pos0);
  // Decode one token at the cursor and append it to the mirror.
  Status decode_one(TokenId id);
  // Before decode_one during a reply: at a full context with a shift on, shift it
  // (engine::shift_context) and move `state`'s cursor back.
  Status make_room(engine::SequenceState& state, int32_t n_keep, TurnStats& stats);
  // The reply loop: sample → gates → forward, appending EOG to the KV.
  Status decode_reply(TurnStats& stats, const engine::TextSink& sink);
  // The canonical render with the generation prompt, planned for a thinking block
  // (thinking_ set), tokenized.
  Result<std::vector<TokenId>> prompt_tokens();
  // Tokens kept free for the reply when the overflow policy trims the history.
  uint32_t reply_reserve() const;

  engine::Context& engine_;
  const ChatRenderer& renderer_;
  ConversationOptions options_;
  const engine::TokenBytes& token_bytes_;  // the model's, read by every reply's SequenceState

  std::vector<Message> messages_;  // canonical history (system first if any)
  std::vector<TokenId> stream_;    // host mirror of KV positions [0, cursor)
  uint32_t turn_pos_ = 0;          // cursor where the last turn's delta began
  int32_t n_turns_ = 0;            // user turns since start / clear
  int32_t attempt_ = 0;            // draw index of the last reply
  bool need_seam_ = false;         // the last reply ended without EOG
  ThinkingPlan thinking_;          // the last turn render's thinking block
  engine::Batch batch_;            // one sequence's rows, reused every step
  std::span<const float> logits_;  // the last decode's last row (valid until the next)
  std::atomic<bool> interrupted_{false};
};

}  // namespace minfer::chat
