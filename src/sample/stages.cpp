// Stage 14 (logits → token): sampler stage implementations (semantics in stages.h).
// Invariants: only std::sort / std::partial_sort with the total order logit_desc_id_asc
// (or a total order extending it), so the kept candidates and their order never depend
// on the sort algorithm; a partial sort's unsorted tail is always dropped or completed
// before anyone reads it; no allocation; exp/log come from det_math.
#include "sample/stages.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "sample/det_math.h"

namespace minfer::sample {

namespace {

float max_logit(const Candidates& c) {
  if (c.sorted && c.size > 0) return c[0].logit;
  float m = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < c.size; ++i) m = std::max(m, c[i].logit);
  return m;
}

// Keeps, in order, the candidates for which keep(cand) is true; returns how many.
template <typename Pred>
size_t compact(Candidates& c, Pred keep) {
  size_t n = 0;
  for (size_t i = 0; i < c.size; ++i) {
    if (keep(c[i])) c[n++] = c[i];
  }
  return n;
}

}  // namespace

void sort_candidates(Candidates& c, size_t k) {
  if (k >= c.size) {
    if (!c.sorted) std::sort(c.begin(), c.end(), LogitDescIdAsc{});
    c.sorted = true;
    return;
  }
  if (!c.sorted) std::partial_sort(c.begin(), c.begin() + k, c.end(), LogitDescIdAsc{});
}

void softmax(Candidates& c) {
  MINFER_CHECK(c.size > 0, "softmax over no candidates");
  const float max = max_logit(c);
  MINFER_CHECK(std::isfinite(max), "softmax: max logit is %f over %zu candidates",
               static_cast<double>(max), c.size);
  double sum = 0.0;
  for (size_t i = 0; i < c.size; ++i) {
    const double w = det_exp(static_cast<double>(c[i].logit) - static_cast<double>(max));
    c[i].p = static_cast<float>(w);  // parked as float; rounding is deterministic too
    sum += w;
  }
  for (size_t i = 0; i < c.size; ++i) c[i].p = static_cast<float>(c[i].p / sum);
}

size_t argmax(const Candidates& c) {
  MINFER_CHECK(c.size > 0, "argmax over no candidates");
  size_t best = 0;
  for (size_t i = 1; i < c.size; ++i) {
    if (logit_desc_id_asc(c[i], c[best])) best = i;
  }
  return best;
}

void apply_logit_bias(Candidates& c, std::span<const LogitBias> bias) {
  for (const LogitBias& b : bias) {
    MINFER_CHECK(b.id >= 0 && static_cast<size_t>(b.id) < c.size && c[b.id].id == b.id,
                 "logit bias id %d needs the id-ordered array of %zu candidates", b.id, c.size);
    c[b.id].logit += b.bias;
  }
}

void apply_penalties(Candidates& c, std::span<const TokenId> window, const PenaltyParams& params,
                     std::span<int32_t> counts, std::span<TokenId> distinct) {
  if (window.empty() ||
      (params.repeat == 1.0f && params.frequency == 0.0f && params.presence == 0.0f)) {
    return;
  }
  MINFER_CHECK(distinct.size() >= window.size(), "penalty scratch %zu < window %zu",
               distinct.size(), window.size());
  size_t n_distinct = 0;
  for (TokenId t : window) {
    MINFER_CHECK(
        t >= 0 && static_cast<size_t>(t) < c.size && static_cast<size_t>(t) < counts.size(),
        "penalty window token %d outside the vocabulary of %zu", t, c.size);
    if (counts[t]++ == 0) distinct[n_distinct++] = t;
  }
  for (size_t i = 0; i < n_distinct; ++i) {
    const TokenId t = distinct[i];
    Candidate& cand = c[t];
    MINFER_CHECK(cand.id == t, "penalties need the id-ordered array (slot %d holds %d)", t,
                 cand.id);
    // Dividing a negative logit would raise it; llama.cpp multiplies instead (the CTRL
    // paper, Keskar et al. 2019, only divides — see llama_sampler_penalties_apply).
    if (cand.logit <= 0.0f) {
      cand.logit *= params.repeat;
    } else {
      cand.logit /= params.repeat;
    }
    cand.logit -= static_cast<float>(counts[t]) * params.frequency + params.presence;
    counts[t] = 0;
  }
  c.sorted = false;
}

void apply_top_k(Candidates& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size) return;
  sort_candidates(c, static_cast<size_t>(k));
  c.size = static_cast<size_t>(k);
  c.sorted = true;
}

void apply_typical(Candidates& c, float p) {
  if (p >= 1.0f || c.size <= 1) return;
  softmax(c);
  double entropy = 0.0;
  for (size_t i = 0; i < c.size; ++i) {
    if (c[i].p > 0.0f) entropy -= static_cast<double>(c[i].p) * det_log(c[i].p);
  }
  for (size_t i = 0; i < c.size; ++i) {
    // |surprisal - entropy|; p == 0 gives +inf and sorts last.
    c[i].aux = static_cast<float>(std::fabs(-det_log(c[i].p) - entropy));
  }
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    if (a.aux != b.aux) return a.aux < b.aux;
    return logit_desc_id_asc(a, b);
  });
  double cum = 0.0;
  size_t keep = c.size;
  for (size_t i = 0; i < c.size; ++i) {
    cum += c[i].p;
    if (cum > static_cast<double>(p)) {
      keep = i + 1;
      break;
    }
  }
  c.size = keep;
  c.sorted = false;
}

