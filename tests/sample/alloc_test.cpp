// Stage 14 tests: sample() and accept() do not touch the heap in steady state.
// Invariant pinned: all scratch is sized to n_vocab at creation (CONVENTIONS 8: the
// decode loop does not allocate) — counted by replacing global operator new.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "sample/sampler.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  return operator new(size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

namespace minfer::sample {
namespace {

constexpr int32_t kVocab = 32000;

std::vector<float> make_logits(uint32_t salt) {
  std::vector<float> out(kVocab);
  uint32_t x = 2463534242u ^ salt;
  for (float& l : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    l = static_cast<float>(x % 20000) * 1e-3f - 10.0f;
  }
  return out;
}

void expect_no_allocation(const SamplerConfig& config, const char* what) {
  auto created = Sampler::create(config, kVocab);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Sampler s = std::move(created).value();
  std::vector<TokenId> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>((i * 37) % 50);
  s.reset(prompt);
  std::vector<std::vector<float>> logits;
  for (uint32_t i = 0; i < 4; ++i) logits.push_back(make_logits(i));
  for (int i = 0; i < 5; ++i) s.accept(s.sample(logits[i % 4]).value());  // warm-up

  const long before = g_allocations.load();
  for (int i = 0; i < 100; ++i) {
    auto t = s.sample(logits[i % 4]);
    if (!t.ok()) break;
    s.accept(*t);
  }
  const long after = g_allocations.load();
  EXPECT_EQ(after - before, 0) << what;
}

TEST(NoAllocation, CountingOperatorNewWorks) {
  const long before = g_allocations.load();
  auto* v = new std::vector<int>(10);
  delete v;
  EXPECT_GE(g_allocations.load() - before, 2);
}

TEST(NoAllocation, DefaultChainOver100Tokens) {
  expect_no_allocation({}, "default");
}

TEST(NoAllocation, EveryStageOnOver100Tokens) {
  expect_no_allocation({.temp = 0.9f,
                        .top_k = 0,
                        .top_p = 0.9f,
                        .min_p = 0.01f,
                        .typical_p = 0.95f,
                        .frequency_penalty = 0.1f,
                        .presence_penalty = 0.1f,
                        .xtc_probability = 0.5f,
                        .xtc_threshold = 0.1f,
                        .dry_multiplier = 0.8f,
                        .dry_sequence_breakers = {{3}, {4, 5}},
                        .logit_bias = {{.id = 7, .bias = 2.0f}}},
                       "all stages");
}

TEST(NoAllocation, GreedyAndMirostat) {
  expect_no_allocation({.temp = 0.0f}, "greedy");
  expect_no_allocation({.mirostat = Mirostat::kV1}, "mirostat v1");
  expect_no_allocation({.mirostat = Mirostat::kV2}, "mirostat v2");
}

}  // namespace
}  // namespace minfer::sample
