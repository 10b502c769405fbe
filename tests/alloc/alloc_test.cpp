// Stage 9 tests (memory): liveness in build order, inputs and outputs never reused,
// persistent KV regions that survive rebuilds, no allocation on reuse, fills after
// allocation. Bars: exact offsets, bytes and pointers (memory is bitwise).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "../graph/toy_transformer.h"
#include "alloc/allocator.h"
#include "alloc/plan.h"
#include "graph/builder.h"
#include "graph/cache.h"

namespace minfer::alloc {
namespace {

using graph::ComputeGraph;
using graph::GraphBuilder;
using graph::GraphCache;
using graph::GraphParams;
using graph::KvKind;
using graph::NodeId;
using testing::build_toy;
using testing::toy_params;

bool overlap(const Placement& a, const Placement& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// x → a=silu(x) → b=silu(a) ; c=scale(x) ; d=add(b,c). With `c_first`, the same DAG
// is built with c before b.
struct Diamond {
  ComputeGraph g;
  NodeId a, b, c;
};
Diamond diamond(bool c_first) {
  GraphBuilder bld;
  Diamond d;
  NodeId x = bld.input("x", DType::kF32, {256});  // F32 [256]
  d.a = bld.silu(x);                              // F32 [256]
  if (c_first) d.c = bld.scale(x, 2.0f);          // F32 [256]
  d.b = bld.silu(d.a);                            // F32 [256]
  if (!c_first) d.c = bld.scale(x, 2.0f);         // F32 [256]
  bld.mark_output(bld.add(d.b, d.c));             // F32 [256]
  d.g = bld.finish();
  return d;
}

TEST(AllocPlan, LivenessFollowsBuildOrder_DeadBufferReusedByLaterNode) {
  // In build order a dies at b, so c (built after b) takes a's bytes. A planner that
  // walked a topological order hoisting source-ready nodes (x; a, c; b; d) would place
  // c while a is still live and this exact-offset check would fail.
  Diamond d = diamond(false);
  AllocPlan p = plan_graph(d.g, kTensorAlignment);
  EXPECT_EQ(p.nodes[d.c].offset, p.nodes[d.a].offset);
  EXPECT_EQ(p.nodes[d.a].last, d.b);  // freed after its last reader in build order
  // The same DAG built in the other order gets the other plan: build order decides.
  Diamond e = diamond(true);
  AllocPlan q = plan_graph(e.g, kTensorAlignment);
  EXPECT_NE(q.nodes[e.c].offset, q.nodes[e.a].offset);
  EXPECT_FALSE(overlap(q.nodes[e.c], q.nodes[e.a]));
}

TEST(AllocPlan, InputsLiveTheWholeStepAndAreNeverAliasedByIntermediates) {
  // The input's only reader is the first node; every later buffer still avoids it.
  GraphBuilder b;
  NodeId x = b.input("x", DType::kF32, {64});     // F32 [64]
  NodeId cur = b.silu(x);                         // F32 [64]
  for (int i = 0; i < 6; ++i) cur = b.silu(cur);  // F32 [64] each, a chain of dead buffers
  b.mark_output(cur);
  ComputeGraph g = b.finish();
  AllocPlan p = plan_graph(g, kTensorAlignment);
  EXPECT_EQ(p.nodes[x].last, static_cast<int32_t>(g.size()));
  for (size_t i = 1; i < g.size(); ++i) EXPECT_FALSE(overlap(p.nodes[i], p.nodes[x])) << i;

  ComputeGraph toy = build_toy(toy_params(7));
  AllocPlan t = plan_graph(toy, kTensorAlignment);
  for (NodeId in : toy.inputs()) {
    for (size_t i = 0; i < toy.size(); ++i) {
      if (static_cast<NodeId>(i) == in || t.nodes[i].kind != PlacementKind::kArena) continue;
      EXPECT_FALSE(overlap(t.nodes[i], t.nodes[in])) << toy.node(static_cast<NodeId>(i)).name;
    }
  }
}

TEST(AllocPlan, ToyGraphNoTwoLiveBuffersShareBytesAndBuffersAreReused) {
  ComputeGraph g = build_toy(toy_params(7));
  AllocPlan p = plan_graph(g, kTensorAlignment);
  uint64_t total = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Placement& a = p.nodes[i];
    if (a.kind != PlacementKind::kArena) continue;
    EXPECT_EQ(a.offset % kTensorAlignment, 0u);
    total += a.bytes;
    for (size_t j = i + 1; j < g.size(); ++j) {
      const Placement& b = p.nodes[j];
      if (b.kind != PlacementKind::kArena) continue;
      const bool live_together = a.first <= b.last && b.first <= a.last;
      if (live_together) {
        EXPECT_FALSE(overlap(a, b))
            << g.node(static_cast<NodeId>(i)).name << " vs " << g.node(static_cast<NodeId>(j)).name;
      }
    }
  }
  EXPECT_LT(p.arena_bytes_for(graph::kBackendCpu), total);  // reuse happened
  // outputs are never released
  EXPECT_EQ(p.nodes[g.outputs()[0]].last, static_cast<int32_t>(g.size()));
  // kv_store aliases its region; reshapes alias their matmul
  const Placement& ks = p.nodes[*g.find("Kcur-0") + 1];
  EXPECT_EQ(ks.kind, PlacementKind::kAlias);
  EXPECT_EQ(g.node(ks.root).op, graph::Op::kKvRegion);
}

struct CacheWithAlloc {
  GraphCache cache{std::make_unique<Allocator>()};
  Allocator& alloc() { return cache.memory_as<Allocator>(); }
  const ComputeGraph& build(const GraphParams& p) {
    auto hit = cache.try_reuse(p);
    EXPECT_TRUE(hit.ok());
    if (hit.ok() && *hit) return cache.current();
    auto r = cache.replace_graph(build_toy(p), p);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return cache.current();
  }
};

TEST(Allocator, PersistentRegionsSurviveRebuildsWithContentsIntact) {
  CacheWithAlloc c;
  c.build(toy_params(6));  // prefill
  Allocator& a = c.alloc();
  ASSERT_EQ(a.n_regions(), 4u);
  const RegionInfo* k0 = a.region(0, KvKind::kK);
  ASSERT_NE(k0, nullptr);
  EXPECT_EQ(k0->n_cells, 64);
  EXPECT_EQ(k0->row_bytes, 32u * 4u);  // n_embd_kv 32 floats
  std::byte* before = k0->data;
  for (int64_t cell = 0; cell < 6; ++cell) {
    auto row = a.region_cell(0, KvKind::kK, cell);
    ASSERT_TRUE(row.ok());
    std::vector<float> v(32, static_cast<float>(cell) + 0.5f);
    std::memcpy(*row, v.data(), v.size() * sizeof(float));
  }
  const uint64_t persistent = a.stats().persistent_bytes;
  c.build(toy_params(1));   // decode: rebuild
  c.build(toy_params(11));  // another prefill shape: rebuild
  EXPECT_EQ(c.cache.stats().rebuilds, 3u);
  EXPECT_EQ(a.n_regions(), 4u);
  EXPECT_EQ(a.stats().persistent_bytes, persistent);
  ASSERT_EQ(a.region(0, KvKind::kK), k0);
  EXPECT_EQ(k0->data, before);  // same address: addressed by cell, never moved
  for (int64_t cell = 0; cell < 6; ++cell) {
    const float* row = reinterpret_cast<const float*>(*a.region_cell(0, KvKind::kK, cell));
    for (int i = 0; i < 32; ++i) ASSERT_EQ(row[i], static_cast<float>(cell) + 0.5f) << cell;
  }
  // the graph's kv_store node resolves to the same region bytes
  const ComputeGraph& g = c.cache.current();
  EXPECT_EQ(a.data(g, *g.find("cache_k-0")), before);
}

TEST(Allocator, ReusingACachedGraphAllocatesNothing) {
  CacheWithAlloc c;
  c.build(toy_params(8));
  const ComputeGraph& dec = c.build(toy_params(1));
  Allocator& a = c.alloc();
  const uint64_t allocs = a.stats().buffer_allocations;
  const uint64_t plans = a.stats().plans_built;
  std::byte* logits = a.data(dec, dec.outputs()[0]);
  for (int step = 0; step < 50; ++step) {
    const ComputeGraph& g = c.build(toy_params(1));
    EXPECT_EQ(&g, &dec);
    EXPECT_EQ(a.data(g, g.outputs()[0]), logits);
  }
  c.build(toy_params(8));  // switching back to the cached prefill graph: also a re-map
  EXPECT_EQ(a.stats().buffer_allocations, allocs);
  EXPECT_EQ(a.stats().plans_built, plans);
  EXPECT_EQ(a.stats().remaps, 51u);
}

TEST(Allocator, RegionGeometryChangeIsAnErrorNotARealloc) {
  CacheWithAlloc c;
  c.build(toy_params(4, 64));
  GraphParams bigger = toy_params(4, 128);
  auto r = c.cache.replace_graph(build_toy(bigger), bigger);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("region exists"), std::string::npos) << r.error().message;
  EXPECT_EQ(c.cache.size(), 1u);  // nothing cached for the refused params
}

TEST(Allocator, FillsLandInTheMappedGraphsInputBuffers) {
  CacheWithAlloc c;
  const ComputeGraph& pre = c.build(toy_params(5));
  const uint64_t pre_uid = pre.uid();
  Allocator& a = c.alloc();
  std::vector<int32_t> ids = {3, 1, 4, 1, 5};
  ASSERT_TRUE(a.fill_input_i32(pre, graph::kInputTokenIds, ids).ok());
  const int32_t* buf = a.data_as<int32_t>(pre, *pre.find_input(graph::kInputTokenIds));
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), buf));
  EXPECT_FALSE(a.fill_input_i32(pre, graph::kInputTokenIds, std::vector<int32_t>{1}).ok());
  EXPECT_FALSE(a.fill_input_i32(pre, "no_such_input", ids).ok());
  EXPECT_FALSE(a.fill_input_f32(pre, graph::kInputTokenIds, std::vector<float>(5)).ok());
  // After mapping another graph, filling the old one is refused: it would write into
  // buffers the next execution does not read. Re-mapping it makes fills legal again.
  const ComputeGraph& dec = c.build(toy_params(1));
  EXPECT_NE(dec.uid(), pre_uid);
  EXPECT_TRUE(a.fill_input_i32(dec, graph::kInputTokenIds, std::vector<int32_t>{7}).ok());
  EXPECT_FALSE(a.fill_input_i32(pre, graph::kInputTokenIds, ids).ok());
  ASSERT_TRUE(*c.cache.try_reuse(toy_params(5)));
  EXPECT_TRUE(a.fill_input_i32(pre, graph::kInputTokenIds, ids).ok());
  ComputeGraph unmapped = build_toy(toy_params(1));  // uid 0, never mapped
  EXPECT_FALSE(a.fill_input_i32(unmapped, graph::kInputTokenIds, std::vector<int32_t>{7}).ok());
}

