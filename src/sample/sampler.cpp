// Stage 14 (logits → token): the sampler chain (order and contract in sampler.h).
// Invariants: every buffer is sized in the constructor; sample() and accept() only
// index into them; the candidate array is id-ordered until the first truncation stage.
#include "sample/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "sample/dry.h"

namespace minfer::sample {

Result<Sampler> Sampler::create(const SamplerConfig& config, int32_t n_vocab) {
  MINFER_TRY_STATUS(config.validate_for_vocab(n_vocab));
  return Sampler(config, n_vocab);
}

Sampler::Sampler(const SamplerConfig& config, int32_t n_vocab)
    : config_(config), n_vocab_(n_vocab), rng_(config.seed), mu_(2.0f * config.mirostat_tau) {
  const size_t dry_n =
      config.dry_multiplier > 0.0f ? static_cast<size_t>(config.dry_penalty_last_n) : 0;
  const size_t cap = std::max(static_cast<size_t>(config.repeat_last_n), dry_n);
  history_.assign(cap, 0);
  candidates_.resize(static_cast<size_t>(n_vocab));
  counts_.assign(static_cast<size_t>(n_vocab), 0);
  window_.resize(cap);
  distinct_.resize(cap);
  dry_repeat_.resize(dry_n);
  dry_touched_.resize(dry_n);
}

void Sampler::reset(std::span<const TokenId> prompt) {
  history_head_ = 0;
  history_size_ = 0;
  rng_.reseed(config_.seed);
  mu_ = 2.0f * config_.mirostat_tau;  // Basu et al.: start at twice the target surprise
  // Only the tail can stay in the ring; skip the rest without touching it.
  const size_t skip = prompt.size() > history_.size() ? prompt.size() - history_.size() : 0;
  for (TokenId t : prompt.subspan(skip)) accept(t);
}

void Sampler::accept(TokenId token) {
  MINFER_CHECK(token >= 0 && token < n_vocab_, "accept(%d) outside the vocabulary of %d", token,
               n_vocab_);
  if (history_.empty()) return;
  history_[history_head_] = token;
  history_head_ = (history_head_ + 1) % history_.size();
  history_size_ = std::min(history_size_ + 1, history_.size());
}

std::span<const TokenId> Sampler::recent(size_t n) {
  n = std::min(n, history_size_);
  const size_t cap = history_.size();
  // Oldest of the last n sits n slots behind the write head.
  size_t pos = (history_head_ + cap - n) % (cap == 0 ? 1 : cap);
  for (size_t i = 0; i < n; ++i) {
    window_[i] = history_[pos];
    pos = pos + 1 == cap ? 0 : pos + 1;
  }
  return {window_.data(), n};
}

// Greedy with no stage that changes a logit (no bias, neutral penalties, no DRY): the
// argmax of the raw logits, ties to the lowest id — what the full chain picks, without
// writing the candidate array (a server step samples every running sequence).
Result<TokenId> Sampler::sample_plain_greedy(std::span<const float> logits) {
  size_t best = 0;
  float best_logit = logits[0];
  bool bad = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    bad |= std::isnan(l) || l == HUGE_VALF;
    if (l > best_logit) {
      best_logit = l;
      best = i;
    }
  }
  if (bad) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isnan(logits[i]) || logits[i] == HUGE_VALF) {
        return make_error(fmt::format("sampler: logit of token {} is {}", i, logits[i]));
      }
    }
  }
  if (best_logit == -HUGE_VALF) return make_error("sampler: every logit is -inf");
  candidates_[0] = Candidate{static_cast<TokenId>(best), best_logit, 1.0f, 0.0f};
  last_size_ = 1;
  return static_cast<TokenId>(best);
}

Result<TokenId> Sampler::sample(std::span<const float> logits) {
  MINFER_CHECK(logits.size() == static_cast<size_t>(n_vocab_),
               "sample() got %zu logits for a vocabulary of %d", logits.size(), n_vocab_);
  last_size_ = 0;
  if (config_.greedy() && config_.logit_bias.empty() && config_.dry_multiplier <= 0.0f &&
      (config_.repeat_last_n == 0 ||
       (config_.repeat_penalty == 1.0f && config_.frequency_penalty == 0.0f &&
        config_.presence_penalty == 0.0f))) {
    return sample_plain_greedy(logits);
  }
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    // -inf is a legitimate mask; NaN and +inf mean the forward pass went wrong.
    if (std::isnan(l) || l == HUGE_VALF) {
      return make_error(fmt::format("sampler: logit of token {} is {}", i, l));
    }
    any_finite |= std::isfinite(l);
    candidates_[i] = Candidate{static_cast<TokenId>(i), l, 0.0f, 0.0f};
  }
  if (!any_finite) return make_error("sampler: every logit is -inf");

  Candidates c{candidates_.data(), candidates_.size(), false};
  apply_logit_stages(c);

  // 2. Greedy: argmax of the adjusted logits, before any stage that could drop it.
  if (config_.greedy()) {
    const size_t best = argmax(c);
    std::swap(c[0], c[best]);
    c[0].p = 1.0f;
    last_size_ = 1;
    return c[0].id;
  }
  return sample_tail(c);
}