void apply_top_p(Candidates& c, float p) {
  if (p <= 0.0f || p >= 1.0f || c.size <= 1) return;
  softmax(c);
  // Sort lazily: the nucleus is usually a few dozen tokens, so sort the best 256 first
  // and complete the sort only if their mass falls short (llama.cpp does the same).
  constexpr size_t kFirstChunk = 256;
  size_t sorted_upto = c.sorted ? c.size : 0;
  double cum = 0.0;
  size_t keep = c.size;
  for (size_t i = 0; i < c.size; ++i) {
    if (i == sorted_upto) {
      // Everything from i on ranks below the sorted prefix, so sorting [i, size)
      // (partially) extends it.
      if (sorted_upto == 0 && c.size > kFirstChunk) {
        std::partial_sort(c.begin(), c.begin() + kFirstChunk, c.end(), LogitDescIdAsc{});
        sorted_upto = kFirstChunk;
      } else {
        std::sort(c.begin() + i, c.end(), LogitDescIdAsc{});
        sorted_upto = c.size;
      }
    }
    cum += c[i].p;
    if (cum >= static_cast<double>(p)) {
      keep = i + 1;
      break;
    }
  }
  c.size = keep;
  c.sorted = true;
}

void apply_min_p(Candidates& c, float p) {
  if (p <= 0.0f || c.size == 0) return;
  const double max = max_logit(c);
  const double min_ratio = p;
  // p_i / p_max = exp(l_i - max); comparing that ratio avoids a log of p.
  c.size = compact(c, [&](const Candidate& cand) {
    return det_exp(static_cast<double>(cand.logit) - max) >= min_ratio;
  });
}

bool apply_xtc(Candidates& c, float probability, float threshold, Rng& rng) {
  if (probability <= 0.0f || c.size < 2) return false;
  const double u = rng.uniform();  // exactly one draw per application
  if (u >= static_cast<double>(probability)) return false;
  softmax(c);
  // The candidates at or above the threshold are a prefix of the logit order; keep the
  // last of them (least probable) and drop the rest, preserving everyone else's order.
  size_t n_above = 0;
  size_t last = 0;
  for (size_t i = 0; i < c.size; ++i) {
    if (c[i].p >= threshold) {
      if (n_above == 0 || logit_desc_id_asc(c[last], c[i])) last = i;
      ++n_above;
    }
  }
  if (n_above < 2) return false;
  const TokenId keep_id = c[last].id;
  c.size =
      compact(c, [&](const Candidate& cand) { return cand.p < threshold || cand.id == keep_id; });
  return true;
}

void apply_temperature(Candidates& c, float temp) {
  MINFER_CHECK(temp > 0.0f, "temperature %f must be > 0 here (greedy handles the rest)",
               static_cast<double>(temp));
  for (size_t i = 0; i < c.size; ++i) c[i].logit /= temp;
}

size_t draw(Candidates& c, Rng& rng) {
  softmax(c);
  double total = 0.0;
  for (size_t i = 0; i < c.size; ++i) total += c[i].p;
  const double target = rng.uniform() * total;
  double cum = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < c.size; ++i) {
    if (c[i].p <= 0.0f) continue;
    cum += c[i].p;
    last_nonzero = i;
    if (cum > target) return i;
  }
  return last_nonzero;  // only reachable through rounding at the very top of the range
}

size_t mirostat_v1(Candidates& c, float tau, float eta, int32_t m, int32_t n_vocab, float& mu,
                   Rng& rng) {
  softmax(c);
  sort_candidates(c, c.size);
  // Least-squares estimate of the Zipf exponent s from the top m ranks (paper eq. 30):
  // s = Σ t_i b_i / Σ t_i², t_i = ln((i+2)/(i+1)), b_i = ln(p_i / p_{i+1}).
  double sum_tb = 0.0;
  double sum_tt = 0.0;
  for (size_t i = 0; i + 1 < c.size && i + 1 < static_cast<size_t>(m); ++i) {
    if (c[i + 1].p <= 0.0f) break;
    const double t = det_log(static_cast<double>(i + 2) / static_cast<double>(i + 1));
    const double b = det_log(static_cast<double>(c[i].p) / static_cast<double>(c[i + 1].p));
    sum_tb += t * b;
    sum_tt += t * t;
  }
  size_t k = 1;
  if (sum_tt > 0.0) {
    const double s = sum_tb / sum_tt;
    const double eps = s - 1.0;
    // k = (eps · 2^mu / (1 - N^-eps))^(1/s); degenerate estimates (s <= 0, eps == 0)
    // leave k = 1 rather than propagating NaN.
    const double denom = 1.0 - det_exp(-eps * det_log(static_cast<double>(n_vocab)));
    const double base = eps * det_exp2(mu) / denom;
    if (s > 0.0 && base > 0.0 && std::isfinite(base)) {
      const double kd = det_exp(det_log(base) / s);
      if (kd >= static_cast<double>(c.size)) {
        k = c.size;
      } else if (kd >= 1.0) {
        k = static_cast<size_t>(kd);
      }
    }
  }
  c.size = k;
  const size_t idx = draw(c, rng);
  const double surprise = -det_log2(c[idx].p);
  mu = static_cast<float>(mu - eta * (surprise - tau));
  return idx;
}

size_t mirostat_v2(Candidates& c, float tau, float eta, float& mu, Rng& rng) {
  softmax(c);
  const size_t best = argmax(c);
  const Candidate top = c[best];
  // Surprise -log2 p <= mu  <=>  p >= 2^-mu.
  const double min_p = det_exp2(-static_cast<double>(mu));
  c.size = compact(c, [&](const Candidate& cand) { return static_cast<double>(cand.p) >= min_p; });
  if (c.size == 0) {
    c[0] = top;
    c.size = 1;
  }
  sort_candidates(c, c.size);
  const size_t idx = draw(c, rng);
  const double surprise = -det_log2(c[idx].p);
  mu = static_cast<float>(mu - eta * (surprise - tau));
  return idx;
}

}  // namespace minfer::sample
