// Stage 16 (sessions): the conversation state machine (conversation.h).
//
// Overflow policy (docs/USAGE.md "Conversation mode"): when the canonical render of
// [system?, turns..., new user message] plus a reply reserve does not fit n_ctx, the
// oldest turns (a user message and the replies after it) are dropped, oldest first,
// the system prompt always kept, until it fits. The render then diverges from the KV
// right after the system prompt, so the common-prefix rule below keeps the system
// prompt's KV rows and re-prefills the rest once — the KV always equals a prefix of
// the canonical render, no re-roped rows with stale context (unlike llama.cpp's
// context shift, which keeps rows computed while the dropped turns were visible). Only
// [system?, new message] not fitting even without the reserve is an error.
//
// Context shift (--context-shift, within one reply): a reply that reaches n_ctx drops
// half of the positions after the first n_keep and recomputes the rest
// (engine::shift_context), so the KV again holds only rows a fresh prefill of the kept
// tokens would hold. The mirror loses the same tokens; the next turn's common prefix
// with the render then ends at the shift at the latest and the rest is re-prefilled.
// A shift (and its check) happens right before the forward that needs the position,
// which is why the reply loop calls make_room before every decode_one.
#include "chat/conversation.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "chat/session_file.h"
#include "engine/generate.h"
#include "engine/sequence.h"
#include "sample/sampler.h"

namespace minfer::chat {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Offsets of reply_seed: odd 64-bit constants (splitmix64's), so distinct (turn,
// attempt) pairs of a session get distinct seeds.
constexpr uint64_t kTurnStride = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kAttemptStride = 0xBF58476D1CE4E5B9ull;

}  // namespace

std::string_view reply_end_name(ReplyEnd e) {
  switch (e) {
    case ReplyEnd::kEog:
      return "end of turn";
    case ReplyEnd::kNPredict:
      return "n_predict";
    case ReplyEnd::kStopString:
      return "stop string";
    case ReplyEnd::kContext:
      return "context full";
    case ReplyEnd::kInterrupted:
      return "interrupted";
  }
  return "?";
}

uint64_t Conversation::reply_seed(uint64_t seed, int32_t turn, int32_t attempt) {
  return seed + kTurnStride * static_cast<uint64_t>(std::max(turn - 1, 0)) +
         kAttemptStride * static_cast<uint64_t>(std::max(attempt, 0));
}

Result<std::unique_ptr<Conversation>> Conversation::create(engine::Context& engine,
                                                           const ChatRenderer& renderer,
                                                           ConversationOptions options) {
  if (!engine.has_tokenizer()) return make_error("conversation: the model has no tokenizer");
  if (engine.n_ctx() == 0) return make_error("conversation: no context set (set_n_ctx)");
  MINFER_TRY_STATUS(options.sampler.validate_for_vocab(engine.tokenizer().n_vocab()));
  return std::unique_ptr<Conversation>(new Conversation(engine, renderer, std::move(options)));
}

Conversation::Conversation(engine::Context& engine, const ChatRenderer& renderer,
                           ConversationOptions options)
    : engine_(engine),
      renderer_(renderer),
      options_(std::move(options)),
      token_bytes_(engine.token_bytes()) {
  if (!options_.system.empty()) messages_.push_back({.role = "system", .content = options_.system});
  stream_.reserve(engine_.n_ctx());
}

Result<std::string> Conversation::render(bool add_generation_prompt) const {
  return renderer_.render(messages_, add_generation_prompt);
}

Result<std::vector<TokenId>> Conversation::tokenize(const std::string& text) const {
  return tokenize_prompt(engine_.tokenizer(), text);
}

uint32_t Conversation::reply_reserve() const {
  const uint32_t quarter = engine_.n_ctx() / 4;
  if (options_.n_predict >= 0) return std::min(quarter, static_cast<uint32_t>(options_.n_predict));
  return quarter;
}

Status Conversation::prefill_from(const std::vector<TokenId>& tokens, size_t from) {
  MINFER_CHECK(from < tokens.size() && from == stream_.size(),
               "prefill_from: from %zu, tokens %zu, cursor %zu", from, tokens.size(),
               stream_.size());
  const std::span<const TokenId> delta(tokens.data() + from, tokens.size() - from);
  const size_t chunk = options_.n_batch > 0 ? static_cast<size_t>(options_.n_batch) : delta.size();
  for (size_t at = 0; at < delta.size(); at += chunk) {
    const size_t n = std::min(chunk, delta.size() - at);
    MINFER_TRY_STATUS(decode_run(delta.subspan(at, n), static_cast<int32_t>(from + at)));
  }
  stream_.insert(stream_.end(), delta.begin(), delta.end());
  return Ok{};
}

Status Conversation::decode_run(std::span<const TokenId> tokens, int32_t pos0) {
  batch_.clear();
  batch_.add_run(tokens, 0, pos0);
  MINFER_TRY(const engine::BatchLogits out, engine_.decode(batch_));
  logits_ = out.row(tokens.size() - 1);
  return Ok{};
}

Status Conversation::decode_one(TokenId id) {
  MINFER_TRY_STATUS(
      decode_run(std::span<const TokenId>(&id, 1), static_cast<int32_t>(stream_.size())));
  stream_.push_back(id);
  return Ok{};
}

Status Conversation::make_room(engine::SequenceState& state, int32_t n_keep, TurnStats& stats) {
  if (!state.options().context_shift || stream_.size() < engine_.n_ctx()) return Ok{};
  MINFER_TRY(const int32_t n,
             engine::shift_context(engine_, batch_, stream_, n_keep, options_.n_batch));
  MINFER_CHECK(n > 0, "context shift discarded nothing (n_keep %d)", n_keep);
  state.discard(n);
  // /regen's rewind point: positions from n_keep on now hold other tokens.
  turn_pos_ = std::min(turn_pos_, static_cast<uint32_t>(n_keep));
  stats.n_shifts++;
  stats.n_discarded += n;
  return Ok{};
}

Result<std::vector<TokenId>> Conversation::prompt_tokens() {
  MINFER_TRY(std::string text, render(true));
  thinking_ = {};
  if (options_.thinking) {
    thinking_ = plan_thinking(renderer_.source(), text, options_.reasoning_budget,
                              static_cast<bool>(options_.make_constraint));
  }
  return tokenize(text);
}

Status Conversation::prefill_turn(TurnStats& stats) {
  const uint32_t n_ctx = engine_.n_ctx();
  MINFER_TRY(std::vector<TokenId> tokens, prompt_tokens());
  // Overflow policy (file comment): drop the oldest turns, system prompt kept.
  const size_t first_turn = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
  while (tokens.size() + reply_reserve() > n_ctx) {
    // The current message is the last one; a droppable turn must start before it.
    size_t end = first_turn + 1;
    while (end < messages_.size() && messages_[end].role != "user") ++end;
    if (end >= messages_.size()) break;  // only [system?, current message] is left
    messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(first_turn),
                    messages_.begin() + static_cast<std::ptrdiff_t>(end));
    stats.n_dropped_turns++;
    MINFER_TRY(tokens, prompt_tokens());
  }
  if (tokens.size() >= n_ctx) {
    // The hint never names a context the model cannot have.
    const uint32_t model_ctx = engine_.hparams().n_ctx_train;
    if (model_ctx > 0 && tokens.size() + 1 > model_ctx) {
      return make_error(fmt::format(
          "context full: need {} tokens, more than the model's context of {} (shorten the "
          "message or the system prompt)",
          tokens.size() + 1, model_ctx));
    }
    return make_error(fmt::format(
        "context full: need {} tokens, have {} (-c {} or more{})", tokens.size() + 1, n_ctx,
        tokens.size() + 1,
        model_ctx > 0 ? fmt::format(", up to the model's {}", model_ctx) : std::string()));
  }

