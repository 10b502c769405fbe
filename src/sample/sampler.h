// Stage 14 (logits → token): the sampler chain the decode loop calls once per token.
// Invariants: same config, seed, history and logits → same token on every machine and
// thread count (sample/stages.h); all scratch is sized to n_vocab at creation, so
// sample() and accept() never allocate; greedy (temp < 1e-6) consumes no RNG draw.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/result.h"
#include "sample/rng.h"
#include "sample/sampler_config.h"
#include "sample/stages.h"

namespace minfer::sample {

// A constraint asked about one token at a time (sample_filtered): 1 the token may come
// next, 0 it may not, -1 the filter cannot tell (the caller then masks the logits).
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  virtual int allows(TokenId id) = 0;
};

// Chain order (docs/ARCHITECTURE.md §1 row 14; minfer-features §5.1):
//   logit bias → penalties (repeat/frequency/presence over the last repeat_last_n
//   tokens) → DRY → greedy shortcut (temp < 1e-6: argmax, lowest id on ties) →
//   top-k → typical → top-p → min-p → XTC → temperature → seeded draw,
//   or, with mirostat on, mirostat v1/v2 in place of top-k … draw.
//
// Use: create once per run / session / server slot; reset(prompt) seeds the penalty
// window with the prompt tail; per step: sample(logits) then accept(token) for every
// token that joins the context (the caller decides — e.g. a dropped end-of-generation
// token in single-shot mode is not accepted).
class Sampler {
 public:
  // Validates `config` against the vocabulary (errors name the field and value).
  static Result<Sampler> create(const SamplerConfig& config, int32_t n_vocab);

  // Clears the history, reseeds the RNG from config.seed, resets mirostat's mu to
  // 2·tau, then accepts the prompt's tokens (only the tail that fits the window stays).
  void reset(std::span<const TokenId> prompt);
  // Appends a token to the history (penalty and DRY windows).
  void accept(TokenId token);

  // One token from `logits` (F32 [n_vocab]). Errors: a NaN or +inf logit, or no
  // finite logit at all (the model produced unusable output).
  Result<TokenId> sample(std::span<const float> logits);

  // What sample() would return (token, candidates, RNG draws, mirostat mu) on `logits`
  // with every token the filter refuses set to -inf — found by asking the filter about
  // the best candidates in order instead of masking the vocabulary: the greedy pick is
  // the first allowed token, top-k's survivors the first k allowed ones, and the stages
  // after top-k only see those. nullopt (nothing consumed, nothing changed) where that
  // shortcut cannot decide: mirostat, top-k off or above kMaxFilteredTopK, a NaN/+inf
  // logit, the filter answering -1, or fewer than k allowed finite logits among the best
  // max(64, 4k); the caller then masks and calls sample().
  static constexpr int32_t kMaxFilteredTopK = 256;
  Result<std::optional<TokenId>> sample_filtered(std::span<const float> logits,
                                                 TokenFilter& filter);

  // The candidates as they stood at the draw (after the last sample()): the survivors
  // of the chain with their final probabilities. For tests, tracing and logprobs.
  std::span<const Candidate> last_candidates() const { return {candidates_.data(), last_size_}; }
  const SamplerConfig& config() const { return config_; }
  int32_t n_vocab() const { return n_vocab_; }
  float mirostat_mu() const { return mu_; }
  size_t history_size() const { return history_size_; }
  uint64_t rng_draws() const { return rng_.draws(); }

 private:
  Sampler(const SamplerConfig& config, int32_t n_vocab);

  Result<TokenId> sample_plain_greedy(std::span<const float> logits);
  // Bias, penalties and DRY on the id-ordered candidate array.
  void apply_logit_stages(Candidates& c);
  // Top-k onwards (or mirostat) on candidates that hold the chain's input.
  TokenId sample_tail(Candidates& c);
  // Copies the last n history tokens, oldest first, into window_ (no allocation).
  std::span<const TokenId> recent(size_t n);

  SamplerConfig config_;
  int32_t n_vocab_ = 0;
  Rng rng_;
  float mu_ = 0.0f;

  // History ring: capacity = max(repeat_last_n, dry_penalty_last_n when DRY is on).
  std::vector<TokenId> history_;
  size_t history_head_ = 0;  // next write slot
  size_t history_size_ = 0;

  // Scratch, sized once.
  std::vector<Candidate> candidates_;  // n_vocab
  std::vector<int32_t> counts_;        // n_vocab, all zero between calls
  std::vector<TokenId> window_;        // history capacity
  std::vector<TokenId> distinct_;      // history capacity
  std::vector<int32_t> dry_repeat_;    // history capacity
  std::vector<TokenId> dry_touched_;   // history capacity
  size_t last_size_ = 0;
};

}  // namespace minfer::sample