TEST(Allocator, BuffersAndRegionsAre64ByteAligned) {
  CacheWithAlloc c;
  const ComputeGraph& g = c.build(toy_params(7));
  Allocator& a = c.alloc();
  const AllocPlan* p = a.plan(g.uid());
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < g.size(); ++i) {
    const auto kind = p->nodes[i].kind;
    if (kind != PlacementKind::kArena && kind != PlacementKind::kPersistent) continue;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data(g, static_cast<NodeId>(i))) % 64, 0u) << i;
  }
}

TEST(Allocator, RegionCellOutsideTheContextIsAnError) {
  CacheWithAlloc c;
  c.build(toy_params(2, 16));
  Allocator& a = c.alloc();
  EXPECT_TRUE(a.region_cell(1, KvKind::kV, 15).ok());
  EXPECT_FALSE(a.region_cell(1, KvKind::kV, 16).ok());
  EXPECT_FALSE(a.region_cell(1, KvKind::kV, -1).ok());
  EXPECT_FALSE(a.region_cell(7, KvKind::kV, 0).ok());
}

TEST(Allocator, NodeOnUnregisteredBackendFailsToMap) {
  GraphCache cache(std::make_unique<Allocator>());
  ComputeGraph g = build_toy(toy_params(1));
  g.assign_backend(g.outputs()[0], 3);
  auto r = cache.replace_graph(std::move(g), toy_params(1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("backend 3"), std::string::npos) << r.error().message;
}

TEST(Allocator, WeightsResolveByNameAndSizeIsChecked) {
  Allocator a;
  std::vector<float> w(64, 1.0f);
  a.bind_weight("output_norm.weight", w.data(), w.size() * sizeof(float));
  a.bind_weight("blk.0.attn_norm.weight", w.data(), 12);  // wrong size
  GraphCache cache(std::make_unique<Allocator>());
  Allocator& mine = cache.memory_as<Allocator>();
  mine.bind_weight("output_norm.weight", w.data(), w.size() * sizeof(float));
  auto r = cache.replace_graph(build_toy(toy_params(1)), toy_params(1));
  ASSERT_TRUE(r.ok());
  const ComputeGraph& g = **r;
  EXPECT_EQ(a.current_uid(), 0u);
  EXPECT_EQ(mine.data(g, *g.find("output_norm.weight")), reinterpret_cast<std::byte*>(w.data()));
  mine.bind_weight("blk.0.attn_norm.weight", w.data(), 12);
  GraphParams p2 = toy_params(2);
  auto bad = cache.replace_graph(build_toy(p2), p2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("blk.0.attn_norm.weight"), std::string::npos);
}

// Pages of [p, p + bytes) in the resident set (mincore: what the kernel has mapped in).
size_t resident_pages(const void* p, uint64_t bytes) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t n = (bytes + page - 1) / page;
  std::vector<unsigned char> vec(n);
  EXPECT_EQ(mincore(const_cast<void*>(p), n * page, vec.data()), 0);
  return static_cast<size_t>(
      std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return (v & 1) != 0; }));
}

