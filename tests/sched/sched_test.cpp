// Stage 11 tests (execution): placement by supports_op, no silent fallback, split
// layout, plan reuse per uid, trace hook. Bars: exact ids, counts and error texts.
#include "sched/sched.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "graph/builder.h"
#include "graph/cache.h"

namespace minfer::sched {
namespace {

using graph::ComputeGraph;
using graph::GraphBuilder;
using graph::NodeId;
using graph::Op;

// A backend that supports a fixed op set and records what it was asked to run.
class FakeBackend final : public backend::Backend {
 public:
  FakeBackend(graph::BackendId id, std::string name, std::vector<Op> ops)
      : id_(id), name_(std::move(name)), ops_(std::move(ops)) {}
  std::string_view name() const override { return name_; }
  graph::BackendId id() const override { return id_; }
  bool supports_op(const graph::Node& n, std::span<const DType> dts) const override {
    if (static_cast<int>(dts.size()) != n.n_src) return false;
    for (Op o : ops_) {
      if (o == n.op) return true;
    }
    return false;
  }
  Status execute(const ComputeGraph&, std::span<const NodeId> nodes,
                 const backend::NodeData& data) override {
    ran.insert(ran.end(), nodes.begin(), nodes.end());
    for (NodeId id : nodes) {
      if (data[id] == nullptr) return make_error("no memory for node " + std::to_string(id));
    }
    return Ok{};
  }
  std::vector<NodeId> ran;

 private:
  graph::BackendId id_;
  std::string name_;
  std::vector<Op> ops_;
};

// x → silu → scale → softmax (output)
ComputeGraph chain() {
  GraphBuilder b;
  NodeId x = b.input("x", DType::kF32, {8});  // F32 [8]
  NodeId y = b.silu(x);                       // F32 [8]
  y = b.scale(y, 2.0f);                       // F32 [8]
  y = b.softmax(y);                           // F32 [8]
  b.mark_output(y);
  return b.finish();
}

TEST(Sched, UnsupportedOpIsAnErrorNamingNodeOpAndDtype) {
  Scheduler s;
  s.add_backend(std::make_unique<FakeBackend>(0, "cpu", std::vector<Op>{Op::kSilu, Op::kScale}));
  ComputeGraph g = chain();
  auto r = s.assign_backends(g);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("node 3"), std::string::npos) << m;
  EXPECT_NE(m.find("op softmax"), std::string::npos) << m;
  EXPECT_NE(m.find("dtype f32"), std::string::npos) << m;
  // plan() checks the same at execution time: never a silent fallback.
  auto p = s.plan(g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("cannot run node 3"), std::string::npos) << p.error().message;
}

TEST(Sched, PlacementPrefersBuilderBackendElseFirstSupportingInPriorityOrder) {
  Scheduler s;
  s.add_backend(std::make_unique<FakeBackend>(1, "gpu", std::vector<Op>{Op::kSilu, Op::kSoftmax}));
  s.add_backend(std::make_unique<FakeBackend>(
      0, "cpu", std::vector<Op>{Op::kSilu, Op::kScale, Op::kSoftmax}));
  ComputeGraph g = chain();  // every node placed on cpu (0) by the builder
  auto r = s.assign_backends(g);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->n_kept, 3);
  EXPECT_EQ(r->n_reassigned, 0);
  EXPECT_EQ(g.node(1).backend, 0);

