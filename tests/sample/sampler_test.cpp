// Stage 14 tests: the whole chain — order, greedy, penalty window, determinism.
// Invariants pinned: greedy = argmax of bias/penalty-adjusted logits (lowest id on
// ties, no RNG draw); the window is the prompt tail; same seed → same tokens.
#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace minfer::sample {
namespace {

using testing::kProbTol;
using testing::logits_for;
using Ids = std::vector<TokenId>;

Sampler make(const SamplerConfig& config, int32_t n_vocab) {
  auto s = Sampler::create(config, n_vocab);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return std::move(s).value();
}

Ids survivor_ids(const Sampler& s) {
  Ids out;
  for (const Candidate& c : s.last_candidates()) out.push_back(c.id);
  return out;
}

TEST(Greedy, ArgmaxWithLowestIdOnTies) {
  Sampler s = make({.temp = 0.0f, .repeat_penalty = 1.0f}, 4);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 5.0f, 5.0f, 3.0f}).value(), 1);
  EXPECT_EQ(s.sample(std::vector<float>{7.0f, 7.0f, 7.0f, 7.0f}).value(), 0);
}

TEST(Greedy, UsesBiasAdjustedLogits) {
  // Bias lifts id 1 to a tie with id 0 (5 + 1 = 6 = 6): lowest id wins; +1.5 wins outright.
  Sampler tie = make({.temp = 0.0f, .logit_bias = {{.id = 1, .bias = 1.0f}}}, 2);
  EXPECT_EQ(tie.sample(std::vector<float>{6.0f, 5.0f}).value(), 0);
  Sampler lift = make({.temp = 0.0f, .logit_bias = {{.id = 1, .bias = 1.5f}}}, 2);
  EXPECT_EQ(lift.sample(std::vector<float>{6.0f, 5.0f}).value(), 1);
}

TEST(Greedy, UsesPenaltyAdjustedLogitsAndIgnoresTruncation) {
  // 3.0 / 1.1 = 2.727 < 2.9 once id 0 is in the window. Typical and XTC would drop the
  // argmax here if they ran; greedy comes before them.
  Sampler s = make({.temp = 0.0f,
                    .typical_p = 0.0f,
                    .repeat_penalty = 1.1f,
                    .xtc_probability = 1.0f,
                    .xtc_threshold = 0.0f},
                   2);
  const std::vector<float> logits = {3.0f, 2.9f};
  EXPECT_EQ(s.sample(logits).value(), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(logits).value(), 1);
}

// Plain greedy (no bias, neutral penalties) skips the candidate array; a zero bias on
// one id forces the full chain, which must pick the same id on every input: ties,
// -inf masks, signed zeros, and the same errors for NaN / +inf / all -inf.
TEST(Greedy, PlainFastPathPicksWhatTheFullChainPicks) {
  const int32_t n = 257;
  const SamplerConfig plain{.temp = 0.0f, .repeat_penalty = 1.0f};
  const SamplerConfig full{
      .temp = 0.0f, .repeat_penalty = 1.0f, .logit_bias = {{.id = 3, .bias = 0.0f}}};
  uint32_t state = 12345;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& l : logits) {
      const uint32_t r = rnd();
      // few distinct values so ties are common; some masked
      l = r % 7 == 0 ? -INFINITY : static_cast<float>(static_cast<int>(r % 5) - 2) * 0.5f;
      if (r % 11 == 0) l = -0.0f;
    }
    Sampler a = make(plain, n), b = make(full, n);
    EXPECT_EQ(a.sample(logits).value(), b.sample(logits).value()) << "trial " << trial;
    ASSERT_EQ(a.last_candidates().size(), 1u);
    EXPECT_EQ(a.last_candidates()[0].id, b.last_candidates()[0].id);
    EXPECT_EQ(a.last_candidates()[0].p, 1.0f);
  }
  for (const float bad : {NAN, INFINITY}) {
    std::vector<float> logits(static_cast<size_t>(n), 1.0f);
    logits[100] = bad;
    Sampler a = make(plain, n), b = make(full, n);
    auto ra = a.sample(logits), rb = b.sample(logits);
    ASSERT_FALSE(ra.ok());
    ASSERT_FALSE(rb.ok());
    EXPECT_EQ(ra.error().message, rb.error().message);
  }
  std::vector<float> masked(static_cast<size_t>(n), -INFINITY);
  Sampler a = make(plain, n), b = make(full, n);
  EXPECT_EQ(a.sample(masked).error().message, b.sample(masked).error().message);
  masked[200] = -1e30f;
  EXPECT_EQ(make(plain, n).sample(masked).value(), 200);
}

