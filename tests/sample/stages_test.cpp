// Stage 14 tests: each sampler stage alone, against values computed by hand.
// Invariants pinned: exact survivor sets and order (logit desc, id asc on ties), the
// llama.cpp penalty formula, one RNG draw per XTC application.
#include "sample/stages.h"

#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace minfer::sample {
namespace {

using testing::Cands;
using testing::kProbTol;
using testing::logits_for;
using Ids = std::vector<TokenId>;

// p = {0.15, 0.5, 0.05, 0.3} for ids 0..3: sorted order is 1 (0.5), 3 (0.3), 0 (0.15),
// 2 (0.05).
const std::vector<double> kProbs = {0.15, 0.5, 0.05, 0.3};

TEST(Softmax, ThreeLogitsWithin1e6) {
  // e^-2, e^-1, 1 over their sum 1.503214724.
  Cands c({1.0f, 2.0f, 3.0f});
  softmax(c.view);
  EXPECT_NEAR(c.view[0].p, 0.09003057f, kProbTol);
  EXPECT_NEAR(c.view[1].p, 0.24472847f, kProbTol);
  EXPECT_NEAR(c.view[2].p, 0.66524096f, kProbTol);
}

TEST(Softmax, MinusInfinityGetsZero) {
  Cands c({0.0f, -INFINITY, 0.0f});
  softmax(c.view);
  EXPECT_EQ(c.view[1].p, 0.0f);
  EXPECT_NEAR(c.view[0].p, 0.5f, kProbTol);
}

TEST(Argmax, TiesGoToLowestId) {
  Cands c({1.0f, 5.0f, 5.0f, 3.0f});
  EXPECT_EQ(argmax(c.view), 1u);
  Cands all_equal({2.0f, 2.0f, 2.0f});
  EXPECT_EQ(argmax(all_equal.view), 0u);
}

TEST(LogitBias, AddsToNamedIds) {
  Cands c({1.0f, 2.0f, 3.0f});
  const LogitBias bias[] = {{.id = 0, .bias = 2.5f}, {.id = 2, .bias = -100.0f}};
  apply_logit_bias(c.view, bias);
  EXPECT_EQ(c.logits(), (std::vector<float>{3.5f, 2.0f, -97.0f}));
}

TEST(Penalties, LlamaCppFormulaOnAKnownWindow_exact) {
  // window counts: 5→2, 1→1, 2→1, 3→1. repeat 2, frequency 0.5, presence 0.25:
  //   id1: -1 → ×2 = -2 → - (1·0.5 + 0.25) = -2.75   (negative: multiplied)
  //   id2:  2 → ÷2 =  1 → - 0.75             =  0.25  (positive: divided)
  //   id3:  0 → ×2 =  0 → - 0.75             = -0.75
  //   id5:  4 → ÷2 =  2 → - (2·0.5 + 0.25)   =  0.75  (frequency counts twice)
  Cands c({1.0f, -1.0f, 2.0f, 0.0f, 3.0f, 4.0f});
  const TokenId window[] = {5, 1, 5, 2, 3};
  std::vector<int32_t> counts(6, 0);
  std::vector<TokenId> distinct(5);
  apply_penalties(c.view, window, {.repeat = 2.0f, .frequency = 0.5f, .presence = 0.25f}, counts,
                  distinct);
  EXPECT_EQ(c.logits(), (std::vector<float>{1.0f, -2.75f, 0.25f, -0.75f, 3.0f, 0.75f}));
  EXPECT_EQ(counts, std::vector<int32_t>(6, 0)) << "scratch must be left zeroed";
}

TEST(Penalties, NeutralParamsChangeNothing) {
  Cands c({1.0f, -1.0f});
  const TokenId window[] = {0, 1};
  std::vector<int32_t> counts(2, 0);
  std::vector<TokenId> distinct(2);
  apply_penalties(c.view, window, {}, counts, distinct);
  EXPECT_EQ(c.logits(), (std::vector<float>{1.0f, -1.0f}));
}

TEST(TopK, KeepsKBestWithIdTieBreak) {
  Cands c({1.0f, 3.0f, 3.0f, 2.0f, 0.0f});
  apply_top_k(c.view, 2);
  EXPECT_EQ(c.ids(), (Ids{1, 2}));
  Cands c3({1.0f, 3.0f, 3.0f, 2.0f, 0.0f});
  apply_top_k(c3.view, 3);
  EXPECT_EQ(c3.ids(), (Ids{1, 2, 3}));
}

TEST(TopK, ZeroOrLargeKIsANoOp) {
  Cands c({1.0f, 3.0f, 2.0f});
  apply_top_k(c.view, 0);
  EXPECT_EQ(c.ids(), (Ids{0, 1, 2}));
  apply_top_k(c.view, 3);
  EXPECT_EQ(c.ids(), (Ids{0, 1, 2}));
}

TEST(TopP, SmallestPrefixReachingP) {
  // Cumulative in sorted order: 0.5, 0.8, 0.95, 1.0.
  struct Case {
    float p;
    Ids want;
  };
  for (const Case& t :
       {Case{0.45f, {1}}, Case{0.75f, {1, 3}}, Case{0.85f, {1, 3, 0}}, Case{0.97f, {1, 3, 0, 2}}}) {
    Cands c(logits_for(kProbs));
    apply_top_p(c.view, t.p);
    EXPECT_EQ(c.ids(), t.want) << "top_p=" << t.p;
    EXPECT_TRUE(c.view.sorted);
  }
}

TEST(TopP, BoundsDisable) {
  for (float p : {0.0f, 1.0f}) {
    Cands c(logits_for(kProbs));
    apply_top_p(c.view, p);
    EXPECT_EQ(c.ids(), (Ids{0, 1, 2, 3})) << "top_p=" << p;
  }
}

TEST(TopP, LargeVocabLazySortMatchesFullSort) {
  // 3000 near-uniform candidates: the nucleus is far past the first 256-entry chunk.
  std::vector<float> logits(3000);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 7919) % 3000) * 1e-4f;
  Cands c(logits);
  apply_top_p(c.view, 0.9f);
  ASSERT_GT(c.view.size, 256u);
  for (size_t i = 1; i < c.view.size; ++i) {
    ASSERT_TRUE(logit_desc_id_asc(c.view[i - 1], c.view[i])) << i;
  }
}