void Sampler::apply_logit_stages(Candidates& c) {
  // 1. Logit-space stages on the id-ordered array.
  apply_logit_bias(c, config_.logit_bias);
  apply_penalties(c, recent(static_cast<size_t>(config_.repeat_last_n)),
                  PenaltyParams{.repeat = config_.repeat_penalty,
                                .frequency = config_.frequency_penalty,
                                .presence = config_.presence_penalty},
                  counts_, distinct_);
  if (config_.dry_multiplier > 0.0f) {
    apply_dry(c, recent(static_cast<size_t>(config_.dry_penalty_last_n)),
              DryParams{.multiplier = config_.dry_multiplier,
                        .base = config_.dry_base,
                        .allowed_length = config_.dry_allowed_length,
                        .breakers = config_.dry_sequence_breakers},
              dry_repeat_, counts_, dry_touched_);
  }
  // A bias or penalty can push the only finite logits to -inf only through overflow,
  // which the bounded bias and finite penalties cannot reach from finite input.
}

TokenId Sampler::sample_tail(Candidates& c) {
  size_t idx = 0;
  if (config_.mirostat == Mirostat::kV1) {
    idx = mirostat_v1(c, config_.mirostat_tau, config_.mirostat_eta, config_.mirostat_m, n_vocab_,
                      mu_, rng_);
  } else if (config_.mirostat == Mirostat::kV2) {
    idx = mirostat_v2(c, config_.mirostat_tau, config_.mirostat_eta, mu_, rng_);
  } else {
    apply_top_k(c, config_.top_k);
    apply_typical(c, config_.typical_p);
    apply_top_p(c, config_.top_p);
    apply_min_p(c, config_.min_p);
    apply_xtc(c, config_.xtc_probability, config_.xtc_threshold, rng_);
    apply_temperature(c, config_.temp);
    idx = draw(c, rng_);
  }
  last_size_ = c.size;
  return c[idx].id;
}

Result<std::optional<TokenId>> Sampler::sample_filtered(std::span<const float> logits,
                                                        TokenFilter& filter) {
  MINFER_CHECK(logits.size() == static_cast<size_t>(n_vocab_),
               "sample_filtered() got %zu logits for a vocabulary of %d", logits.size(), n_vocab_);
  last_size_ = 0;
  const bool greedy = config_.greedy();
  if (config_.mirostat != Mirostat::kOff) return std::optional<TokenId>();
  if (!greedy && (config_.top_k <= 0 || config_.top_k > kMaxFilteredTopK))
    return std::optional<TokenId>();
  const size_t need = greedy ? 1 : static_cast<size_t>(config_.top_k);
  // top-k >= the vocabulary keeps every token (masked ones too): not this shortcut's case.
  if (need >= logits.size()) return std::optional<TokenId>();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    // A bad logit is an error only if the mask leaves it: let the masked path decide.
    if (std::isnan(l) || l == HUGE_VALF) return std::optional<TokenId>();
    candidates_[i] = Candidate{static_cast<TokenId>(i), l, 0.0f, 0.0f};
  }
  Candidates c{candidates_.data(), candidates_.size(), false};
  apply_logit_stages(c);

  // The masked array's order (logit desc, id asc) restricted to allowed finite logits:
  // scan the best candidates in that order, compacting the allowed ones to the front.
  // Greedy tries the argmax alone first (one filter call in the common case).
  size_t found = 0;
  if (greedy) {
    const size_t best = argmax(c);
    if (c[best].logit == -HUGE_VALF) return std::optional<TokenId>();
    const int r = filter.allows(c[best].id);
    if (r < 0) return std::optional<TokenId>();
    if (r > 0) {
      std::swap(c[0], c[best]);
      found = 1;
    }
  }
  if (found < need) {
    // One round over the best max(64, 4k): a constraint that allows fewer of them is a
    // narrow one, whose mask is cheap to build (its trie walk dies early) — mask it.
    const size_t upto = std::min(c.size, std::max<size_t>(64, 4 * need));
    std::partial_sort(c.begin(), c.begin() + upto, c.end(), LogitDescIdAsc{});
    for (size_t i = 0; i < upto && found < need; ++i) {
      if (c[i].logit == -HUGE_VALF) return std::optional<TokenId>();  // fewer than k finite
      const int r = filter.allows(c[i].id);
      if (r < 0) return std::optional<TokenId>();
      if (r > 0) c[found++] = c[i];  // found <= i: an already scanned slot
    }
    if (found < need) return std::optional<TokenId>();
  }
  if (greedy) {
    c[0].p = 1.0f;
    last_size_ = 1;
    return std::optional<TokenId>(c[0].id);
  }
  // What apply_top_k leaves on the masked array; it is a no-op on a sorted array of k.
  c.size = need;
  c.sorted = true;
  return std::optional<TokenId>(sample_tail(c));
}

}  // namespace minfer::sample