// A filter over a random allowed set; counts its calls.
struct SetFilter final : TokenFilter {
  std::vector<uint8_t> allowed;
  int calls = 0;
  int allows(TokenId id) override {
    ++calls;
    return allowed[static_cast<size_t>(id)];
  }
};

// sample_filtered must return what masking every refused token to -inf and calling
// sample() returns — the token, the surviving candidates bit for bit and the RNG draws —
// for greedy and top-k chains with penalties, over dense and sparse allowed sets, across
// a run of accepted tokens; where it declines (nullopt) the masked path is used, as the
// decode loop does, and it must have consumed nothing.
TEST(Filtered, PicksWhatMaskingThenSamplingPicks) {
  const int32_t n = 3001;
  const std::vector<SamplerConfig> configs = {
      {.temp = 0.0f, .repeat_penalty = 1.0f},
      {.temp = 0.0f, .repeat_penalty = 1.3f, .logit_bias = {{.id = 5, .bias = 2.0f}}},
      {.seed = 7, .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f},
      {.seed = 9,
       .temp = 1.0f,
       .top_k = 3,
       .top_p = 1.0f,
       .min_p = 0.0f,
       .repeat_penalty = 1.1f,
       .frequency_penalty = 0.2f},
      {.seed = 11,
       .temp = 1.2f,
       .top_k = 200,
       .top_p = 0.8f,
       .typical_p = 0.9f,
       .xtc_probability = 0.5f,
       .xtc_threshold = 0.1f},
      {.seed = 13, .temp = 0.7f, .top_k = 0},  // declines: top-k off
  };
  uint32_t state = 4242;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  int decided = 0, declined = 0;
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    for (const uint32_t density : {1u, 3u, 50u, 400u, 3000u}) {  // allowed 1 in `density`
      Sampler fast = make(configs[ci], n), ref = make(configs[ci], n);
      for (int step = 0; step < 40; ++step) {
        std::vector<float> logits(static_cast<size_t>(n));
        SetFilter f;
        f.allowed.resize(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) {
          const uint32_t r = rnd();
          logits[static_cast<size_t>(i)] =
              r % 13 == 0 ? -INFINITY : static_cast<float>(static_cast<int>(r % 41) - 20) * 0.25f;
          f.allowed[static_cast<size_t>(i)] = (rnd() % density) == 0;
        }
        f.allowed[static_cast<size_t>(rnd() % n)] = 1;
        std::vector<float> masked = logits;
        for (int32_t i = 0; i < n; ++i) {
          if (!f.allowed[static_cast<size_t>(i)]) masked[static_cast<size_t>(i)] = -INFINITY;
        }
        auto want = ref.sample(masked);
        const uint64_t draws_before = fast.rng_draws();
        auto got = fast.sample_filtered(logits, f);
        ASSERT_TRUE(got.ok()) << got.error().message;
        TokenId id = 0;
        if (got->has_value()) {
          ++decided;
          id = **got;
        } else {
          ++declined;
          EXPECT_EQ(fast.rng_draws(), draws_before) << "declining consumed a draw";
          auto again = fast.sample(masked);
          ASSERT_EQ(again.ok(), want.ok());
          if (!again.ok()) continue;
          id = *again;
        }
        if (!want.ok()) {
          ADD_FAILURE() << "the masked chain failed but the filtered one picked " << id << ": "
                        << want.error().message;
          continue;
        }
        ASSERT_EQ(id, *want) << "config " << ci << " density " << density << " step " << step;
        ASSERT_EQ(fast.rng_draws(), ref.rng_draws());
        const auto a = fast.last_candidates(), b = ref.last_candidates();
        ASSERT_EQ(a.size(), b.size());
        for (size_t k = 0; k < a.size(); ++k) {
          EXPECT_EQ(a[k].id, b[k].id);
          EXPECT_EQ(std::bit_cast<uint32_t>(a[k].logit), std::bit_cast<uint32_t>(b[k].logit));
          EXPECT_EQ(std::bit_cast<uint32_t>(a[k].p), std::bit_cast<uint32_t>(b[k].p));
        }
        fast.accept(id);
        ref.accept(id);
      }
    }
  }
  // Both paths must have been exercised (the shortcut on 485 of the 1200 steps).
  EXPECT_GT(decided, 400);
  EXPECT_GT(declined, 40);
}

