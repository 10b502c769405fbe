// Stage 14 tests: the deterministic exp/log and the RNG against independent references.
// Invariant pinned: the RNG stream for a seed is fixed forever (changing it changes
// every seeded generation), and det_exp/det_log agree with libm to ~1e-15 relative.
#include "sample/det_math.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sample/rng.h"

namespace minfer::sample {
namespace {

// det_* are a few double ulp from the correctly rounded result; libm is within 1 ulp.
constexpr double kDetMathRelTol = 1e-14;

TEST(DetMath, ExpMatchesLibmWithin1e14Relative) {
  for (double x = -700.0; x <= 700.0; x += 0.37) {
    const double want = std::exp(x);
    EXPECT_NEAR(det_exp(x), want, want * kDetMathRelTol) << "x=" << x;
  }
  EXPECT_EQ(det_exp(0.0), 1.0);
  EXPECT_EQ(det_exp(-1000.0), 0.0);
  EXPECT_EQ(det_exp(-INFINITY), 0.0);
}

TEST(DetMath, LogMatchesLibmWithin1e14) {
  for (double x = 1e-300; x < 1e300; x *= 1.7) {
    const double want = std::log(x);
    EXPECT_NEAR(det_log(x), want, std::fabs(want) * kDetMathRelTol + 1e-16) << "x=" << x;
  }
  EXPECT_EQ(det_log(1.0), 0.0);
  EXPECT_TRUE(std::isinf(det_log(0.0)) && det_log(0.0) < 0);
  EXPECT_NEAR(det_log2(8.0), 3.0, 1e-15);
  EXPECT_NEAR(det_exp2(-3.0), 0.125, 1e-16);
}

// Reference values from an independent Python transcription of splitmix64 seeding +
// xoshiro256** (prng.di.unimi.it), seed 42.
TEST(Rng, Seed42StreamIsPinned_bitwise) {
  Rng rng(42);
  EXPECT_EQ(rng.next_u64(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(rng.next_u64(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(rng.next_u64(), 0xae17533239e499a1ULL);
  EXPECT_EQ(rng.next_u64(), 0xecb8ad4703b360a1ULL);
  Rng again(42);
  EXPECT_EQ(again.uniform(), static_cast<double>(0x15780b2e0c2ec716ULL >> 11) * 0x1.0p-53);
  EXPECT_DOUBLE_EQ(again.uniform(), 0.3789802506626686);
}

TEST(Rng, ReseedRestartsTheStream) {
  Rng rng(7);
  const uint64_t first = rng.next_u64();
  rng.next_u64();
  rng.reseed(7);
  EXPECT_EQ(rng.next_u64(), first);
  Rng other(8);
  EXPECT_NE(other.next_u64(), first);
}

TEST(Rng, UniformIsInHalfOpenUnitInterval) {
  Rng rng(1);
  for (int i = 0; i < 100000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace minfer::sample
