// Stage 11 (execution): placement, split planning and execution over backends.
// Invariant: no silent fallback — every compute node runs on the backend recorded in
// the graph, which was checked to support it; anything else is an Error naming it.
#include "sched/sched.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/check.h"

namespace minfer::sched {
namespace {

using graph::BackendId;
using graph::ComputeGraph;
using graph::Node;
using graph::NodeId;
using graph::Op;

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Aliases share their source's bytes: no work to time.
bool timed(Op op) {
  return op != Op::kReshape && op != Op::kView;
}

std::string describe(const ComputeGraph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string srcs;
  for (int s = 0; s < n.n_src; ++s) {
    if (s) srcs += ", ";
    srcs += std::string(dtype_name(g.node(n.src[s]).dtype));
  }
  return fmt::format("node {} '{}' (op {}, dtype {}, shape {}, sources [{}])", id, n.name,
                     graph::op_name(n.op), dtype_name(n.dtype), n.shape.str(), srcs);
}

void gather_src_dtypes(const ComputeGraph& g, const Node& n, std::vector<DType>& out) {
  out.clear();
  for (int s = 0; s < n.n_src; ++s) out.push_back(g.node(n.src[s]).dtype);
}

}  // namespace

void Scheduler::add_backend(std::unique_ptr<backend::Backend> b) {
  MINFER_CHECK(b != nullptr, "Scheduler::add_backend: null backend");
  MINFER_CHECK(backend(b->id()) == nullptr,
               "Scheduler::add_backend: backend id %d registered twice", static_cast<int>(b->id()));
  // Placement validity may change: every plan goes, and its backends' state with it.
  for (const auto& [uid, plan] : plans_) {
    for (const auto& other : backends_) other->release(uid);
  }
  plans_.clear();
  backends_.push_back(std::move(b));
}

void Scheduler::forget(uint64_t uid) {
  if (plans_.erase(uid) == 0) return;
  for (const auto& b : backends_) b->release(uid);
}

backend::Backend* Scheduler::backend(BackendId id) const {
  for (const auto& b : backends_) {
    if (b->id() == id) return b.get();
  }
  return nullptr;
}

Result<AssignStats> Scheduler::assign_backends(ComputeGraph& g) const {
  AssignStats stats;
  std::vector<DType> dts;
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    if (n.is_leaf()) continue;
    gather_src_dtypes(g, n, dts);
    backend::Backend* want = backend(n.backend);
    if (want != nullptr && want->supports_op(n, dts)) {
      stats.n_kept++;
      continue;
    }
    backend::Backend* pick = nullptr;
    for (const auto& b : backends_) {
      if (b->supports_op(n, dts)) {
        pick = b.get();
        break;
      }
    }
    if (pick == nullptr) {
      return make_error(fmt::format("no registered backend supports {} ({} backends registered)",
                                    describe(g, id), backends_.size()));
    }
    g.assign_backend(id, pick->id());
    stats.n_reassigned++;
  }
  return stats;
}

graph::FusionSupport Scheduler::fusion_support() const {
  return graph::FusionSupport{.supports = [this](BackendId id, Op fused) {
    const backend::Backend* b = backend(id);
    if (b == nullptr) return false;
    Node probe;
    probe.op = fused;
    probe.n_src = 2;
    const DType dts[2] = {DType::kF32, DType::kF32};
    return b->supports_op(probe, dts);
  }};
}

Result<SplitPlan> Scheduler::build_plan(const ComputeGraph& g) const {
  SplitPlan plan;
  plan.uid = g.uid();
  std::vector<DType> dts;
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    plan.op_census[static_cast<size_t>(n.op)]++;
    if (n.is_leaf()) continue;
    plan.n_compute++;
    backend::Backend* b = backend(n.backend);
    if (b == nullptr) {
      return make_error(fmt::format("{} is placed on backend id {}, which is not registered",
                                    describe(g, id), n.backend));
    }
    gather_src_dtypes(g, n, dts);
    if (!b->supports_op(n, dts)) {
      return make_error(fmt::format("backend '{}' cannot run {} (no silent fallback)", b->name(),
                                    describe(g, id)));
    }
    if (plan.splits.empty() || plan.splits.back().backend != n.backend) {
      plan.splits.push_back(Split{.backend = n.backend, .first = id, .last = id});
    }
    Split& s = plan.splits.back();
    s.last = id;
    s.nodes.push_back(id);
    for (int k = 0; k < n.n_src; ++k) {
      const Node& src = g.node(n.src[k]);
      if (src.is_leaf() || src.backend == n.backend) continue;
      if (std::find(s.foreign_srcs.begin(), s.foreign_srcs.end(), n.src[k]) ==
          s.foreign_srcs.end()) {
        s.foreign_srcs.push_back(n.src[k]);
      }
    }
  }
  return plan;
}

