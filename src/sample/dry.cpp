// Stage 14 (logits → token): DRY implementation (see dry.h).
// Invariants: the repeat lengths come from the Z-function of the reversed window, which
// is linear in the window; results depend only on the window and params.
#include "sample/dry.h"

#include <algorithm>

#include "core/check.h"
#include "sample/det_math.h"

namespace minfer::sample {

namespace {

// Whether `breaker` occupies window[end - breaker.size() + 1 .. end].
bool breaker_ends_at(std::span<const TokenId> window, size_t end,
                     const std::vector<TokenId>& breaker) {
  if (breaker.size() > end + 1) return false;
  for (size_t t = 0; t < breaker.size(); ++t) {
    if (window[end + 1 - breaker.size() + t] != breaker[t]) return false;
  }
  return true;
}

}  // namespace

void apply_dry(Candidates& c, std::span<const TokenId> window, const DryParams& params,
               std::span<int32_t> repeat, std::span<int32_t> max_len, std::span<TokenId> touched) {
  const size_t n = window.size();
  if (params.multiplier == 0.0f || n <= static_cast<size_t>(params.allowed_length)) return;
  MINFER_CHECK(repeat.size() >= n && touched.size() >= n, "DRY scratch too small for %zu", n);

  // A repeat may not reach back across a sequence breaker: find the newest complete
  // breaker occurrence (by its last token) and cap repeat lengths at the number of
  // tokens after it (llama.cpp's rep_limit).
  size_t rep_limit = n;
  for (size_t back = 0; back < n && rep_limit == n; ++back) {
    for (const auto& breaker : params.breakers) {
      if (breaker_ends_at(window, n - 1 - back, breaker)) rep_limit = back;
    }
  }
  if (rep_limit < static_cast<size_t>(params.allowed_length)) return;

  // Z-function of the reversed window r[i] = window[n-1-i]: z[k] = length of the longest
  // common prefix of r and r[k..], i.e. how far the earlier occurrence ending at
  // window[n-1-k] matches the window's end. Gusfield's linear algorithm.
  auto r = [&](size_t i) { return window[n - 1 - i]; };
  repeat[0] = static_cast<int32_t>(n);
  size_t lo = 0;
  size_t hi = 0;  // [lo, hi) is the rightmost match window found so far
  for (size_t k = 1; k < n; ++k) {
    size_t z = 0;
    if (k < hi) z = std::min(hi - k, static_cast<size_t>(repeat[k - lo]));
    while (k + z < n && r(z) == r(k + z)) ++z;
    if (k + z > hi) {
      lo = k;
      hi = k + z;
    }
    repeat[k] = static_cast<int32_t>(z);
  }

  // The token after an earlier occurrence would extend it: window[n-k] for shift k.
  size_t n_touched = 0;
  for (size_t k = 1; k < n; ++k) {
    const size_t len = std::min(static_cast<size_t>(repeat[k]), rep_limit);
    if (len < static_cast<size_t>(params.allowed_length)) continue;
    const TokenId next = window[n - k];
    MINFER_CHECK(next >= 0 && static_cast<size_t>(next) < max_len.size(),
                 "DRY window token %d outside the vocabulary", next);
    // max_len stores len + 1 so that 0 keeps meaning "not seen".
    if (max_len[next] == 0) touched[n_touched++] = next;
    max_len[next] = std::max(max_len[next], static_cast<int32_t>(len + 1));
  }

  // Cap the exponent so base^exp stays below FLT_MAX (ln FLT_MAX ≈ 88.72).
  int32_t max_exponent = 0;
  if (params.base > 1.000001f) {
    max_exponent = static_cast<int32_t>(88.7228391 / det_log(params.base));
  }
  for (size_t i = 0; i < n_touched; ++i) {
    const TokenId t = touched[i];
    const int32_t len = max_len[t] - 1;
    max_len[t] = 0;
    bool single_breaker = false;
    for (const auto& breaker : params.breakers) {
      single_breaker |= breaker.size() == 1 && breaker[0] == t;
    }
    if (single_breaker) continue;
    MINFER_CHECK(c[t].id == t, "DRY needs the id-ordered array (slot %d holds %d)", t, c[t].id);
    int32_t exponent = len - params.allowed_length;
    if (max_exponent > 0) exponent = std::min(exponent, max_exponent);
    const double penalty =
        static_cast<double>(params.multiplier) * det_exp(exponent * det_log(params.base));
    c[t].logit = static_cast<float>(c[t].logit - penalty);
  }
  c.sorted = false;
}

}  // namespace minfer::sample
