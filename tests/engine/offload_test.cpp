// Stage 11/12 seam tests: layers offloaded (-ngl) to a backend whose memory the host
// cannot address (tests/engine/sealed_backend.h) on the real SmolLM2-135M: logits are
// bitwise the CPU's at every split, a decode step moves exactly the planned activation
// bytes (never a weight), host pointers are refused by name, the placement is part of
// the reuse identity, and graphs the cache drops are released on every backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "graph/builder.h"
#include "graph/cache.h"
#include "sealed_backend.h"

namespace minfer::engine {
namespace {

using minfer::testing::ScopedSealed;
using minfer::testing::SealedBackend;
using minfer::testing::SealedCounters;

const std::string kSmol = std::string(MINFER_CACHE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Mode {
  std::string name;
  EngineOptions options;
};

std::vector<Mode> modes() {
  // default numerics with K and V in their own quantized / half formats: the regions the
  // sealed layers hold are read and written in those formats on its side of the seam
  std::vector<Mode> m = {
      {"default", {}},
      {"default-q8_0k-f16v",
       {.kv_format = graph::KvFormats(graph::KvFormat::kQ8_0, graph::KvFormat::kF16)}}};
  if (backend::cpu::detect_isa() != backend::cpu::CpuIsa::kScalar) {  // llamacpp needs AVX2
    m.push_back(
        {"llamacpp", {.kv_format = graph::KvFormat::kF16, .numerics = Numerics::kLlamaCpp}});
  }
  return m;
}

// The CPU options a context builds for `options` (engine.cpp Context::init), so the
// sealed backend's kernels are the context CPU's own.
backend::cpu::CpuBackendOptions cpu_options(const EngineOptions& o, int32_t threads) {
  backend::cpu::CpuBackendOptions c{.n_threads = threads};
  if (llamacpp_family(o.numerics)) {
    c.llamacpp_avx2_build = backend::cpu::detect_isa() != backend::cpu::CpuIsa::kAvx512;
    c.isa = backend::cpu::CpuIsa::kAvx2;
    c.llamacpp_numerics = true;
  }
  return c;
}

std::unique_ptr<Engine> open_engine(EngineOptions o, int32_t threads, int32_t ngl, bool sealed) {
  o.n_threads = threads;
  if (sealed) o.devices = {"sealed"};
  o.n_gpu_layers = ngl;
  auto e = Engine::open(kSmol, o);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  if (!e.ok()) return nullptr;
  Status st = (*e)->set_context({.n_cells = 128, .n_seq_max = 3});
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  return std::move(*e);
}

std::vector<float> copy(std::span<const float> s) {
  return {s.begin(), s.end()};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A batch of mixed sequences: sequence 0's 9-token prompt and sequence 1's 5-token one
// in one batch, then 20 steps decoding both (greedy). Every logit row, in order.
std::vector<std::vector<float>> run_mixed(Engine& e) {
  std::vector<std::vector<float>> out;
  Batch b;
  const int32_t p0[] = {1, 504, 3458, 282, 4649, 314, 253, 1345, 30};
  const int32_t p1[] = {1, 19556, 28, 1253, 30};
  for (int32_t i = 0; i < 9; ++i) b.add(p0[i], 0, i, i == 8);
  for (int32_t i = 0; i < 5; ++i) b.add(p1[i], 1, i, i == 4);
  auto r = e.decode(b);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) return out;
  int32_t pos[2] = {9, 5};
  const size_t last[2] = {8, 13};
  int32_t next[2] = {0, 0};
  for (int s = 0; s < 2; ++s) {
    out.push_back(copy(r->row(last[s])));
    const auto& v = out.back();
    next[s] = static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  }
  for (int step = 0; step < 20; ++step) {
    Batch d;
    d.add(next[0], 0, pos[0]++, true);
    d.add(next[1], 1, pos[1]++, true);
    auto s = e.decode(d);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (!s.ok()) return out;
    for (size_t k = 0; k < 2; ++k) {
      out.push_back(copy(s->row(k)));
      const auto& v = out.back();
      next[k] = static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
    }
  }
  return out;
}

#define REQUIRE_SMOL()                                                   \
  if (!std::filesystem::exists(kSmol)) {                                 \
    GTEST_SKIP() << kSmol << " not present (tools/make_test_models.sh)"; \
  }

TEST(Offload, AnyLayerSplitGivesTheCpuLogits_bitwise) {
  REQUIRE_SMOL();
  // Under ASan + UBSan (minutes per sweep) two threads and the splits 0, half and all
  // layers with the head: the ci pass runs both thread counts and every split below.
  const std::vector<int32_t> thread_counts =
      MINFER_TEST_SANITIZED ? std::vector<int32_t>{2} : std::vector<int32_t>{1, 2};
  for (const Mode& mode : modes()) {
    for (int32_t threads : thread_counts) {
      auto cpu = open_engine(mode.options, threads, 0, false);
      ASSERT_TRUE(cpu);
      const int32_t n_layer = static_cast<int32_t>(cpu->hparams().n_layer);
      const auto want = run_mixed(*cpu);
      ASSERT_EQ(want.size(), 42u);
      cpu.reset();
      ScopedSealed sealed(cpu_options(mode.options, threads));
      // 0, 1, half and all layers; n_layer + 1 also places the output head (llama.cpp).
      const std::vector<int32_t> splits =
          MINFER_TEST_SANITIZED ? std::vector<int32_t>{0, n_layer / 2, n_layer + 1}
                                : std::vector<int32_t>{0, 1, n_layer / 2, n_layer, n_layer + 1};
      for (int32_t ngl : splits) {
        const std::string what =
            mode.name + " t" + std::to_string(threads) + " ngl " + std::to_string(ngl);
        sealed.counters = {};
        auto e = open_engine(mode.options, threads, ngl, true);
        ASSERT_TRUE(e) << what;
        EXPECT_EQ(e->placement().n_layers, std::min(ngl, n_layer)) << what;
        EXPECT_EQ(e->placement().head, ngl > n_layer) << what;
        const auto got = run_mixed(*e);
        ASSERT_EQ(got.size(), want.size()) << what;
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(same_bits(got[i], want[i])) << what << ": logit row " << i;
        }
        const sched::SplitPlan* plan = e->split_plan();
        ASSERT_NE(plan, nullptr);
        if (ngl == 0) {
          EXPECT_EQ(sealed.counters.executes, 0u) << what;
          EXPECT_EQ(plan->splits.size(), 1u) << what;
        } else {
          EXPECT_GT(sealed.counters.nodes_run, 0u) << what;
          // The CPU's input layer, the sealed layers, and (head on the CPU) the head.
          EXPECT_EQ(plan->splits.size(), ngl > n_layer ? 2u : 3u) << what;
        }
        e.reset();
        EXPECT_EQ(sealed.counters.live_buffers, 0u) << what << ": every buffer freed";
      }
    }
  }
}

TEST(Offload, ADecodeStepMovesExactlyThePlannedActivationBytesNeverAWeight) {
  REQUIRE_SMOL();
  const EngineOptions o{};
  ScopedSealed sealed(cpu_options(o, 2));
  auto probe = open_engine(o, 2, 0, false);
  ASSERT_TRUE(probe);
  const model::HParams hp = probe->hparams();
  const int32_t n_layer = static_cast<int32_t>(hp.n_layer);
  probe.reset();
  for (int32_t ngl : {1, n_layer / 2, n_layer + 1}) {
    auto e = open_engine(o, 2, ngl, true);
    ASSERT_TRUE(e);
    // Weights went up once, at load.
    EXPECT_GT(sealed.counters.set_bytes, 1000000u);
    Batch b;
    for (int32_t i = 0; i < 6; ++i) b.add(10 + i, 0, i, i == 5);
    ASSERT_TRUE(e->decode(b).ok());
    Batch d1;
    d1.add(42, 0, 6, true);
    ASSERT_TRUE(e->decode(d1).ok());  // the decode graph's first run: planned here
    const uint64_t executes = e->stats().executes;
    sealed.counters.set_bytes = sealed.counters.get_bytes = 0;
    const uint64_t copied_before = e->sched_stats().bytes_copied;
    Batch d2;
    d2.add(43, 0, 7, true);
    auto r = e->decode(d2);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(e->stats().executes, executes + 1);
    const sched::SplitPlan* plan = e->split_plan();
    ASSERT_NE(plan, nullptr);
    const graph::ComputeGraph& g = e->cache()->current();
    uint64_t activations = 0, inputs = 0;
    for (const sched::Split& s : plan->splits) {
      for (const sched::SplitCopy& c : s.copies) {
        const graph::Node& n = g.node(c.src);
        EXPECT_NE(n.op, graph::Op::kWeight) << n.name;
        EXPECT_NE(n.op, graph::Op::kKvRegion) << n.name;
        (n.op == graph::Op::kInput ? inputs : activations) += c.bytes;
      }
    }
    // One residual stream [n_embd, 1] crosses each boundary: into the sealed layers, and
    // back out to the CPU head unless the head went too.
    const uint64_t row = hp.n_embd * sizeof(float);
    EXPECT_EQ(activations, ngl > n_layer ? row : 2 * row) << "ngl " << ngl;
    EXPECT_GT(inputs, 0u);  // positions, cells and windows the sealed layers read
    EXPECT_EQ(plan->bytes_copied_per_execute, activations + inputs);
    EXPECT_EQ(e->sched_stats().bytes_copied - copied_before, plan->bytes_copied_per_execute);
    // What the sealed backend saw is the plan, plus the logits when the head is there.
    const uint64_t logits = ngl > n_layer ? hp.n_vocab * sizeof(float) : 0;
    EXPECT_EQ(sealed.counters.set_bytes + sealed.counters.get_bytes,
              plan->bytes_copied_per_execute + logits)
        << "ngl " << ngl;
  }
}

TEST(Offload, ANodeHandedAHostPointerFailsNamingIt) {
  SealedCounters counters;
  auto inner = backend::cpu::CpuBackend::create({.n_threads = 1, .id = 1});
  ASSERT_TRUE(inner.ok());
  SealedBackend sealed(1, std::move(*inner), counters);
  graph::GraphBuilder b({.backend = 1});
  const graph::NodeId x = b.input("x", DType::kF32, {8});
  const graph::NodeId y = b.silu(x);
  b.name(y, "act");
  b.mark_output(y);
  const graph::ComputeGraph g = b.finish();
  std::vector<float> host_x(8, 1.0f), host_y(8);
  std::vector<std::byte*> ptr = {reinterpret_cast<std::byte*>(host_x.data()),
                                 reinterpret_cast<std::byte*>(host_y.data())};
  const graph::NodeId nodes[] = {y};
  Status st = sealed.execute(g, nodes, backend::NodeData{.ptr = ptr});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("node 1 'act'"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("not in sealed memory"), std::string::npos)
      << st.error().message;
  // Its own memory works, and only through set / get.
  auto dx = sealed.alloc_buffer(32, 64);
  auto dy = sealed.alloc_buffer(32, 64);
  ASSERT_TRUE(dx.ok() && dy.ok());
  ASSERT_TRUE(sealed.set(*dx, host_x.data(), 32).ok());
  ptr = {static_cast<std::byte*>(*dx), static_cast<std::byte*>(*dy)};
  ASSERT_TRUE(sealed.execute(g, nodes, backend::NodeData{.ptr = ptr}).ok());
  ASSERT_TRUE(sealed.get(host_y.data(), *dy, 32).ok());
  EXPECT_FLOAT_EQ(host_y[0], 1.0f / (1.0f + std::exp(-1.0f)));
  // A get that overruns the buffer (32 bytes, 64 with its alignment) is refused too.
  std::vector<std::byte> big(100);
  EXPECT_FALSE(sealed.get(big.data(), *dy, big.size()).ok());
  sealed.free_buffer(*dx, 32);
  sealed.free_buffer(*dy, 32);
  EXPECT_EQ(counters.live_buffers, 0u);
}

TEST(Offload, PlacementIsPartOfTheReuseIdentity) {
  graph::GraphParams a;
  a.n_tokens = a.n_out = 1;
  a.cparams.n_ctx = 8;
  graph::GraphParams b = a;
  b.cparams.placement = {.device = 1, .n_layers = 2};
  EXPECT_FALSE(a == b);
  graph::GraphParams c = b;
  c.cparams.placement.head = true;
  EXPECT_FALSE(b == c);
  graph::GraphCache cache;
  auto build = [](const graph::GraphParams&) {
    graph::GraphBuilder gb;
    gb.mark_output(gb.silu(gb.input("x", DType::kF32, {4})));
    return gb.finish();
  };
  auto ga = cache.get_or_build(a, build);
  ASSERT_TRUE(ga.ok());
  const uint64_t uid_a = (*ga)->uid();
  auto gb = cache.get_or_build(b, build);
  ASSERT_TRUE(gb.ok());
  EXPECT_NE((*gb)->uid(), uid_a);  // a different placement never reuses the graph
  auto again = cache.get_or_build(a, build);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->uid(), uid_a);
  EXPECT_EQ(cache.stats().rebuilds, 2u);
}

TEST(Offload, TheContextsPlacementIsInEveryGraphItBuildsAndTheCpuAloneIgnoresNgl) {
  REQUIRE_SMOL();
  const EngineOptions o{};
  ScopedSealed sealed(cpu_options(o, 1));
  auto e = open_engine(o, 1, 3, true);
  auto cpu = open_engine(o, 1, 3, false);  // -ngl with no device: everything on the CPU
  ASSERT_TRUE(e && cpu);
  EXPECT_EQ(cpu->placement(), graph::LayerPlacement{});
  EXPECT_EQ(e->placement().n_layers, 3);
  EXPECT_NE(e->placement().device, graph::kBackendCpu);
  Batch b;
  for (int32_t i = 0; i < 4; ++i) b.add(40 + i, 0, i, i == 3);
  auto r1 = e->decode(b);
  ASSERT_TRUE(r1.ok());
  const auto got = copy(r1->row(3));
  auto r2 = cpu->decode(b);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(same_bits(got, copy(r2->row(3))));
  EXPECT_EQ(e->cache()->current_params().cparams.placement, e->placement());
  EXPECT_EQ(e->params_for(1, 1).cparams.placement, e->placement());
  EXPECT_EQ(cpu->split_plan()->splits.size(), 1u);
  // Which nodes went: exactly the last 3 layers' (weights and KV regions among them).
  const graph::ComputeGraph& g = e->cache()->current();
  const int32_t n_layer = static_cast<int32_t>(e->hparams().n_layer);
  for (const graph::Node& n : g.nodes()) {
    const bool offloaded = n.layer >= n_layer - 3;
    EXPECT_EQ(n.backend == e->placement().device, offloaded) << n.name;
  }
}

TEST(Offload, EvictedGraphsAreReleasedOnEveryBackendAndRebuiltOnesPreparedAgain) {
  REQUIRE_SMOL();
  const EngineOptions o{};
  ScopedSealed sealed(cpu_options(o, 1));
  auto e = open_engine(o, 1, 4, true);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->set_n_ctx(64).ok());
  // More prompt lengths than the cache holds: each a new uid, prepared once.
  const std::vector<int32_t> lengths = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 2, 1};
  std::vector<uint64_t> uids;
  for (int32_t n : lengths) {
    e->clear_kv();
    Batch b;
    for (int32_t i = 0; i < n; ++i) b.add(20 + i, 0, i, i == n - 1);
    ASSERT_TRUE(e->decode(b).ok());
    uids.push_back(e->stats().graph_uid);
  }
  const SealedCounters& c = sealed.counters;
  EXPECT_EQ(c.prepared.size(), lengths.size());  // 2 and 1 came back: new uids
  EXPECT_EQ(std::set<uint64_t>(uids.begin(), uids.end()).size(), lengths.size());
  EXPECT_EQ(c.released.size(), e->cache_stats().evictions);
  EXPECT_GT(c.released.size(), 0u);
  EXPECT_EQ(e->scheduler_plans(), e->cache()->size());
  e.reset();
  std::vector<uint64_t> p = c.prepared, r = c.released;
  std::sort(p.begin(), p.end());
  std::sort(r.begin(), r.end());
  EXPECT_EQ(p, r);
  EXPECT_EQ(c.live_buffers, 0u);
}

