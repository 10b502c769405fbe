// Stage 15 (the loop): the generation state of one sequence — sampler chain + RNG,
// an optional token constraint (grammar), stop-string matcher, UTF-8 emitter, n-predict /
// end-of-generation / context gates, cursor and token counts — behind one `next(logits_row) →
// event` step that every driver (the single-shot loop, the chat, the server's slots) can call
// (ARCHITECTURE §2b). Invariants (§2.5): sample first, then the gates; no byte of a stop string is
// ever emitted (bytes that could begin one are held back until they cannot); emitted text is valid
// UTF-8 and never ends inside a character (an unfinished tail at the end of the run becomes U+FFFD,
// as Utf8Emitter does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "engine/batch.h"
#include "engine/reasoning.h"
#include "engine/text.h"
#include "sample/sampler.h"

namespace minfer::engine {

// Why a sequence finished. kContext: its next position would be n_ctx.
enum class SeqStop : uint8_t { kNone, kNPredict, kEog, kStopString, kContext };
std::string_view seq_stop_name(SeqStop stop);

// A reasoning model's thinking block (engine/reasoning.h). Tracked when `track`: the
// token constraint then starts after the block, stop strings see the answer only, and
// the budget closes a block that runs long.
struct ReasoningOptions {
  bool track = false;        // the template has a thinking block
  bool split = true;         // reasoning to SeqEvent::reasoning (false: all of it is text)
  bool forced_open = false;  // the prompt ends inside the block (its open tag rendered)
  // Reasoning tokens at most (-1: no limit); then `close_tokens` are fed instead of
  // sampled (the close tag and the template's newlines) and the answer follows.
  int32_t budget = -1;
  std::vector<TokenId> close_tokens;
};

struct SequenceOptions {
  int32_t n_predict = -1;         // generated tokens at most (< 0: until the context is full)
  std::vector<std::string> stop;  // byte strings; empty ones never match
  sample::SamplerConfig sampler;  // seed, temperature, penalties, ...
  uint32_t n_ctx = 0;             // positions the sequence may use (KV cursor < n_ctx)
  // Log-probabilities of the model's distribution (log-softmax of the raw logits, as
  // OpenAI reports them): -1 none; 0 the chosen token only; k: also the k most likely.
  int32_t top_logprobs = -1;
  // End-of-generation tokens are never sampled (their logits count as -inf); the run
  // ends at n_predict, a stop string or the context (llama.cpp's --ignore-eos).
  bool ignore_eos = false;
  // The n_predict-th token is fed too (the event has feed and stop kNPredict): a chat
  // keeps its whole reply in the KV; single-shot and the server skip that forward.
  bool feed_last = false;
  // The full-context gate runs at the head of next(), before sampling: with no position
  // left for the token this step would sample (cursor >= n_ctx) the run ends kContext
  // and nothing is sampled — the chat, whose reply stays whole in its KV. Off: that
  // token is sampled and emitted, then the run ends (single-shot, the server).
  bool context_gate_first = false;
  // The driver shifts the context (--context-shift, shift_context in engine/generate.h):
  // neither full-context gate ends the run; an event may then ask to feed at position
  // n_ctx, and the driver frees room before that forward and calls discard().
  bool context_shift = false;
  ReasoningOptions reasoning;
};

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

// What one next() produced. `text` points into the state and stays valid until the
// next call; `top` likewise.
struct SeqEvent {
  TokenId token = -1;          // the sampled token (-1 when a gate stopped before sampling)
  bool feed = false;           // decode `token` at position `pos` next (the run goes on)
  int32_t pos = 0;             // its position when feed
  std::string_view text;       // bytes that are safe to emit now (complete UTF-8, no stop prefix)
  std::string_view reasoning;  // thinking-block bytes safe to emit now (complete UTF-8)
  SeqStop stop = SeqStop::kNone;
  float logprob = 0.0f;               // of `token`, when top_logprobs >= 0
  std::span<const TokenLogprob> top;  // the most likely tokens, best first
};

// Which tokens may come next (a grammar, a JSON schema): applied to a copy of the
// logits before every sample, told every token that joins the output. Implemented
// outside the engine (the server wraps src/grammar), so the engine keeps its link line.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -inf (F32 [n_vocab]); an
  // end-of-generation token only where the constraint can end. Error: it cannot go on.
  virtual Status apply(std::span<float> logits) = 0;
  // The same answer apply()'s mask gives for one token: 1 allowed, 0 not, -1 cannot
  // tell now (the step then masks). Lets the sampler ask about its best candidates
  // only, instead of masking the whole vocabulary (sample::Sampler::sample_filtered).
  virtual int allows(TokenId /*token*/) { return -1; }
  // True where apply() is as cheap as asking (its mask for this state is at hand): the
  // step then masks without asking first.
  virtual bool mask_ready() { return false; }
  virtual void accept(TokenId token) = 0;
  virtual void reset() = 0;  // back to the start (a new run)
};

