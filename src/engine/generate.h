// Stage 15 (the loop): single-shot generation — prefill, then the sample-first decode
// loop of the seed design (docs: the decode loop and graph reuse §3.2), driving the one
// per-sequence generation state the chat and the server drive too (SequenceState).
// Invariants (ARCHITECTURE §2.5): each iteration samples from logits that already
// exist, then runs the gates — end-of-generation (dropped: not printed, not accepted,
// no forward), stop strings (over the bytes of the whole generated stream; bytes that
// may begin one are held back, so no byte of a stop string is ever printed), the -n
// cap (the n-th token ends the run without a forward of it), a full context — and
// runs the forward last. The penalty window starts with the prompt tail. A
// steady-state step allocates nothing (tests/engine proves it with a counting
// operator new).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "engine/text.h"
#include "sample/sampler.h"

namespace minfer::engine {

// Why a run ended: the sequence state's reasons (kContext: the KV is full — a clean
// stop before the forward that would have to refuse the position).
using StopReason = SeqStop;
inline std::string_view stop_reason_name(StopReason r) {
  return seq_stop_name(r);
}

struct GenerateOptions {
  int32_t n_predict = 512;        // -n: generated tokens at most (< 0: until the context is full)
  std::vector<std::string> stop;  // --stop, byte strings
  sample::SamplerConfig sampler;  // seed, temperature, penalties, ...
  // --ignore-eos: end-of-generation tokens get a -inf logit before sampling (as
  // llama.cpp does), so the run ends only at -n, a stop string or a full context.
  bool ignore_eos = false;
  // -b/-ub: prompt tokens per prefill forward; 0: the whole prompt in one. The
  // output bytes do not depend on it (ARCHITECTURE §2 invariant 8).
  int32_t n_batch = 0;
  // --grammar / --json-schema: makes the run's token constraint (none when unset).
  std::function<std::unique_ptr<TokenConstraint>()> make_constraint;
  // A thinking template's block (split, budget); its text goes to `reasoning_sink`
  // (dropped when unset), the answer to the run's sink.
  ReasoningOptions reasoning;
  TextSink reasoning_sink;
  bool timing = false;  // MINFER_TIMING: split sampling vs forward time
  // Called with the raw logits (F32 [n_vocab]) each time the loop samples, before the
  // sampler sees them — step 0 is the last prompt position; the step that samples an
  // end-of-generation token is included. For golden dumps and tracing.
  std::function<void(std::span<const float>)> on_logits;
  // --context-shift: when the next token has no position left, the oldest half of the
  // positions after the first `n_keep` is discarded and the rest prefilled again at its
  // new positions (shift_context); the run goes on until -n, end-of-generation or a
  // stop string. Off, or with fewer than two positions after n_keep: a full context
  // ends the run (kContext).
  bool context_shift = false;
  int32_t n_keep = 0;  // positions a shift keeps (keep_count); at most the prompt
  // Speculative decoding (--spec-ngram, -md): each forward verifies the token to feed and
  // a draft after it as one batch of rows; the sequence state samples every row in order
  // and the draft is kept while it agrees, the rest of its rows removed from the KV
  // (seq_rm). The tokens, the text and the dumped logits are the plain loop's, bit for bit
  // (batch invariance; engine/speculative.h), for greedy and seeded sampling alike.
  SpecOptions spec;
};

struct GenerateStats {
  int32_t n_prompt = 0;
  int32_t n_generated = 0;  // tokens accepted into the output
  double prefill_s = 0.0;   // the prompt forward
  double decode_s = 0.0;    // the decode loop: sampling + gates + forwards
  double sample_s = 0.0;    // MINFER_TIMING: time in sample()
  double forward_s = 0.0;   // MINFER_TIMING: time in decode forwards
  int32_t n_samples = 0;    // sample() calls (an EOG sample is not generated)
  int32_t n_forwards = 0;   // decode forwards run
  // Graph cache activity: the prefill's build (0 when a cached graph fit), then the
  // decode loop's — one rebuild (prefill → decode shape) and reuses after it.
  uint64_t prefill_builds = 0;
  uint64_t decode_rebuilds = 0;
  uint64_t decode_reuses = 0;
  int32_t n_shifts = 0;     // context shifts (--context-shift)
  int32_t n_discarded = 0;  // positions they discarded
  StopReason stop = StopReason::kNone;
  // Speculative decoding: tokens drafted and verified, drafts the target agreed with,
  // forwards that verified a draft of at least one token, and the draft model's forwards
  // and time (its catch-up and drafting).
  int64_t n_drafted = 0;
  int64_t n_accepted = 0;
  int32_t n_spec_forwards = 0;
  int64_t n_draft_forwards = 0;
  double draft_s = 0.0;
};

// llama.cpp's --keep N against a prompt: N < 0 or past the prompt: the whole prompt;
// otherwise N tokens after a leading BOS, which is kept too (llama.cpp adds the BOS to
// N: "always keep the BOS token").
int32_t keep_count(int32_t keep, std::span<const TokenId> prompt, const tokenizer::Tokenizer& tok);

// The positions a context shift of a full sequence discards: half of those after the
// first n_keep (llama.cpp's n_discard = (n_past - n_keep) / 2); 0: no shift is possible.
inline int32_t shift_discard(int32_t n_past, int32_t n_keep) {
  return n_past > n_keep ? (n_past - n_keep) / 2 : 0;
}

// A context shift by recompute (not llama.cpp's re-rotation of the cached K): sequence
// 0's cells from position n_keep on are freed, shift_discard(n_past, n_keep) tokens
// after the first n_keep are dropped from `tokens` — the sequence's KV mirror, positions
// [0, n_past) — and the tokens after them are prefilled again from position n_keep
// (chunks of n_batch; 0: at once) through Context::decode. The KV then holds what a
// fresh prefill of the kept tokens holds, bit for bit (batch invariance). Returns the
// positions discarded (0: none, nothing changed). On an error `tokens` ends where the
// KV does.
Result<int32_t> shift_context(Context& engine, Batch& batch, std::vector<TokenId>& tokens,
                              int32_t n_keep, int32_t n_batch);

class Generator {
 public:
  // `engine` must have a tokenizer and a context large enough for the prompt.
  // Errors: sampler config invalid for the vocabulary.
  static Result<std::unique_ptr<Generator>> create(Context& engine, const GenerateOptions& options,
                                                   TextSink sink);

