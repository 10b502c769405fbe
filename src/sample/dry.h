// Stage 14 (logits → token): DRY, the "don't repeat yourself" n-gram repetition penalty.
// Invariants: runs on the id-ordered candidate array; O(window · breakers) per token
// with scratch passed in (no allocation); breakers are token-id sequences.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sample/stages.h"

namespace minfer::sample {

struct DryParams {
  float multiplier = 0.0f;  // 0 → off
  float base = 1.75f;
  int32_t allowed_length = 2;
  std::span<const std::vector<TokenId>> breakers;  // each non-empty
};

// DRY (p-e-w, oobabooga text-generation-webui #5677; llama.cpp llama_sampler_dry_apply):
// if emitting token t would extend a sequence that already occurred in `window` (oldest
// first) to a repeat of length L >= allowed_length, then
//   logit_t -= multiplier · base^(L - allowed_length)
// with the exponent capped so the penalty stays a finite float. A breaker sequence in
// the window caps L at the number of tokens after it, and a token that is by itself a
// breaker is never penalised.
// Scratch: `repeat` >= window.size(); `max_len` n_vocab zeros on entry and on exit;
// `touched` >= window.size().
void apply_dry(Candidates& c, std::span<const TokenId> window, const DryParams& params,
               std::span<int32_t> repeat, std::span<int32_t> max_len, std::span<TokenId> touched);

}  // namespace minfer::sample
