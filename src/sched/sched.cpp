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
  memories_.push_back(std::make_shared<BackendMemory>(*b));
  fences_.push_back(0);
  backends_.push_back(std::move(b));
}

size_t Scheduler::index_of(BackendId id) const {
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (backends_[i]->id() == id) return i;
  }
  MINFER_CHECK(false, "backend id %d is not registered", static_cast<int>(id));
  return 0;
}

std::shared_ptr<alloc::MemoryResource> Scheduler::memory(BackendId id) const {
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (backends_[i]->id() == id) return memories_[i];
  }
  return nullptr;
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
      // Weights are resolved per split backend (each backend holds its own upload).
      if (src.op == Op::kWeight || src.backend == n.backend) continue;
      if (src.op == Op::kKvRegion) {
        return make_error(fmt::format(
            "{} reads the KV region '{}' of backend {}: a region lives on its layer's backend "
            "and is never copied per step",
            describe(g, id), src.name, src.backend));
      }
      if (k == 0 && graph::op_is_alias(n.op)) {
        // An alias shares its source's bytes: it cannot sit on another backend.
        return make_error(
            fmt::format("{} aliases node {} on backend {} (an alias must live "
                        "where its source does)",
                        describe(g, id), n.src[k], src.backend));
      }
      if (std::find(s.foreign_srcs.begin(), s.foreign_srcs.end(), n.src[k]) ==
          s.foreign_srcs.end()) {
        s.foreign_srcs.push_back(n.src[k]);
      }
    }
  }
  // The copies each split needs, packed into one buffer per split (64-byte aligned).
  uint64_t staging = 0;
  for (Split& s : plan.splits) {
    const backend::Backend* to = backend(s.backend);
    for (NodeId src : s.foreign_srcs) {
      const Node& n = g.node(src);
      const backend::Backend* from = backend(n.backend);
      if (from == nullptr) {
        return make_error(
            fmt::format("{} is read by split [{}..{}] but its backend {} is not "
                        "registered",
                        describe(g, src), s.first, s.last, n.backend));
      }
      SplitCopy c{.src = src,
                  .from = n.backend,
                  .bytes = graph::tensor_bytes(n.dtype, n.shape),
                  .offset = s.copy_bytes};
      c.via_host =
          !from->host_addressable() && !to->host_addressable() && !to->can_copy_from(*from);
      if (c.via_host) staging = std::max(staging, c.bytes);
      s.copy_bytes += (c.bytes + alloc::kTensorAlignment - 1) / alloc::kTensorAlignment *
                      alloc::kTensorAlignment;
      plan.bytes_copied_per_execute += c.bytes;
      s.copies.push_back(c);
    }
  }
  plan.staging.resize(staging);
  return plan;
}

Status Scheduler::resolve_data(const ComputeGraph& g, const alloc::Allocator& allocator,
                               const SplitPlan& plan) const {
  const alloc::AllocPlan* ap = allocator.plan(g.uid());
  MINFER_CHECK(ap != nullptr && ap->nodes.size() == g.size(),
               "resolve_data: the allocator has no plan for graph uid %llu",
               static_cast<unsigned long long>(g.uid()));
  auto weight_root = [&](NodeId id) {
    const NodeId r = ap->nodes[static_cast<size_t>(id)].root;
    return r != graph::kNoNode && g.node(r).op == Op::kWeight ? r : graph::kNoNode;
  };
  // Every node's own memory (weights aside: they resolve per split backend below).
  std::vector<std::byte*>& base = plan.node_data;
  base.resize(g.size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    base[static_cast<size_t>(id)] =
        weight_root(id) != graph::kNoNode ? nullptr : allocator.data(g, id);
  }
  for (const Split& s : plan.splits) {
    s.data.assign(base.begin(), base.end());
    for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
      const NodeId r = weight_root(id);
      if (r == graph::kNoNode) continue;
      std::byte* w = allocator.weight_data(g.node(r).name, s.backend);
      const alloc::Placement& p = ap->nodes[static_cast<size_t>(id)];
      s.data[static_cast<size_t>(id)] =
          w == nullptr ? nullptr : w + (p.kind == alloc::PlacementKind::kAlias ? p.offset : 0);
    }
    for (const SplitCopy& c : s.copies) {
      s.data[static_cast<size_t>(c.src)] = s.copy_buffer.data() + c.offset;
    }
    for (NodeId id : s.nodes) {
      const Node& n = g.node(id);
      for (int k = 0; k < n.n_src; ++k) {
        if (s.data[static_cast<size_t>(n.src[k])] != nullptr) continue;
        const Node& src = g.node(n.src[k]);
        return make_error(fmt::format(
            "{} reads weight '{}', which has no copy on backend {} (weights are uploaded once, "
            "at load, to the backends whose layers read them; never per step)",
            describe(g, id), src.name, s.backend));
      }
    }
  }
  return Ok{};
}