TEST(MinP, KeepsAtLeastPTimesMaxInOrder) {
  // p_max = 0.5: min_p 0.25 → p >= 0.125 keeps ids 0, 1, 3 (0.05 drops);
  // min_p 0.5 → p >= 0.25 keeps 1, 3; min_p 1 keeps only the argmax.
  struct Case {
    float min_p;
    Ids want;
  };
  for (const Case& t :
       {Case{0.25f, {0, 1, 3}}, Case{0.5f, {1, 3}}, Case{1.0f, {1}}, Case{0.0f, {0, 1, 2, 3}}}) {
    Cands c(logits_for(kProbs));
    apply_min_p(c.view, t.min_p);
    EXPECT_EQ(c.ids(), t.want) << "min_p=" << t.min_p;
  }
}

TEST(Typical, KeepsTheMostTypicalMass) {
  // H = -Σ p ln p = 1.14212 nats. |−ln p − H|: 0.3 → 0.0619, 0.5 → 0.4490,
  // 0.15 → 0.7550, 0.05 → 1.8536; so the order is 3, 1, 0, 2 with mass 0.3, 0.8, 0.95.
  struct Case {
    float p;
    Ids want;
  };
  for (const Case& t : {Case{0.0f, {3}}, Case{0.2f, {3}}, Case{0.5f, {3, 1}}, Case{0.9f, {3, 1, 0}},
                        Case{1.0f, {0, 1, 2, 3}}}) {
    Cands c(logits_for(kProbs));
    apply_typical(c.view, t.p);
    EXPECT_EQ(c.ids(), t.want) << "typical=" << t.p;
  }
}

TEST(Xtc, DropsTopChoicesButTheLeastProbableOfThem) {
  // threshold 0.1: 0.5, 0.3, 0.15 clear it; keep 0.15 (id 0) and the rest below (id 2).
  Cands c(logits_for(kProbs));
  Rng rng(42);
  EXPECT_TRUE(apply_xtc(c.view, 1.0f, 0.1f, rng));
  EXPECT_EQ(c.ids(), (Ids{0, 2}));
}

TEST(Xtc, OneTokenAboveThresholdChangesNothing) {
  Cands c(logits_for(kProbs));
  Rng rng(42);
  EXPECT_FALSE(apply_xtc(c.view, 1.0f, 0.35f, rng));
  EXPECT_EQ(c.ids(), (Ids{0, 1, 2, 3}));
}

TEST(Xtc, ConsumesExactlyOneDrawPerApplication) {
  // Seed 42's first uniform is 0.0839: probability 0.05 skips, 0.1 applies; both draw once.
  for (float prob : {0.05f, 0.1f}) {
    Cands c(logits_for(kProbs));
    Rng rng(42);
    const bool applied = apply_xtc(c.view, prob, 0.1f, rng);
    EXPECT_EQ(applied, prob > 0.0839f);
    Rng ref(42);
    ref.next_u64();
    EXPECT_EQ(rng.next_u64(), ref.next_u64()) << "probability " << prob;
  }
  Cands c(logits_for(kProbs));
  Rng rng(42);
  apply_xtc(c.view, 0.0f, 0.1f, rng);  // off: no draw
  EXPECT_EQ(rng.next_u64(), Rng(42).next_u64());
}