  // The KV keeps its longest common prefix with the canonical render; everything
  // after it is rewound (cursor moved back, rows left stale) and re-prefilled. At
  // least one token is prefilled: its logits start the reply.
  size_t common = 0;
  const size_t limit = std::min(tokens.size() - 1, stream_.size());
  while (common < limit && stream_[common] == tokens[common]) ++common;
  stats.n_rewound = static_cast<int32_t>(stream_.size() - common);
  stats.seam = need_seam_ && stats.n_rewound == 0;
  stream_.resize(common);
  turn_pos_ = static_cast<uint32_t>(common);
  stats.n_prompt = static_cast<int32_t>(tokens.size());
  stats.n_reused = static_cast<int32_t>(common);
  stats.n_prefilled = static_cast<int32_t>(tokens.size() - common);
  const auto t0 = Clock::now();
  MINFER_TRY_STATUS(prefill_from(tokens, common));
  stats.prefill_s = seconds(Clock::now() - t0);
  need_seam_ = false;
  return Ok{};
}

Status Conversation::decode_reply(TurnStats& stats, const engine::TextSink& sink) {
  // One reply is one run of the per-sequence generation state the single-shot loop and
  // the server drive too: sampler (seeded per turn and attempt), stop-string hold-back,
  // UTF-8 emitter, -n / end-of-generation / context gates.
  sample::SamplerConfig sc = options_.sampler;
  sc.seed = reply_seed(sc.seed, stats.turn, stats.attempt);
  MINFER_TRY(engine::ReasoningOptions reasoning,
             reasoning_options(thinking_, engine_.tokenizer(), options_.reasoning_split,
                               options_.reasoning_budget));
  // --keep counts from the start of the turn's prompt (the whole KV stream so far).
  const int32_t n_keep = engine::keep_count(options_.keep, stream_, engine_.tokenizer());
  const bool shift = options_.context_shift &&
                     engine::shift_discard(static_cast<int32_t>(engine_.n_ctx()), n_keep) > 0;
  stats.n_keep = n_keep;
  MINFER_TRY(std::unique_ptr<engine::SequenceState> state,
             engine::SequenceState::create(
                 engine_.tokenizer(), token_bytes_,
                 {.n_predict = options_.n_predict,
                  .stop = options_.stop,
                  .sampler = sc,
                  .n_ctx = engine_.n_ctx(),
                  .ignore_eos = options_.ignore_eos,
                  .feed_last = true,
                  .context_gate_first = true,
                  .context_shift = shift,
                  .reasoning = std::move(reasoning)},
                 options_.make_constraint ? options_.make_constraint() : nullptr));
  // The penalty window starts with the tail of the whole KV stream (llama.cpp feeds
  // the prompt to the sampler), seeded after the delta is in; the cursor is its end.
  state->reset(stream_);
  interrupted_.store(false, std::memory_order_relaxed);

  std::string& reply = stats.reply;
  reply.clear();
  auto emit = [&](std::string_view text) {
    reply.append(text);
    if (!text.empty()) sink(text);
  };
  // A split thinking block's text (empty unless the reply is split).
  std::string thought;
  auto emit_thought = [&](std::string_view text) {
    thought.append(text);
    if (!text.empty() && options_.on_reasoning) options_.on_reasoning(text);
  };
  const auto t0 = Clock::now();
  for (;;) {
    // Ctrl-C at the loop head ends the turn cleanly; what was held back is text. (The
    // full-context gate is the state's, before it samples: context_gate_first.)
    if (interrupted_.load(std::memory_order_relaxed)) {
      const std::string_view rest = state->flush();
      emit_thought(state->flushed_reasoning());
      emit(rest);
      stats.end = ReplyEnd::kInterrupted;
      break;
    }
    if (options_.n_predict != 0 && options_.on_logits) options_.on_logits(logits_);
    MINFER_TRY(const engine::SeqEvent ev, state->next(logits_));
    emit_thought(ev.reasoning);
    emit(ev.text);
    stats.n_generated = state->n_generated();
    if (ev.feed) {  // the n-th token too (feed_last)
      MINFER_TRY_STATUS(make_room(*state, n_keep, stats));
      MINFER_TRY_STATUS(decode_one(ev.token));
    }
    if (!state->done()) continue;
    switch (ev.stop) {
      case engine::SeqStop::kEog:
        // Unlike single-shot, the end-of-generation token joins the KV: the next turn's
        // canonical render contains it (seed design §3.3, "two stop policies").
        MINFER_TRY_STATUS(make_room(*state, n_keep, stats));
        MINFER_TRY_STATUS(decode_one(ev.token));
        stats.end = ReplyEnd::kEog;
        break;
      case engine::SeqStop::kStopString:
        // A stopping token is not decoded; the KV then differs from the canonical
        // render and the next turn rewinds to match.
        stats.end = ReplyEnd::kStopString;
        break;
      case engine::SeqStop::kContext:
        stats.end = ReplyEnd::kContext;
        break;
      default:  // kNPredict: the n-th token, decoded above, ends the reply
        stats.end = ReplyEnd::kNPredict;
        break;
    }
    break;
  }
  stats.decode_s = seconds(Clock::now() - t0);
  need_seam_ = stats.end != ReplyEnd::kEog;
  if (!thought.empty()) {
    // The history keeps the whole reply: the block as the template frames it (open tag
    // unless the prompt opened it; the close tag once the answer began), then the answer.
    std::string whole = thinking_.forced_open ? std::string() : std::string("<think>\n");
    whole += thought;
    if (state->in_answer()) whole += kThinkingClose;
    reply = whole + reply;
  }
  return Ok{};
}