  GraphBuilder b({.backend = 7});  // an unregistered backend: first supporting wins
  NodeId x = b.input("x", DType::kF32, {8});
  NodeId y = b.scale(b.silu(x), 3.0f);
  b.mark_output(b.softmax(y));
  ComputeGraph h = b.finish();
  auto r2 = s.assign_backends(h);
  ASSERT_TRUE(r2.ok()) << r2.error().message;
  EXPECT_EQ(r2->n_reassigned, 3);
  EXPECT_EQ(h.node(1).backend, 1);  // silu → gpu (priority)
  EXPECT_EQ(h.node(2).backend, 0);  // scale → cpu (gpu lacks it)
  EXPECT_EQ(h.node(3).backend, 1);  // softmax → gpu
  // Leaves keep their placement: an input of an unregistered backend is refused by name.
  auto unregistered = s.plan(h);
  ASSERT_FALSE(unregistered.ok());
  EXPECT_NE(unregistered.error().message.find("backend 7 is not registered"), std::string::npos)
      << unregistered.error().message;
  h.assign_backend(x, 0);  // the host fills it; the gpu split gets a planned copy
  auto p = s.plan(h);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ((*p)->splits.size(), 3u);
  EXPECT_EQ((*p)->splits[0].backend, 1);
  EXPECT_EQ((*p)->splits[0].foreign_srcs, std::vector<NodeId>{0});
  ASSERT_EQ((*p)->splits[0].copies.size(), 1u);
  EXPECT_EQ((*p)->splits[0].copies[0].bytes, 8 * sizeof(float));
  EXPECT_EQ((*p)->splits[0].copies[0].from, 0);
  // Every activation crossing a split is one planned copy; this step moves 3 × 32 bytes.
  EXPECT_EQ((*p)->bytes_copied_per_execute, 3 * 8 * sizeof(float));
  EXPECT_EQ((*p)->splits[1].first, 2);
  EXPECT_EQ((*p)->splits[1].last, 2);
  EXPECT_EQ((*p)->splits[1].foreign_srcs, std::vector<NodeId>{1});
  EXPECT_EQ((*p)->splits[2].foreign_srcs, std::vector<NodeId>{2});
  EXPECT_EQ((*p)->n_compute, 3);
  EXPECT_EQ((*p)->op_census[static_cast<size_t>(Op::kInput)], 1);
}

TEST(Sched, ASplitReadingAWeightWithNoCopyOnItsBackendIsRefusedNeverUploaded) {
  // x (host input) * w on backend 1: the input is a planned copy, the weight must already
  // live on backend 1 (uploaded once at load); a copy only on the CPU is refused by name.
  // The scheduler (its backends) outlives the allocator's buffers of their memory.
  Scheduler s;
  auto alloc_owner = std::make_unique<alloc::Allocator>();
  alloc::Allocator* allocator = alloc_owner.get();
  graph::GraphCache cache(std::move(alloc_owner));
  s.add_backend(std::make_unique<FakeBackend>(0, "cpu", std::vector<Op>{}));
  auto dev_owner = std::make_unique<FakeBackend>(1, "dev", std::vector<Op>{Op::kMul});
  FakeBackend* dev = dev_owner.get();
  s.add_backend(std::move(dev_owner));
  allocator->register_backend(1, s.memory(1));
  GraphBuilder b;
  const NodeId x = b.input("x", DType::kF32, {8});
  const NodeId w = b.weight("w", DType::kF32, {8});
  b.mark_output(b.mul(x, w));
  ComputeGraph g = b.finish();
  g.assign_backend(w, 1);
  g.assign_backend(2, 1);
  std::vector<float> host_w(8, 2.0f), dev_w(8, 2.0f);
  allocator->bind_weight("w", host_w.data(), 32);  // the CPU's (mmap) copy only
  graph::GraphParams params;
  params.n_tokens = params.n_out = 1;
  params.cparams.n_ctx = 8;
  auto cached = cache.replace_graph(std::move(g), params);
  ASSERT_TRUE(cached.ok()) << cached.error().message;
  Status st = s.execute(**cached, *allocator);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("reads weight 'w', which has no copy on backend 1"),
            std::string::npos)
      << st.error().message;
  EXPECT_TRUE(dev->ran.empty());
  // Bound on backend 1 (what the engine's load-time upload does): it runs, and the one
  // thing copied per step is the input.
  allocator->bind_weight("w", dev_w.data(), 32, 1);
  ASSERT_TRUE(cache.try_reuse(params).ok());
  // The failed lookup left nothing resolved: the next execute resolves again.
  st = s.execute(**cached, *allocator);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(dev->ran, std::vector<NodeId>{2});
  EXPECT_EQ(s.stats().copies, 1u);
  EXPECT_EQ(s.stats().bytes_copied, 8 * sizeof(float));
}