TEST(HostMemory, ALargeZeroedBufferIsResidentOnlyWhereWrittenAndReadsZero) {
  // A KV region sized for a long context: the OS's zero pages, committed as cells are
  // written (llama.cpp clears its whole cache buffer, so all of it is resident).
  HostMemory mem;
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  for (const uint64_t alignment : {uint64_t{64}, uint64_t{1} << 21}) {
    auto b = Buffer::allocate_zeroed(mem, kBytes, alignment);
    ASSERT_TRUE(b.ok()) << b.error().message;
    ASSERT_EQ(reinterpret_cast<uintptr_t>(b->data()) % alignment, 0u);
    EXPECT_EQ(resident_pages(b->data(), kBytes), 0u) << alignment;
    // One cell written: at most one (huge) page of it becomes resident.
    b->data()[12345] = std::byte{7};
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const size_t after = resident_pages(b->data(), kBytes);
    EXPECT_GE(after, 1u);
    EXPECT_LE(after * page, uint64_t{2} << 20) << alignment;
    for (uint64_t i = 0; i < kBytes; i += 4093) {
      ASSERT_EQ(b->data()[i], i == 12345 ? std::byte{7} : std::byte{0}) << i;
    }
  }
  // Small buffers come zeroed from the heap (memset).
  auto small = Buffer::allocate_zeroed(mem, 1000, 64);
  ASSERT_TRUE(small.ok());
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(small->data()[i], std::byte{0});
}

}  // namespace
}  // namespace minfer::alloc
