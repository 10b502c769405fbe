// Stage 14 tests: DRY on llama.cpp's documented example window.
// Invariant pinned: penalty = multiplier · base^(L - allowed_length) for the token that
// would extend a repeat of length L; breakers cap L and are never penalised themselves.
#include "sample/dry.h"

#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace minfer::sample {
namespace {

using testing::Cands;

// a b c c b c y a b c with a=1 b=2 c=3 y=4 (llama-sampling.cpp's DRY comment). Emitting
// c would repeat "a b c" (L=3), y would repeat "b c" (L=2), b would repeat "c" (L=1).
const std::vector<TokenId> kWindow = {1, 2, 3, 3, 2, 3, 4, 1, 2, 3};

std::vector<float> run_dry(const std::vector<std::vector<TokenId>>& breakers) {
  Cands c(std::vector<float>(6, 0.0f));
  std::vector<int32_t> repeat(kWindow.size());
  std::vector<int32_t> max_len(6, 0);
  std::vector<TokenId> touched(kWindow.size());
  apply_dry(c.view, kWindow,
            DryParams{.multiplier = 0.8f, .base = 1.75f, .allowed_length = 2, .breakers = breakers},
            repeat, max_len, touched);
  EXPECT_EQ(max_len, std::vector<int32_t>(6, 0)) << "scratch must be left zeroed";
  return c.logits();
}

TEST(Dry, PenalisesTokensThatExtendRepeats) {
  // c: L=3 → 0.8·1.75^1 = 1.4; y: L=2 → 0.8·1.75^0 = 0.8; b: L=1 < 2 → none.
  const std::vector<float> got = run_dry({});
  EXPECT_FLOAT_EQ(got[3], -1.4f);
  EXPECT_FLOAT_EQ(got[4], -0.8f);
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[5], 0.0f);
}

TEST(Dry, SingleTokenBreakerIsNotPenalisedAndCapsLength) {
  // Breaker y: 3 tokens follow the newest y, so L for c stays 3; y itself is exempt.
  const std::vector<float> got = run_dry({{4}});
  EXPECT_FLOAT_EQ(got[3], -1.4f);
  EXPECT_EQ(got[4], 0.0f);
}

TEST(Dry, BreakerAtTheEndDisablesDry) {
  // "b c" ends the window: no token may extend a repeat across it.
  const std::vector<float> got = run_dry({{2, 3}});
  EXPECT_EQ(got, std::vector<float>(6, 0.0f));
}

TEST(Dry, ShortWindowIsANoOp) {
  Cands c(std::vector<float>(3, 0.0f));
  const std::vector<TokenId> window = {1, 1};
  std::vector<int32_t> repeat(2);
  std::vector<int32_t> max_len(3, 0);
  std::vector<TokenId> touched(2);
  apply_dry(c.view, window, DryParams{.multiplier = 1.0f, .allowed_length = 2}, repeat, max_len,
            touched);
  EXPECT_EQ(c.logits(), std::vector<float>(3, 0.0f));
}

}  // namespace
}  // namespace minfer::sample