Result<TurnStats> Conversation::user_turn(std::string_view text, const engine::TextSink& sink) {
  if (text.empty()) return make_error("empty message");
  const std::vector<Message> saved = messages_;
  messages_.push_back({.role = "user", .content = std::string(text)});
  TurnStats stats;
  stats.turn = n_turns_ + 1;
  stats.attempt = 0;
  if (auto st = prefill_turn(stats); !st.ok()) {
    messages_ = saved;
    return st.error();
  }
  n_turns_++;
  attempt_ = 0;
  MINFER_TRY_STATUS(decode_reply(stats, sink));
  messages_.push_back({.role = "assistant", .content = stats.reply});
  return stats;
}

Result<TurnStats> Conversation::regen(const engine::TextSink& sink, int32_t attempt) {
  if (n_turns_ == 0 || messages_.empty() || messages_.back().role != "assistant") {
    return make_error("no assistant reply to regenerate");
  }
  // O(1) rollback: drop the reply and move the cursor back to where the turn's delta
  // began. Nothing is erased; the replayed delta overwrites the stale rows.
  const Message dropped = messages_.back();
  messages_.pop_back();
  stream_.resize(std::min<size_t>(turn_pos_, stream_.size()));
  need_seam_ = false;
  TurnStats stats;
  stats.turn = n_turns_;
  stats.regen = true;
  stats.attempt = attempt >= 0 ? attempt : attempt_ + 1;
  if (auto st = prefill_turn(stats); !st.ok()) {
    messages_.push_back(dropped);
    return st.error();
  }
  attempt_ = stats.attempt;
  MINFER_TRY_STATUS(decode_reply(stats, sink));
  messages_.push_back({.role = "assistant", .content = stats.reply});
  return stats;
}

