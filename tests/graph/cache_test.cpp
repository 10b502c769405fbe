// Stage 8 tests (graph reuse): reuse iff params are equal, uid discipline, the MRU
// bound, and verify_structural as the determinism net. Bars: exact counters and uids.
#include "graph/cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "toy_transformer.h"

namespace minfer::graph {
namespace {

using testing::build_toy;
using testing::toy_params;

// Records what the cache asks of its memory.
class FakeMemory final : public GraphMemory {
 public:
  Status map_graph(const ComputeGraph& g) override {
    mapped.push_back(g.uid());
    return Ok{};
  }
  void release_graph(uint64_t uid) override { released.push_back(uid); }
  std::vector<uint64_t> mapped;
  std::vector<uint64_t> released;
};

const ComputeGraph& rebuild(GraphCache& cache, const GraphParams& p) {
  auto r = cache.replace_graph(build_toy(p), p);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return **r;
}

bool reuse(GraphCache& cache, const GraphParams& p) {
  auto r = cache.try_reuse(p);
  EXPECT_TRUE(r.ok());
  return r.ok() && *r;
}

TEST(GraphCache, ReuseRequiresEqualParams_EveryIdentityFieldForcesRebuild) {
  const GraphParams base = toy_params(1);
  std::vector<std::function<void(GraphParams&)>> changes = {
      [](GraphParams& p) { p.n_tokens = 2; },
      [](GraphParams& p) { p.gtype = GraphType::kPrefill; },
      [](GraphParams& p) { p.cparams.n_ctx = 128; },
      [](GraphParams& p) { p.cparams.fusion.rms_norm_mul = false; },
      [](GraphParams& p) { p.cparams.window.n_runs = 2; },
      [](GraphParams& p) { p.cparams.attn_numerics = AttnNumerics::kGgmlF16; },
      [](GraphParams& p) { p.cparams.kv_format = KvFormat::kQ8_0; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    GraphCache cache;
    rebuild(cache, base);
    GraphParams changed = base;
    changes[i](changed);
    EXPECT_FALSE(reuse(cache, changed)) << "change " << i << " was reused";
    EXPECT_TRUE(reuse(cache, base)) << "equal params after change " << i;
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_EQ(cache.stats().reuses, 1u);
  }
  // n_out is identity too (tail rows exist only when n_out < n_tokens)
  GraphCache cache;
  GraphParams p = toy_params(4);
  rebuild(cache, p);
  p.n_out = 4;
  EXPECT_FALSE(reuse(cache, p));
}

TEST(GraphCache, UidIsFreshOnRebuildAndKeptOnReuse) {
  GraphCache cache;
  const uint64_t prefill_uid = rebuild(cache, toy_params(5)).uid();
  EXPECT_NE(prefill_uid, 0u);
  const uint64_t decode_uid = rebuild(cache, toy_params(1)).uid();
  EXPECT_GT(decode_uid, prefill_uid);  // monotonic
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(reuse(cache, toy_params(1)));
    EXPECT_EQ(cache.current().uid(), decode_uid);
  }
  ASSERT_TRUE(reuse(cache, toy_params(5)));
  EXPECT_EQ(cache.current().uid(), prefill_uid);
  // rebuilding equal params replaces the entry with a new uid
  const uint64_t again = rebuild(cache, toy_params(1)).uid();
  EXPECT_GT(again, decode_uid);
  EXPECT_EQ(cache.size(), 2u);
  // two caches never hand out the same uid
  GraphCache other;
  EXPECT_GT(rebuild(other, toy_params(1)).uid(), again);
}

TEST(GraphCache, GenerationRunRebuildsOncePerPhaseThenOnlyReuses) {
  auto memory = std::make_unique<FakeMemory>();
  FakeMemory* mem = memory.get();
  GraphCache cache(std::move(memory));
  auto build = [](const GraphParams& p) { return build_toy(p); };
  ASSERT_TRUE(cache.get_or_build(toy_params(9), build).ok());  // prefill
  for (int step = 0; step < 20; ++step) {
    ASSERT_TRUE(cache.get_or_build(toy_params(1), build).ok());  // decode
  }
  EXPECT_EQ(cache.stats().rebuilds, 2u);
  EXPECT_EQ(cache.stats().reuses, 19u);
  // memory is mapped on every step (re-map on reuse), released on nothing
  EXPECT_EQ(mem->mapped.size(), 21u);
  EXPECT_TRUE(mem->released.empty());
}

TEST(GraphCache, VerifyStructuralHoldsForEqualParamsAndFailsForDifferentOnes) {
  for (uint32_t nt : {1u, 6u}) {
    ComputeGraph a = build_toy(toy_params(nt));
    ComputeGraph b = build_toy(toy_params(nt));
    Status same = GraphCache::verify_structural(a, b);
    EXPECT_TRUE(same.ok()) << same.error().message;
  }
  Status diff = GraphCache::verify_structural(build_toy(toy_params(1)), build_toy(toy_params(2)));
  ASSERT_FALSE(diff.ok());
  GraphParams unfused = toy_params(1);
  unfused.cparams.fusion.rms_norm_mul = false;
  Status fdiff = GraphCache::verify_structural(build_toy(toy_params(1)), build_toy(unfused));
  ASSERT_FALSE(fdiff.ok());
  EXPECT_NE(fdiff.error().message.find("size"), std::string::npos) << fdiff.error().message;
  // a single changed op parameter is caught and named
  GraphParams ctx = toy_params(1);
  ctx.cparams.n_ctx = 32;
  Status cdiff = GraphCache::verify_structural(build_toy(toy_params(1)), build_toy(ctx));
  ASSERT_FALSE(cdiff.ok());
  EXPECT_NE(cdiff.error().message.find("cache_k-0"), std::string::npos) << cdiff.error().message;
}

TEST(GraphCache, NinthEntryEvictsTheLeastRecentlyUsed) {
  auto memory = std::make_unique<FakeMemory>();
  FakeMemory* mem = memory.get();
  GraphCache cache(std::move(memory));
  std::vector<uint64_t> uids;
  for (uint32_t nt = 1; nt <= 8; ++nt) uids.push_back(rebuild(cache, toy_params(nt)).uid());
  EXPECT_EQ(cache.size(), 8u);
  ASSERT_TRUE(reuse(cache, toy_params(1)));  // touch the oldest: nt=2 is now the LRU
  rebuild(cache, toy_params(9));             // ninth distinct shape
  EXPECT_EQ(cache.size(), GraphCache::kMaxCachedGraphs);
  EXPECT_EQ(cache.stats().evictions, 1u);
  ASSERT_EQ(mem->released.size(), 1u);
  EXPECT_EQ(mem->released[0], uids[1]);
  EXPECT_FALSE(reuse(cache, toy_params(2)));
  EXPECT_TRUE(reuse(cache, toy_params(1)));
  EXPECT_TRUE(reuse(cache, toy_params(3)));
  EXPECT_EQ(cache.cached_params().front(), toy_params(3));  // most recent first
}

TEST(GraphCache, FailedRemapIsAnErrorNotASilentRebuild) {
  class Failing final : public GraphMemory {
   public:
    Status map_graph(const ComputeGraph&) override {
      return ++calls > 1 ? Status(make_error("no memory")) : Status(Ok{});
    }
    void release_graph(uint64_t) override {}
    int calls = 0;
  };
  GraphCache cache(std::make_unique<Failing>());
  rebuild(cache, toy_params(1));
  auto r = cache.try_reuse(toy_params(1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no memory"), std::string::npos);
}

}  // namespace
}  // namespace minfer::graph
