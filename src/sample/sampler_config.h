// Stage 14 (logits → token): every sampling knob in one struct, with the CLI defaults.
// Invariants: validate() refuses nonsensical values with an error naming the field and
// the value — it never clamps; every optional stage defaults to a no-op.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"

namespace minfer::sample {

using TokenId = int32_t;  // same type as tokenizer::TokenId

// Below this temperature the sampler is greedy (argmax, lowest id on ties, no RNG draw).
constexpr float kGreedyTemp = 1e-6f;
// Logit-bias range accepted from users (docs/reference minfer-features §1.2).
constexpr float kMaxLogitBias = 100.0f;

struct LogitBias {
  TokenId id = 0;
  float bias = 0.0f;
};

enum class Mirostat : int32_t { kOff = 0, kV1 = 1, kV2 = 2 };

// Designated-initializer friendly: `SamplerConfig{.temp = 0.7f, .top_k = 20}`.
// The defaults are llama.cpp's (common_params_sampling: temp 0.8, top-k 40, top-p 0.95,
// min-p 0.05, repeat penalty 1.0 over 64 tokens) and the one table of defaults the CLI,
// the chat and the server share; the CLI's --help prints them from here.
struct SamplerConfig {
  uint64_t seed = 42;
  float temp = 0.8f;                // < kGreedyTemp (including <= 0) → greedy
  int32_t top_k = 40;               // 0 disables
  float top_p = 0.95f;              // in [0,1]; 0 or 1 disables
  float min_p = 0.05f;              // in [0,1]; 0 disables; 1 keeps only the argmax (and ties)
  float typical_p = 1.0f;           // in [0,1]; 1 disables; 0 keeps the single most typical
  float repeat_penalty = 1.0f;      // > 0; 1 disables
  int32_t repeat_last_n = 64;       // penalty window (tokens); 0 disables all penalties
  float frequency_penalty = 0.0f;   // subtracted count times
  float presence_penalty = 0.0f;    // subtracted once per distinct token in the window
  float xtc_probability = 0.0f;     // in [0,1]; 0 disables
  float xtc_threshold = 0.5f;       // in [0,0.5]
  float dry_multiplier = 0.0f;      // >= 0; 0 disables DRY
  float dry_base = 1.75f;           // >= 1
  int32_t dry_allowed_length = 2;   // >= 0
  int32_t dry_penalty_last_n = 64;  // >= 1 when DRY is on
  // Token-id sequences that reset DRY's repetition matching (e.g. {{198}, {13, 2}}).
  std::vector<std::vector<TokenId>> dry_sequence_breakers;
  Mirostat mirostat = Mirostat::kOff;
  float mirostat_tau = 5.0f;  // target surprise in bits, > 0
  float mirostat_eta = 0.1f;  // learning rate, in [0,1]
  int32_t mirostat_m = 100;   // v1 estimator window, >= 1
  std::vector<LogitBias> logit_bias;

  // Checks values that do not need the vocabulary.
  Status validate() const;
  // validate() plus: logit-bias and DRY-breaker ids must be < n_vocab.
  Status validate_for_vocab(int32_t n_vocab) const;

  bool greedy() const { return !(temp >= kGreedyTemp); }
};

}  // namespace minfer::sample