class SequenceState {
 public:
  // `bytes` and `tok` are shared by every sequence of the model and must outlive this.
  // Errors: sampler config invalid for the vocabulary, n_ctx 0.
  // Not movable (the emitter's sink points at this state), hence the unique_ptr.
  static Result<std::unique_ptr<SequenceState>> create(
      const tokenizer::Tokenizer& tok, const TokenBytes& bytes, const SequenceOptions& options,
      std::unique_ptr<TokenConstraint> constraint = nullptr);
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  // Starts a run after `prompt` (its tokens will sit at positions 0..n-1): seeds the
  // penalty window with the prompt tail, reseeds the RNG, resets counters and text.
  void reset(std::span<const TokenId> prompt);

  // One step on the logits of the last fed position (F32 [n_vocab]): sample, gates,
  // text. Errors: unusable logits (NaN / +inf / no finite value).
  Result<SeqEvent> next(std::span<const float> logits);

  // A run cut short by its driver (an error, an interrupt): the bytes held back as a
  // possible stop-string start are text after all; returns them (valid until the next
  // call). Nothing more is produced.
  std::string_view flush();
  // The reasoning bytes that flush() released (valid until the next call).
  std::string_view flushed_reasoning() const { return reasoning_out_; }

  bool done() const { return stop_ != SeqStop::kNone; }
  SeqStop stop() const { return stop_; }
  // kStopString: the stop string that ended the text (empty otherwise).
  std::string_view stop_string() const { return stops_.matched(); }
  int32_t n_prompt() const { return n_prompt_; }
  int32_t n_generated() const { return n_generated_; }
  // Tokens sampled inside the thinking block (the budget's count; forced ones excluded).
  int32_t n_reasoning() const { return n_reasoning_; }
  // The constraint and the stop strings apply (no thinking block tracked, or it ended).
  bool in_answer() const {
    return !options_.reasoning.track || splitter_.phase() == ThinkSplitter::Phase::kContent;
  }
  int32_t cursor() const { return pos_; }  // position of the next fed token
  // The driver shifted the context: n positions of the sequence were discarded, so the
  // cursor (and the pending event's position) move back by n. Needs context_shift.
  void discard(int32_t n);
  const std::vector<TokenId>& generated() const { return generated_; }
  const SequenceOptions& options() const { return options_; }

 private:
  SequenceState(const tokenizer::Tokenizer& tok, const TokenBytes& bytes,
                const SequenceOptions& options, sample::Sampler sampler,
                std::unique_ptr<TokenConstraint> constraint);
  // Passes a token's bytes through the stop matcher and the emitter into out_; true
  // when a stop string completed (the text before it is emitted, the rest dropped).
  bool push_bytes(std::string_view bytes);
  // The chosen (or, `forced`, fed) token through the gates and the text path;
  // `constraint` (null inside a thinking block) is told it.
  SeqEvent step_token(std::span<const float> logits, TokenId id, bool forced,
                      TokenConstraint* constraint);
  void finish_text();
  void fill_logprobs(std::span<const float> logits, TokenId chosen, SeqEvent& ev);

  const tokenizer::Tokenizer* tok_;
  const TokenBytes* bytes_;
  SequenceOptions options_;
  sample::Sampler sampler_;
  StopMatcher stops_;
  Utf8Emitter emitter_;
  ThinkSplitter splitter_;
  Utf8Emitter reasoning_emitter_;
  std::string split_reasoning_, split_content_;  // the splitter's output of one feed
  std::string reasoning_out_;                    // this step's reasoning text
  size_t n_forced_ = 0;  // close_tokens fed so far (the budget ran out); 0: not forcing
  bool forcing_ = false;
  int32_t n_reasoning_ = 0;

  std::string out_;  // this step's emitted text
  std::vector<TokenId> generated_;
  std::vector<TokenLogprob> top_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::vector<TokenId> eog_ids_;  // ignore_eos: every end-of-generation id
  std::vector<float> masked_;     // constraint: the logits it masked (n_vocab)
  int32_t n_prompt_ = 0;
  int32_t n_generated_ = 0;
  int32_t pos_ = 0;
  SeqStop stop_ = SeqStop::kNone;
};

}  // namespace minfer::engine