Status Scheduler::run_copies(const Split& s, const SplitPlan& plan) {
  backend::Backend* to = backend(s.backend);
  for (const SplitCopy& c : s.copies) {
    const size_t fi = index_of(c.from);
    backend::Backend* from = backends_[fi].get();
    // The split-boundary rule: wait for the producer's last fence, nothing else.
    MINFER_TRY_STATUS(from->wait_fence(fences_[fi]));
    std::byte* dst = s.copy_buffer.data() + c.offset;
    const std::byte* src = plan.node_data[static_cast<size_t>(c.src)];
    if (from->host_addressable()) {
      MINFER_TRY_STATUS(to->set(dst, src, c.bytes));
    } else if (to->host_addressable()) {
      MINFER_TRY_STATUS(from->get(dst, src, c.bytes));
    } else if (!c.via_host) {
      MINFER_TRY_STATUS(to->copy_from(dst, *from, src, c.bytes));
    } else {
      std::byte* stage = const_cast<std::byte*>(plan.staging.data());
      MINFER_TRY_STATUS(from->get(stage, src, c.bytes));
      MINFER_TRY_STATUS(to->set(dst, stage, c.bytes));
    }
    stats_.copies++;
    stats_.bytes_copied += c.bytes;
  }
  return Ok{};
}

Result<const SplitPlan*> Scheduler::plan(const ComputeGraph& g) {
  if (g.uid() != 0) {
    if (auto it = plans_.find(g.uid()); it != plans_.end()) {
      stats_.plans_reused++;
      return &it->second;
    }
  }
  MINFER_TRY(SplitPlan p, build_plan(g));
  for (Split& s : p.splits) {
    if (s.copy_bytes == 0) continue;
    auto buf = alloc::Buffer::allocate(*memories_[index_of(s.backend)], s.copy_bytes);
    if (!buf.ok()) {
      return buf.error().context(fmt::format("copy buffer of split [{}..{}]", s.first, s.last));
    }
    s.copy_buffer = std::move(buf).value();
  }
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
    plan_mut.data_allocator = nullptr;
    MINFER_TRY_STATUS(resolve_data(g, allocator, plan_mut));
    plan_mut.data_allocator = &allocator;
    plan_mut.data_arena_generation = arena_gen;
    stats_.data_resolves++;
  }

  for (const Split& s : p->splits) {
    const size_t bi = index_of(s.backend);
    backend::Backend* b = backends_[bi].get();
    MINFER_TRY_STATUS(run_copies(s, *p));
    const backend::NodeData data{.ptr = s.data};
    if (!profiling) {
      MINFER_TRY_STATUS(b->execute(g, s.nodes, data));
      fences_[bi] = b->record_fence();
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
    fences_[bi] = b->record_fence();
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
    out += fmt::format("  split {} [{}..{}] {} nodes, {} cross-backend inputs ({} bytes copied)\n",
                       backend_name(s.backend), s.first, s.last, s.nodes.size(),
                       s.foreign_srcs.size(), s.copy_bytes);
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