void Conversation::clear() {
  // The conversation's own system message stays: the one it started with or, after a
  // resumed session, the one the session file holds (options_.system is only the
  // command line's, empty when a session is resumed without --system).
  std::vector<Message> kept;
  if (!messages_.empty() && messages_.front().role == "system") {
    kept.push_back(messages_.front());
  } else if (!options_.system.empty()) {
    kept.push_back({.role = "system", .content = options_.system});
  }
  messages_ = std::move(kept);
  stream_.clear();
  engine_.clear_kv();
  turn_pos_ = 0;
  n_turns_ = 0;
  attempt_ = 0;
  need_seam_ = false;
}

Status Conversation::save(const std::string& path) const {
  SessionData d;
  d.model_hash = model_hash(engine_.file());
  d.state = {{"messages", to_json(messages_)},
             {"stream", stream_},
             {"turn_pos", turn_pos_},
             {"n_turns", n_turns_},
             {"attempt", attempt_},
             {"need_seam", need_seam_}};
  d.n_kv_tokens = stream_.size();
  d.kv_token_bytes = engine_.kv_token_bytes();
  d.kv_format = engine_.kv_format();
  d.kv_rotated = engine_.kv_rotated();
  if (d.n_kv_tokens > 0) {
    MINFER_TRY(d.kv, engine_.kv_export(static_cast<uint32_t>(d.n_kv_tokens)));
  } else {
    d.kv_token_bytes = 0;
  }
  return write_session(path, d);
}

Result<SessionInfo> Conversation::load(const std::string& path) {
  MINFER_TRY(SessionData d, read_session(path));
  const uint64_t want = model_hash(engine_.file());
  if (d.model_hash != want) {
    return make_error(
        fmt::format("session: '{}' was saved for another model (hash {:016x}, "
                    "this model {:016x})",
                    path, d.model_hash, want));
  }
  std::vector<Message> messages;
  std::vector<TokenId> stream;
  uint32_t turn_pos = 0;
  int32_t n_turns = 0, attempt = 0;
  bool need_seam = false;
  try {
    MINFER_TRY(messages, messages_from_json(d.state.at("messages")));
    stream = d.state.at("stream").get<std::vector<TokenId>>();
    turn_pos = d.state.at("turn_pos").get<uint32_t>();
    n_turns = d.state.at("n_turns").get<int32_t>();
    attempt = d.state.at("attempt").get<int32_t>();
    need_seam = d.state.at("need_seam").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    return make_error(fmt::format("session: '{}': bad state: {}", path, e.what()));
  }
  if (stream.size() != d.n_kv_tokens || turn_pos > stream.size()) {
    return make_error(fmt::format("session: '{}': {} stream tokens but {} KV rows (turn at {})",
                                  path, stream.size(), d.n_kv_tokens, turn_pos));
  }
  if (stream.size() > engine_.n_ctx()) {
    return make_error(fmt::format("session: '{}' holds {} tokens, more than n_ctx {} (--n-ctx)",
                                  path, stream.size(), engine_.n_ctx()));
  }
  for (TokenId id : stream) {
    if (id < 0 || id >= engine_.tokenizer().n_vocab()) {
      return make_error(fmt::format("session: '{}': token id {} outside the vocabulary", path, id));
    }
  }
  MINFER_TRY_STATUS(check_kv_format(fmt::format("session: '{}'", path), d, engine_.kv_format(),
                                    engine_.kv_rotated()));
  MINFER_TRY_STATUS(engine_.kv_import(static_cast<uint32_t>(stream.size()), d.kv));
  messages_ = std::move(messages);
  stream_ = std::move(stream);
  stream_.reserve(engine_.n_ctx());
  turn_pos_ = turn_pos;
  n_turns_ = n_turns;
  attempt_ = attempt;
  need_seam_ = need_seam;
  return SessionInfo{.n_messages = messages_.size(), .n_kv_tokens = cursor()};
}

}  // namespace minfer::chat