TEST(Sched, ExecuteRunsEveryComputeNodeOnceAndReusesThePlanPerUid) {
  auto alloc_owner = std::make_unique<alloc::Allocator>();
  alloc::Allocator* allocator = alloc_owner.get();
  graph::GraphCache cache(std::move(alloc_owner));
  Scheduler s;
  auto fake =
      std::make_unique<FakeBackend>(0, "cpu", std::vector<Op>{Op::kSilu, Op::kScale, Op::kSoftmax});
  FakeBackend* f = fake.get();
  s.add_backend(std::move(fake));
  std::vector<std::string> traces;
  s.set_trace_hook([&](const ExecTrace& t) {
    traces.push_back(format_trace(t, cache.current(), [](graph::BackendId) { return "cpu"; }));
  });
  graph::GraphParams params;
  params.n_tokens = 1;
  params.n_out = 1;
  params.cparams.n_ctx = 8;
  auto g = cache.replace_graph(chain(), params);
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_TRUE(s.execute(**g, *allocator).ok());
  ASSERT_TRUE(s.execute(**g, *allocator).ok());
  EXPECT_EQ(f->ran, (std::vector<NodeId>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(s.stats().plans_built, 1u);
  EXPECT_EQ(s.stats().plans_reused, 1u);
  EXPECT_EQ(s.stats().data_resolves, 1u);  // the reused step looked nothing up
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_NE(traces[0].find("planned now"), std::string::npos) << traces[0];
  EXPECT_NE(traces[1].find("plan reused"), std::string::npos) << traces[1];
  EXPECT_NE(traces[0].find("silu=1"), std::string::npos) << traces[0];
  EXPECT_NE(traces[0].find("split cpu [1..3] 3 nodes"), std::string::npos) << traces[0];
}

TEST(Sched, ProfileHookTimesEachComputeNodeInOrderAndIsOffByDefault) {
  auto alloc_owner = std::make_unique<alloc::Allocator>();
  alloc::Allocator* allocator = alloc_owner.get();
  graph::GraphCache cache(std::move(alloc_owner));
  Scheduler s;
  auto fake =
      std::make_unique<FakeBackend>(0, "cpu", std::vector<Op>{Op::kSilu, Op::kScale, Op::kSoftmax});
  FakeBackend* f = fake.get();
  s.add_backend(std::move(fake));
  graph::GraphParams params;
  params.n_tokens = 1;
  params.n_out = 1;
  params.cparams.n_ctx = 8;
  auto g = cache.replace_graph(chain(), params);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_FALSE(s.profiling());
  ASSERT_TRUE(s.execute(**g, *allocator).ok());
  std::vector<ExecProfile> seen;
  s.set_profile_hook([&](const ExecProfile& p) { seen.push_back(p); });
  EXPECT_TRUE(s.profiling());
  ASSERT_TRUE(s.execute(**g, *allocator).ok());
  ASSERT_TRUE(s.execute(**g, *allocator).ok());
  s.set_profile_hook(nullptr);
  ASSERT_TRUE(s.execute(**g, *allocator).ok());
  EXPECT_EQ(f->ran, (std::vector<NodeId>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));  // same work
  ASSERT_EQ(seen.size(), 2u);  // the untimed executes called nothing
  for (size_t k = 0; k < seen.size(); ++k) {
    const ExecProfile& p = seen[k];
    EXPECT_EQ(p.uid, (*g)->uid());
    EXPECT_EQ(p.execute_index, k + 1);
    EXPECT_FALSE(p.planned_now);  // planned by the first, untimed execute
    ASSERT_EQ(p.ops.size(), 3u);  // one span per compute node, none for the input leaf
    const Op want[3] = {Op::kSilu, Op::kScale, Op::kSoftmax};
    uint64_t prev_end = p.start_ns;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(p.ops[i].node, static_cast<NodeId>(i + 1));
      EXPECT_EQ(p.ops[i].op, want[i]);
      EXPECT_GE(p.ops[i].start_ns, prev_end);  // in order, not overlapping
      prev_end = p.ops[i].start_ns + p.ops[i].dur_ns;
    }
    EXPECT_LE(prev_end, p.start_ns + p.dur_ns);  // inside the execute's span
  }
}

TEST(Sched, ExecuteRefusesAGraphTheAllocatorHasNotMapped) {
  alloc::Allocator allocator;
  Scheduler s;
  s.add_backend(std::make_unique<FakeBackend>(0, "cpu", std::vector<Op>{Op::kSilu}));
  ComputeGraph g = chain();
  auto st = s.execute(g, allocator);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("not the graph the allocator has mapped"), std::string::npos);
}

}  // namespace
}  // namespace minfer::sched