Result<const SplitPlan*> Scheduler::plan(const ComputeGraph& g) {
  if (g.uid() != 0) {
    if (auto it = plans_.find(g.uid()); it != plans_.end()) {
      stats_.plans_reused++;
      return &it->second;
    }
  }
  MINFER_TRY(SplitPlan p, build_plan(g));
  stats_.plans_built++;
  if (g.uid() == 0) {
    scratch_plan_ = std::move(p);
    return &scratch_plan_;
  }
  // One runtime entry per cached graph: the plan lives until the graph cache drops the
  // graph (forget), and every backend prepares its own state for the uid now.
  for (const auto& b : backends_) {
    if (Status st = b->prepare(g); !st.ok()) {
      for (const auto& prepared : backends_) {
        if (prepared == b) break;
        prepared->release(g.uid());
      }
      return st.error().context(
          fmt::format("backend {} preparing graph uid {}", b->name(), g.uid()));
    }
  }
  auto [it, inserted] = plans_.emplace(g.uid(), std::move(p));
  return &it->second;
}

Status Scheduler::execute(const ComputeGraph& g, alloc::Allocator& allocator) {
  if (allocator.current_uid() != g.uid() || g.uid() == 0) {
    return make_error(
        fmt::format("execute: graph uid {} is not the graph the allocator has mapped (uid {})",
                    g.uid(), allocator.current_uid()));
  }
  const bool profiling = static_cast<bool>(profile_hook_);
  const uint64_t t_start = profiling ? now_ns() : 0;
  if (profiling) profile_.ops.clear();
  const uint64_t built_before = stats_.plans_built;
  MINFER_TRY(const SplitPlan* p, plan(g));
  if (trace_) {
    trace_(ExecTrace{.plan = p,
                     .planned_now = stats_.plans_built != built_before,
                     .execute_index = stats_.executes});
  }
  stats_.executes++;

  // Resolve node memory on the first execute of a uid, and again only when the
  // allocator's arenas moved; a cached decode step reuses the pointers as they are.
  const SplitPlan& plan_mut = *p;  // node_data and its key are mutable caches
  const uint64_t arena_gen = allocator.stats().arena_generation;
  if (g.uid() == 0 || plan_mut.data_allocator != &allocator ||
      plan_mut.data_arena_generation != arena_gen || plan_mut.node_data.size() != g.size()) {
    plan_mut.node_data.resize(g.size());
    for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
      plan_mut.node_data[static_cast<size_t>(id)] = allocator.data(g, id);
    }
    plan_mut.data_allocator = &allocator;
    plan_mut.data_arena_generation = arena_gen;
    stats_.data_resolves++;
  }
  const backend::NodeData data{.ptr = plan_mut.node_data};

  for (const Split& s : p->splits) {
    if (!s.foreign_srcs.empty()) {
      // Cross-backend copies arrive with the second backend; until then a split
      // reading another backend's output cannot be run correctly — say so.
      return make_error(fmt::format(
          "split [{}..{}] on backend id {} reads {} tensors from other backends; cross-backend "
          "copies are not implemented",
          s.first, s.last, s.backend, s.foreign_srcs.size()));
    }
    backend::Backend* b = backend(s.backend);
    if (!profiling) {
      MINFER_TRY_STATUS(b->execute(g, s.nodes, data));
      continue;
    }
    for (const NodeId& id : s.nodes) {
      const Node& n = g.node(id);
      const uint64_t t0 = timed(n.op) ? now_ns() : 0;
      MINFER_TRY_STATUS(b->execute(g, std::span<const NodeId>(&id, 1), data));
      if (!timed(n.op)) continue;
      MINFER_TRY_STATUS(b->synchronize());
      profile_.ops.push_back(OpSpan{
          .node = id, .op = n.op, .layer = n.layer, .start_ns = t0, .dur_ns = now_ns() - t0});
    }
  }
  for (const auto& b : backends_) MINFER_TRY_STATUS(b->synchronize());
  if (profiling) {
    profile_.graph = &g;
    profile_.uid = g.uid();
    profile_.execute_index = stats_.executes - 1;
    profile_.planned_now = stats_.plans_built != built_before;
    profile_.start_ns = t_start;
    profile_.dur_ns = now_ns() - t_start;
    profile_hook_(profile_);
  }
  return Ok{};
}

std::string format_trace(const ExecTrace& t, const ComputeGraph& g,
                         const std::function<std::string_view(BackendId)>& backend_name) {
  const SplitPlan& p = *t.plan;
  std::string out =
      fmt::format("graph uid {}: {} nodes ({} compute), {} splits{}\n", p.uid, g.size(),
                  p.n_compute, p.splits.size(), t.planned_now ? ", planned now" : ", plan reused");
  for (const Split& s : p.splits) {
    out += fmt::format("  split {} [{}..{}] {} nodes, {} cross-backend inputs\n",
                       backend_name(s.backend), s.first, s.last, s.nodes.size(),
                       s.foreign_srcs.size());
  }
  out += "  ops:";
  for (size_t i = 0; i < p.op_census.size(); ++i) {
    if (p.op_census[i] == 0) continue;
    out += fmt::format(" {}={}", graph::op_name(static_cast<Op>(i)), p.op_census[i]);
  }
  out += "\n";
  return out;
}

}  // namespace minfer::sched