  // Prefill: the prompt at positions 0..n-1 (one forward, or n_batch-token chunks),
  // keeping the last row's logits; resets the sampler with the prompt (penalty window).
  Status prefill(std::span<const TokenId> prompt);
  // One loop iteration: sample → gates → forward. false once a gate stopped the run.
  Result<bool> step();
  // Flushes held bytes (a held possible stop-string start that never completed is
  // text) and closes the decode clock.
  void finish();

  const GenerateStats& stats() const { return stats_; }
  const std::vector<TokenId>& generated() const { return state_->generated(); }
  // The tokens in the KV, positions [0, cursor): the prompt and the fed tokens, less
  // what context shifts discarded.
  const std::vector<TokenId>& kv_tokens() const { return tokens_; }

 private:
  Generator(Context& engine, const GenerateOptions& options, TextSink sink);

  // One decode of `tokens` (sequence 0, from pos0); keeps the last row's logits.
  Status decode_run(std::span<const TokenId> tokens, int32_t pos0);
  // The sample half of a step: on_logits, the state's next(), the sinks; done_ and the
  // stop reason when a gate ended the run.
  Result<SeqEvent> sample(std::span<const float> logits);
  // Frees the room the token to feed at `pos` needs (a context shift) and returns its
  // position after the shift.
  Result<int32_t> make_room(int32_t pos);
  // step() with a drafter: the token to feed (pending or sampled), a draft, one verifying
  // forward, then the rows sampled in order while they agree with the draft.
  Result<bool> step_speculative();

  Context& engine_;
  GenerateOptions options_;
  const TokenBytes& token_bytes_;         // the model's (LoadedModel::token_bytes)
  std::unique_ptr<SequenceState> state_;  // sampler, stop hold-back, UTF-8, gates, cursor
  TextSink sink_;
  GenerateStats stats_;

  std::vector<TokenId> tokens_;              // the KV mirror (kv_tokens), reserved to n_ctx
  int32_t n_keep_ = 0;                       // positions a context shift keeps
  Batch batch_;                              // one sequence's rows, reused every step
  std::span<const float> logits_;            // the last decode's last row
  std::vector<TokenId> draft_;               // the current draft (reserved to n_max)
  std::unique_ptr<DraftModel> draft_model_;  // -md
  TokenId pending_ = -1;                     // sampled at a rejected row: fed next step ...
  int32_t pending_pos_ = 0;                  // ... at this position
  EngineStats after_prefill_;
  std::chrono::steady_clock::time_point decode_t0_;
  bool decode_started_ = false;
  bool done_ = false;
};

// prefill + step() until a gate stops + finish.
Result<GenerateStats> generate(Context& engine, std::span<const TokenId> prompt,
                               const GenerateOptions& options, TextSink sink);

}  // namespace minfer::engine
