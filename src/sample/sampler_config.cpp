// Stage 14 (logits → token): SamplerConfig::validate — refuse, never clamp.
// Invariant: each error names the field (as the CLI flag spells it) and the bad value.
#include "sample/sampler_config.h"

#include <fmt/format.h>

#include <cmath>

namespace minfer::sample {

namespace {

// Values keep their own type so fmt prints them as the user wrote them (0.6, not
// 0.60000002384).
template <typename T>
Error bad(const char* field, T value, const char* rule) {
  return make_error(fmt::format("sampler: {} = {} is invalid ({})", field, value, rule));
}

bool in_unit(float v) {
  return v >= 0.0f && v <= 1.0f;
}  // false for NaN

}  // namespace

Status SamplerConfig::validate() const {
  // temp <= 0 is accepted and means greedy, like llama.cpp's --temp 0 / negative temps.
  if (!std::isfinite(temp)) return bad("temp", temp, "must be finite; <= 0 means greedy");
  if (top_k < 0) return bad("top-k", top_k, "must be >= 0; 0 disables");
  if (!in_unit(top_p)) return bad("top-p", top_p, "must be in [0, 1]");
  if (!in_unit(min_p)) return bad("min-p", min_p, "must be in [0, 1]");
  if (!in_unit(typical_p)) return bad("typical", typical_p, "must be in [0, 1]; 1 disables");
  if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f)) {
    return bad("repeat-penalty", repeat_penalty, "must be finite and > 0; 1 disables");
  }
  if (repeat_last_n < 0) return bad("repeat-last-n", repeat_last_n, "must be >= 0; 0 disables");
  if (!std::isfinite(frequency_penalty)) {
    return bad("frequency-penalty", frequency_penalty, "must be finite");
  }
  if (!std::isfinite(presence_penalty)) {
    return bad("presence-penalty", presence_penalty, "must be finite");
  }
  if (!in_unit(xtc_probability)) {
    return bad("xtc-probability", xtc_probability, "must be in [0, 1]");
  }
  // Above 0.5 at most one token can clear the threshold, so XTC could never act.
  if (!(xtc_threshold >= 0.0f && xtc_threshold <= 0.5f)) {
    return bad("xtc-threshold", xtc_threshold, "must be in [0, 0.5]");
  }
  if (!(std::isfinite(dry_multiplier) && dry_multiplier >= 0.0f)) {
    return bad("dry-multiplier", dry_multiplier, "must be finite and >= 0; 0 disables");
  }
  if (!(std::isfinite(dry_base) && dry_base >= 1.0f)) {
    return bad("dry-base", dry_base, "must be finite and >= 1");
  }
  if (dry_allowed_length < 0) {
    return bad("dry-allowed-length", dry_allowed_length, "must be >= 0");
  }
  if (dry_penalty_last_n < 0 || (dry_multiplier > 0.0f && dry_penalty_last_n == 0)) {
    return bad("dry-penalty-last-n", dry_penalty_last_n, "must be >= 1 when DRY is on");
  }
  for (const auto& breaker : dry_sequence_breakers) {
    if (breaker.empty()) {
      return make_error("sampler: dry-sequence-breakers has an empty sequence");
    }
    for (TokenId id : breaker) {
      if (id < 0) return bad("dry-sequence-breakers id", id, "must be >= 0");
    }
  }
  const auto mode = static_cast<int32_t>(mirostat);
  if (mode < 0 || mode > 2) return bad("mirostat", mode, "must be 0 (off), 1 or 2");
  if (!(std::isfinite(mirostat_tau) && mirostat_tau > 0.0f)) {
    return bad("mirostat-tau", mirostat_tau, "must be finite and > 0");
  }
  if (!in_unit(mirostat_eta)) return bad("mirostat-eta", mirostat_eta, "must be in [0, 1]");
  // v1 fits the Zipf exponent to ratios of neighbouring ranks: it needs two ranks.
  if (mirostat_m < 2) return bad("mirostat-m", mirostat_m, "must be >= 2");
  for (const LogitBias& b : logit_bias) {
    if (b.id < 0) return bad("logit-bias id", b.id, "must be >= 0");
    if (!(b.bias >= -kMaxLogitBias && b.bias <= kMaxLogitBias)) {
      return make_error(
          fmt::format("sampler: logit-bias {}:{} is invalid (bias must be in [-{}, {}])", b.id,
                      b.bias, kMaxLogitBias, kMaxLogitBias));
    }
  }
  return Ok{};
}

Status SamplerConfig::validate_for_vocab(int32_t n_vocab) const {
  MINFER_TRY_STATUS(validate());
  if (n_vocab <= 0) return bad("n_vocab", n_vocab, "the vocabulary must not be empty");
  for (const LogitBias& b : logit_bias) {
    if (b.id >= n_vocab) {
      return make_error(
          fmt::format("sampler: logit-bias id {} is invalid (must be < the vocabulary size {})",
                      b.id, n_vocab));
    }
  }
  for (const auto& breaker : dry_sequence_breakers) {
    for (TokenId id : breaker) {
      if (id >= n_vocab) {
        return make_error(fmt::format(
            "sampler: dry-sequence-breakers id {} is invalid (must be < the vocabulary size {})",
            id, n_vocab));
      }
    }
  }
  return Ok{};
}

}  // namespace minfer::sample