TEST(Filtered, AsksAboutTheBestCandidatesOnly) {
  // Greedy with an allowed argmax: one question. Top-40 over a dense set: well under
  // the vocabulary.
  const int32_t n = 50000;
  std::vector<float> logits(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(i % 977);
  SetFilter all;
  all.allowed.assign(static_cast<size_t>(n), 1);
  Sampler greedy = make({.temp = 0.0f}, n);
  EXPECT_EQ(greedy.sample_filtered(logits, all).value().value(), 976);
  EXPECT_EQ(all.calls, 1);
  SetFilter half;
  half.allowed.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) half.allowed[static_cast<size_t>(i)] = i % 2;
  Sampler topk = make({.seed = 3, .top_k = 40}, n);
  ASSERT_TRUE(topk.sample_filtered(logits, half).value().has_value());
  EXPECT_LE(half.calls, 160);
  for (const Candidate& c : topk.last_candidates()) EXPECT_EQ(c.id % 2, 1);
  // A NaN anywhere, or a filter that cannot tell: declined, not an error.
  struct Unsure final : TokenFilter {
    int allows(TokenId) override { return -1; }
  } u;
  EXPECT_FALSE(greedy.sample_filtered(logits, u).value().has_value());
  logits[17] = NAN;
  EXPECT_FALSE(greedy.sample_filtered(logits, all).value().has_value());
}

TEST(Greedy, ConsumesNoRandomness) {
  Sampler greedy = make({.temp = 0.0f}, 4);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(greedy.sample(std::vector<float>{1, 2, 3, 4}).value(), 3);
  EXPECT_EQ(greedy.rng_draws(), 0u);
  Sampler seeded = make({}, 4);
  (void)seeded.sample(std::vector<float>{1, 2, 3, 4}).value();
  EXPECT_EQ(seeded.rng_draws(), 1u) << "one uniform per seeded token";
}

TEST(Penalties, WindowIsThePromptTail) {
  // 65-token prompt: id 0 then 64 × id 1. With the default 64-token window id 0 has
  // fallen out: id 1 is penalised 2.1 → 1.05 by repeat 2 and id 0 (2.0) wins. With a
  // 65-token window id 0 is penalised too (→ 1.0) and id 1 wins.
  std::vector<TokenId> prompt(65, 1);
  prompt[0] = 0;
  const std::vector<float> logits = {2.0f, 2.1f, 0.0f};
  Sampler tail = make({.temp = 0.0f, .repeat_penalty = 2.0f}, 3);
  tail.reset(prompt);
  EXPECT_EQ(tail.history_size(), 64u);
  EXPECT_EQ(tail.sample(logits).value(), 0);
  Sampler wide = make({.temp = 0.0f, .repeat_penalty = 2.0f, .repeat_last_n = 65}, 3);
  wide.reset(prompt);
  EXPECT_EQ(wide.sample(logits).value(), 1);
}

TEST(Penalties, ZeroWindowDisables) {
  Sampler s = make({.temp = 0.0f, .repeat_penalty = 2.0f, .repeat_last_n = 0}, 2);
  s.accept(0);
  EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f}).value(), 0);
}

TEST(Chain, OrderTopKThenTopPThenTemperature) {
  // p = {0.5, 0.3, 0.15, 0.05}. top-k 3 keeps 0.5, 0.3, 0.15; top-p renormalises over
  // those (0.526, 0.316, 0.158) and 0.7 keeps two; temperature 2 turns weights 0.5, 0.3
  // into sqrt: 0.7071, 0.5477 → 0.563508, 0.436492.
  Sampler s = make({.temp = 2.0f, .top_k = 3, .top_p = 0.7f, .repeat_penalty = 1.0f}, 4);
  (void)s.sample(logits_for({0.5, 0.3, 0.15, 0.05})).value();
  ASSERT_EQ(survivor_ids(s), (Ids{0, 1}));
  EXPECT_NEAR(s.last_candidates()[0].p, 0.563508f, kProbTol);
  EXPECT_NEAR(s.last_candidates()[1].p, 0.436492f, kProbTol);
}