TEST(Offload, SessionKvExportAndImportGoThroughGetAndSet) {
  REQUIRE_SMOL();
  const EngineOptions o{};
  auto cpu = open_engine(o, 1, 0, false);
  ASSERT_TRUE(cpu);
  ASSERT_TRUE(cpu->set_n_ctx(64).ok());
  const int32_t n_layer = static_cast<int32_t>(cpu->hparams().n_layer);
  ScopedSealed sealed(cpu_options(o, 1));
  auto dev = open_engine(o, 1, n_layer / 2, true);
  ASSERT_TRUE(dev);
  ASSERT_TRUE(dev->set_n_ctx(64).ok());
  Batch b;
  for (int32_t i = 0; i < 7; ++i) b.add(30 + i, 0, i, i == 6);
  ASSERT_TRUE(cpu->decode(b).ok());
  ASSERT_TRUE(dev->decode(b).ok());
  auto want = cpu->kv_export(7);
  const uint64_t got_before = sealed.counters.get_bytes;
  auto got = dev->kv_export(7);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*want, *got);  // the sealed layers' rows came back through get
  EXPECT_GT(sealed.counters.get_bytes, got_before);
  // Import into a fresh offloaded context, then one decode step: the CPU's logits.
  auto dev2 = open_engine(o, 1, n_layer / 2, true);
  ASSERT_TRUE(dev2);
  ASSERT_TRUE(dev2->set_n_ctx(64).ok());
  const uint64_t set_before = sealed.counters.set_bytes;
  ASSERT_TRUE(dev2->kv_import(7, *want).ok());
  EXPECT_GT(sealed.counters.set_bytes, set_before);
  Batch d;
  d.add(99, 0, 7, true);
  auto a = cpu->decode(d);
  ASSERT_TRUE(a.ok());
  const auto ra = copy(a->row(0));
  auto c = dev2->decode(d);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(same_bits(copy(c->row(0)), ra));
}

}  // namespace
}  // namespace minfer::engine
