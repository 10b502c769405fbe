// Stage 14 tests: helpers shared by the sampler tests.
// Invariant: expected values in the tests are computed by hand (see each test's comment).
#pragma once

#include <cmath>
#include <vector>

#include "sample/stages.h"

namespace minfer::sample::testing {

// Probabilities are floats from a double softmax: a few float ulp around 0.1–1.
constexpr float kProbTol = 1e-6f;

// Owns an id-ordered candidate array built from logits.
struct Cands {
  std::vector<Candidate> storage;
  Candidates view;

  explicit Cands(const std::vector<float>& logits) {
    for (size_t i = 0; i < logits.size(); ++i) {
      storage.push_back(Candidate{static_cast<TokenId>(i), logits[i], 0.0f, 0.0f});
    }
    view = Candidates{storage.data(), storage.size(), false};
  }
  std::vector<TokenId> ids() const {
    std::vector<TokenId> out;
    for (size_t i = 0; i < view.size; ++i) out.push_back(view[i].id);
    return out;
  }
  std::vector<float> logits() const {
    std::vector<float> out;
    for (size_t i = 0; i < view.size; ++i) out.push_back(view[i].logit);
    return out;
  }
};

// Logits whose softmax is exactly proportional to `probs`.
inline std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

}  // namespace minfer::sample::testing
