// Stage 15 tests (the loop): a steady-state decode step — sample, gates, forward,
// streaming — performs no heap allocation (ARCHITECTURE §2 / CONVENTIONS 8). The
// global operator new of this test binary counts allocations while armed.
// GCC pairs the library's sized delete with our malloc-based new and warns about a
// mismatch that cannot happen: every new and delete of this binary is replaced here.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "engine/generate.h"
#include "engine_fixture.h"
#include "sealed_backend.h"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_allocs{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void* operator new(std::size_t n, std::align_val_t al) {
  if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  return operator new(n, al);
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
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
// The nothrow forms too (std::stable_sort's temporary buffer uses them): left out, they
// would come from the runtime (ASan's allocator) while their delete comes from here.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  return std::aligned_alloc(a, (n + a - 1) / a * a);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t& t) noexcept {
  return operator new(n, al, t);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace minfer::engine {
namespace {

// Runs up to n decode steps of `g` with the allocation counter armed (from 0); returns the
// steps that ran.
int armed_steps(Generator& g, int n) {
  g_allocs = 0;
  g_armed = true;
  int steps = 0;
  for (; steps < n; ++steps) {
    auto more = g.step();
    if (!more.ok() || !*more) break;
  }
  g_armed = false;
  return steps;
}

// A generator on `e` past its prefill and 3 steps (the one rebuild included), EOG biased
// away so it runs as long as asked; its text goes to `out`, reserved so that appending
// allocates nothing.
std::unique_ptr<Generator> warm_generator(Context& e, GenerateOptions o, std::string& out) {
  for (TokenId id : e.tokenizer().special().eog) o.sampler.logit_bias.push_back({id, -100.0f});
  out.reserve(1 << 16);
  auto g = Generator::create(e, o, [&out](std::string_view b) { out.append(b); });
  EXPECT_TRUE(g.ok()) << g.error().message;
  if (!g.ok()) return nullptr;
  EXPECT_TRUE((*g)->prefill(std::vector<int32_t>{5, 17, 42, 8, 91}).ok());
  for (int i = 0; i < 3; ++i) {
    auto more = (*g)->step();
    EXPECT_TRUE(more.ok() && *more);
  }
  return std::move(*g);
}

TEST(DecodeStep, SteadyStateAllocatesNothing) {
  for (int32_t threads : {1, 2}) {
    auto t = testing::make_engine(testing::TinySpec{.vocab_gguf = testing::gpt2_vocab()}, threads,
                                  128, "allocfree");
    ASSERT_TRUE(t.engine);
    GenerateOptions o{.n_predict = 48};
    o.stop = {"\x01\x02never", "zzqq"};  // exercises the stop-string tail, never matches
    std::string out;
    auto g = warm_generator(*t, o, out);
    ASSERT_TRUE(g);

    const int steps = armed_steps(*g, 32);
    EXPECT_EQ(steps, 32);
    EXPECT_EQ(g_allocs.load(), 0u) << "threads " << threads << ": " << g_allocs.load()
                                   << " allocations in " << steps << " decode steps";
    g->finish();
    // The counter does count: a rebuild (new context → new cache, new graph) allocates.
    Batch one;  // built before arming: only the engine's allocations count
    one.add(1, 0, 0, true);
    g_armed = true;
    ASSERT_TRUE(t->set_n_ctx(64).ok());
    ASSERT_TRUE(t->decode(one).ok());
    g_armed = false;
    EXPECT_GT(g_allocs.load(), 0u);
  }
}

// --numerics llamacpp over a q8_0 cache at head size 64: llama.cpp's Walsh-Hadamard
// rotation of Q, K, V and the attention output (four nodes a layer) allocates nothing.
TEST(DecodeStep, SteadyStateAllocatesNothingWithTheQuantizedKvRotation) {
  EngineOptions opts;
  opts.numerics = Numerics::kLlamaCpp;
  opts.kv_format = graph::KvFormat::kQ8_0;
  auto t = testing::make_engine(
      testing::TinySpec{
          .n_embd = 128, .n_head = 2, .n_head_kv = 1, .vocab_gguf = testing::gpt2_vocab()},
      2, 128, "allocfree-rot", opts);
  ASSERT_TRUE(t.engine);
  auto g_graph = t->runtime_graph(1, 1);
  ASSERT_TRUE(g_graph.ok()) << g_graph.error().message;
  size_t rotations = 0;
  for (const auto& n : g_graph->nodes()) rotations += n.op == graph::Op::kHadamard;
  EXPECT_EQ(rotations, 4u * 2);  // the tiny model's 2 layers
  std::string out;
  auto g = warm_generator(*t, {.n_predict = 40}, out);
  ASSERT_TRUE(g);
  const int steps = armed_steps(*g, 24);
  EXPECT_EQ(steps, 24);
  EXPECT_EQ(g_allocs.load(), 0u) << g_allocs.load() << " allocations in " << steps
                                 << " decode steps";
  g->finish();
}

// The same with layers on a backend whose memory the host cannot address: the planned
// copies, the fences, the sealed backend's own node table and the logits `get` allocate
// nothing once the graph has run.
TEST(DecodeStep, SteadyStateAllocatesNothingWithLayersOnASealedBackend) {
  for (int32_t ngl : {1, 1000}) {  // one layer; every layer and the head
    minfer::testing::ScopedSealed sealed({.n_threads = 2});
    auto t = testing::make_engine(testing::TinySpec{.vocab_gguf = testing::gpt2_vocab()}, 2, 128,
                                  "allocfree-sealed", {.devices = {"sealed"}, .n_gpu_layers = ngl});
    ASSERT_TRUE(t.engine);
    ASSERT_GT(t->placement().n_layers, 0);
    std::string out;
    auto g = warm_generator(*t, {.n_predict = 40}, out);
    ASSERT_TRUE(g);
    const uint64_t copies = t->sched_stats().copies;
    const int steps = armed_steps(*g, 24);
    EXPECT_EQ(steps, 24);
    EXPECT_GT(t->sched_stats().copies, copies);  // the split copies did run
    EXPECT_GT(sealed.counters.nodes_run, 0u);
    EXPECT_EQ(g_allocs.load(), 0u) << "ngl " << ngl << ": " << g_allocs.load() << " allocations in "
                                   << steps << " decode steps";
    g->finish();
  }
}

}  // namespace
}  // namespace minfer::engine
