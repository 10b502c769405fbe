// Stage 14 (logits → token): the individual sampler stages, each a pure function over a
// candidate array (plus the RNG where documented), so each can be tested on its own.
// Invariants: deterministic — every ordering uses the total order (logit desc, id asc), so
// any sort algorithm gives the same result; sums run in array order; no stage allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "sample/rng.h"
#include "sample/sampler_config.h"

namespace minfer::sample {

struct Candidate {
  TokenId id;
  float logit;
  float p;    // probability, valid after softmax()
  float aux;  // scratch for stages that sort by a derived key (typical)
};

// A prefix of the sampler's candidate buffer. `sorted` means ordered by
// (logit desc, id asc); stages that need that order sort on demand and set it.
struct Candidates {
  Candidate* data = nullptr;
  size_t size = 0;
  bool sorted = false;

  Candidate& operator[](size_t i) { return data[i]; }
  const Candidate& operator[](size_t i) const { return data[i]; }
  Candidate* begin() { return data; }
  Candidate* end() { return data + size; }
};

// The one ordering every stage uses: higher logit first, lower id on equal logits.
inline bool logit_desc_id_asc(const Candidate& a, const Candidate& b) {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}
// The same order as a function object, so std::sort / std::partial_sort inline it
// (a function pointer costs a call per comparison over the whole vocabulary).
struct LogitDescIdAsc {
  bool operator()(const Candidate& a, const Candidate& b) const { return logit_desc_id_asc(a, b); }
};

// Sorts the first `k` (all when k >= size) candidates by logit_desc_id_asc.
void sort_candidates(Candidates& c, size_t k);

// p_i = exp(l_i - max) / Σ exp(l_j - max), weights from det_exp in double, summed in
// array order, so probabilities are bit-identical everywhere. -inf logits get p = 0.
// Requires at least one finite logit (MINFER_CHECK).
void softmax(Candidates& c);

// Greedy: the highest logit, lowest id on ties, over an id-ordered or any array.
size_t argmax(const Candidates& c);

// --- logit-space stages that need id == index (run before any reordering) ---

void apply_logit_bias(Candidates& c, std::span<const LogitBias> bias);

struct PenaltyParams {
  float repeat = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
};
// llama.cpp semantics (llama_sampler_penalties_apply): for each distinct token in
// `window` with count c: logit <= 0 ? logit *= repeat : logit /= repeat; then
// logit -= c * frequency + presence. `counts` is n_vocab zeros on entry and on exit;
// `distinct` has room for window.size() ids.
void apply_penalties(Candidates& c, std::span<const TokenId> window, const PenaltyParams& params,
                     std::span<int32_t> counts, std::span<TokenId> distinct);

// --- truncation stages (may reorder and shrink) ---

// Keeps the k best; k <= 0 or k >= size keeps all (order untouched).
void apply_top_k(Candidates& c, int32_t k);
// Locally typical sampling (Meister et al. 2022, arXiv:2202.00666): sort by
// |−ln p − H| ascending (ties: logit desc, id asc) and keep the smallest prefix whose
// mass exceeds p. p >= 1 is a no-op; p = 0 keeps one.
void apply_typical(Candidates& c, float p);
// Nucleus (Holtzman et al. 2019): softmax over the survivors, keep the smallest
// logit-sorted prefix with mass >= p. p <= 0 or p >= 1 is a no-op.
void apply_top_p(Candidates& c, float p);
// Min-p: keep p_i >= p * p_max (equivalently logit_i >= max + ln p); order kept.
// p <= 0 is a no-op; the argmax always survives.
void apply_min_p(Candidates& c, float p);
// XTC ("exclude top choices", oobabooga text-generation-webui #6335 / llama.cpp): with
// chance `probability`, drop every candidate with p >= threshold except the least
// probable of them. Draws exactly one uniform from rng whenever probability > 0 and
// size >= 2. Returns whether candidates were removed.
bool apply_xtc(Candidates& c, float probability, float threshold, Rng& rng);
// Divides logits by temp (> 0).
void apply_temperature(Candidates& c, float temp);
// Softmax, then one uniform u: the first index whose running weight exceeds u * total.
size_t draw(Candidates& c, Rng& rng);

// --- mirostat (Basu et al. 2021, arXiv:2007.14966), replaces top-k … temperature ---

// v1: estimate the Zipf exponent s from the top m probabilities, pick k so that the
// expected surprise is mu, sample from the top k. Updates mu -= eta * (surprise - tau).
size_t mirostat_v1(Candidates& c, float tau, float eta, int32_t m, int32_t n_vocab, float& mu,
                   Rng& rng);
// v2: keep tokens with surprise -log2 p <= mu (at least the argmax), renormalise, draw.
size_t mirostat_v2(Candidates& c, float tau, float eta, float& mu, Rng& rng);

}  // namespace minfer::sample