TEST(Chain, MinPRunsOnTopPSurvivors) {
  // top-p 0.9 keeps 0.5, 0.3, 0.15 (mass 0.95); min-p 0.4 then needs p >= 0.2: 0.5, 0.3.
  Sampler s =
      make({.temp = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0.4f, .repeat_penalty = 1.0f}, 4);
  (void)s.sample(logits_for({0.5, 0.3, 0.15, 0.05})).value();
  ASSERT_EQ(survivor_ids(s), (Ids{0, 1}));
  EXPECT_NEAR(s.last_candidates()[0].p, 0.625f, kProbTol);
}

TEST(Chain, MirostatReplacesTheTruncationStages) {
  // With mirostat v2 on, top-k 1 must not apply: tau 1 keeps two tokens (see stages test).
  Sampler s = make(
      {.top_k = 1, .repeat_penalty = 1.0f, .mirostat = Mirostat::kV2, .mirostat_tau = 1.0f}, 4);
  EXPECT_FLOAT_EQ(s.mirostat_mu(), 2.0f);
  EXPECT_EQ(s.sample(logits_for({0.15, 0.5, 0.05, 0.3})).value(), 1);
  EXPECT_EQ(survivor_ids(s), (Ids{1, 3}));
  EXPECT_NEAR(s.mirostat_mu(), 2.0321928f, 1e-5f);
  s.reset({});
  EXPECT_FLOAT_EQ(s.mirostat_mu(), 2.0f);
}

// A fixed, irregular logit vector over a realistic vocabulary.
std::vector<float> pseudo_logits(int32_t n_vocab, uint32_t salt) {
  std::vector<float> out(static_cast<size_t>(n_vocab));
  uint32_t x = 2463534242u ^ salt;
  for (float& l : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    l = static_cast<float>(x % 20000) * 1e-3f - 10.0f;
  }
  return out;
}

Ids generate(Sampler& s, int steps) {
  Ids out;
  for (int i = 0; i < steps; ++i) {
    const TokenId t = s.sample(pseudo_logits(s.n_vocab(), static_cast<uint32_t>(i % 7))).value();
    s.accept(t);
    out.push_back(t);
  }
  return out;
}

TEST(Determinism, SameSeedSameTokens_bitwise) {
  const SamplerConfig cfg{.seed = 1234, .temp = 1.5f, .top_k = 0, .top_p = 0.99f};
  Sampler a = make(cfg, 8000);
  Sampler b = make(cfg, 8000);
  const Ids first = generate(a, 50);
  EXPECT_EQ(first, generate(b, 50));
  a.reset({});
  EXPECT_EQ(first, generate(a, 50)) << "reset() must restart the seeded stream";
  Sampler other = make(SamplerConfig{.seed = 1235, .temp = 1.5f, .top_k = 0, .top_p = 0.99f}, 8000);
  EXPECT_NE(first, generate(other, 50));
}

TEST(Determinism, DefaultChainPinnedSequence_bitwise) {
  // Pins the default chain end to end (seed 42, CLI defaults) — a regression pin taken
  // from this implementation, the hand-checked parts being the stage tests. A change
  // here changes every seeded generation: update only on purpose, and say why.
  // Re-pinned when the defaults became llama.cpp's (min-p 0.05, repeat penalty 1.0):
  // steps 5, 7 and 8 changed, the rest held.
  Sampler s = make(SamplerConfig{}, 1000);
  const Ids got = generate(s, 12);
  const Ids pinned = {661, 193, 942, 565, 832, 183, 405, 689, 736, 655, 735, 192};
  EXPECT_EQ(got, pinned);
}

TEST(Errors, NanOrPositiveInfinityLogitIsAnError) {
  Sampler s = make({}, 3);
  const auto nan = s.sample(std::vector<float>{0.0f, NAN, 1.0f});
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.error().message.find("token 1"), std::string::npos) << nan.error().message;
  EXPECT_FALSE(s.sample(std::vector<float>{0.0f, INFINITY, 1.0f}).ok());
  EXPECT_FALSE(s.sample(std::vector<float>{-INFINITY, -INFINITY, -INFINITY}).ok());
  EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, 0.0f, -INFINITY}).value(), 1);
}

}  // namespace
}  // namespace minfer::sample