TEST(Temperature, DividesLogits) {
  Cands c({1.0f, 2.0f, -3.0f});
  apply_temperature(c.view, 0.5f);
  EXPECT_EQ(c.logits(), (std::vector<float>{2.0f, 4.0f, -6.0f}));
}

TEST(Draw, Seed42PicksByCumulativeMass) {
  // In id order the cumulative mass is 0.15, 0.65, 0.70, 1.0; seed 42's uniforms are
  // 0.0839, 0.3790, 0.6800, 0.9247 → the first bound above each: ids 0, 1, 2, 3.
  Rng rng(42);
  Ids got;
  for (int i = 0; i < 4; ++i) {
    Cands c(logits_for(kProbs));
    got.push_back(c.view[draw(c.view, rng)].id);
  }
  EXPECT_EQ(got, (Ids{0, 1, 2, 3}));
}

TEST(Draw, FrequenciesMatchProbabilitiesChiSquare) {
  // 20000 draws, 3 degrees of freedom: the 0.999 quantile of chi-square(3) is 16.27.
  // The seed is fixed, so this is deterministic; a biased draw would fail by far.
  constexpr int kDraws = 20000;
  constexpr double kChi2Bound = 16.27;
  Rng rng(1234);
  std::vector<int> hits(4, 0);
  for (int i = 0; i < kDraws; ++i) {
    Cands c(logits_for(kProbs));
    ++hits[c.view[draw(c.view, rng)].id];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < 4; ++i) {
    const double expected = kDraws * kProbs[i];
    chi2 += (hits[i] - expected) * (hits[i] - expected) / expected;
  }
  EXPECT_LT(chi2, kChi2Bound) << hits[0] << " " << hits[1] << " " << hits[2] << " " << hits[3];
}

TEST(Draw, NeverPicksZeroProbability) {
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    Cands c({-INFINITY, 0.0f, -INFINITY});
    ASSERT_EQ(c.view[draw(c.view, rng)].id, 1);
  }
}

TEST(MirostatV2, TruncatesAboveMuAndUpdatesMu) {
  // tau 1 → mu 2: keep surprise -log2 p <= 2, i.e. p >= 0.25: ids 1 (0.5), 3 (0.3),
  // renormalised 0.625 / 0.375. Seed 42's u = 0.0839 picks id 1; surprise
  // -log2 0.625 = 0.678072, so mu = 2 - 0.1·(0.678072 - 1) = 2.0321928.
  Cands c(logits_for(kProbs));
  Rng rng(42);
  float mu = 2.0f;
  const size_t idx = mirostat_v2(c.view, 1.0f, 0.1f, mu, rng);
  EXPECT_EQ(c.ids(), (Ids{1, 3}));
  EXPECT_EQ(c.view[idx].id, 1);
  EXPECT_NEAR(c.view[0].p, 0.625f, kProbTol);
  EXPECT_NEAR(mu, 2.0321928f, 1e-5f);
}

TEST(MirostatV1, ZipfEstimateChoosesK) {
  // p_i ∝ 1/(i+1)^2 over 8 tokens: the estimate is s = 2 exactly, eps = 1. tau 2 → mu 4:
  // k = (1 · 2^4 / (1 - 8^-1))^(1/2) = sqrt(18.2857) = 4.276 → top 4.
  // Renormalised weights 1, 1/4, 1/9, 1/16 → p0 = 0.702439; u = 0.0839 picks id 0;
  // surprise -log2 0.702439 = 0.509533, mu = 4 - 0.1·(0.509533 - 2) = 4.1490467.
  std::vector<float> logits;
  for (int i = 0; i < 8; ++i) logits.push_back(-2.0f * std::log(static_cast<float>(i + 1)));
  Cands c(logits);
  Rng rng(42);
  float mu = 4.0f;
  const size_t idx = mirostat_v1(c.view, 2.0f, 0.1f, 100, 8, mu, rng);
  EXPECT_EQ(c.ids(), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(c.view[idx].id, 0);
  EXPECT_NEAR(c.view[0].p, 0.702439f, kProbTol);
  EXPECT_NEAR(mu, 4.1490467f, 1e-5f);
}

}  // namespace
}  // namespace minfer::sample
