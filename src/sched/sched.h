// Stage 11 (execution): the Scheduler — places every node on a backend by supports_op,
// splits the graph into same-backend runs and executes them over the allocator's memory.
// Invariants: placement happens once, before fusion and allocation (assign_backends);
// execute never re-routes a node: a node its assigned backend cannot run, or a node no
// registered backend supports, is an Error naming node, op and dtypes (no silent
// fallback); splits are contiguous runs in build order, cached per graph uid, so a
// reused graph plans nothing; the steady-state execute allocates nothing; every source a
// split reads from another backend is a planned copy into a buffer the plan owns (a
// weight or KV region never is); a split waits only for the fences of what it copies.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc/allocator.h"
#include "backend/backend.h"
#include "core/result.h"
#include "graph/fusion.h"
#include "graph/graph.h"

namespace minfer::sched {

// A backend's memory as the allocator sees it (alloc::MemoryResource over the Backend's
// alloc_buffer / free_buffer / set / get), so src/alloc never depends on backends.
// The backend must outlive every buffer allocated through it (a Context declares its
// scheduler before the graph cache that owns the allocator, so the cache dies first).
class BackendMemory final : public alloc::MemoryResource {
 public:
  explicit BackendMemory(backend::Backend& b) : b_(b) {}
  std::string_view name() const override { return b_.name(); }
  bool host_accessible() const override { return b_.host_addressable(); }
  Result<void*> allocate(uint64_t bytes, uint64_t alignment) override {
    return b_.alloc_buffer(bytes, alignment);
  }
  void deallocate(void* ptr, uint64_t bytes) noexcept override { b_.free_buffer(ptr, bytes); }
  Status write(void* dst, const void* src, uint64_t bytes) override {
    return b_.set(dst, src, bytes);
  }
  Status read(void* dst, const void* src, uint64_t bytes) override {
    return b_.get(dst, src, bytes);
  }

 private:
  backend::Backend& b_;
};

// One planned copy at a split boundary: a source the split reads that lives on another
// backend (an activation another split produced, or a step input the host filled) is
// copied into the split's copy buffer before the split runs. Weights and KV regions
// are never copied: they live where their layer runs (uploaded once at load).
struct SplitCopy {
  graph::NodeId src = graph::kNoNode;
  graph::BackendId from = graph::kBackendCpu;
  uint64_t bytes = 0;
  uint64_t offset = 0;    // into the split's copy buffer
  bool via_host = false;  // neither side is host memory and no peer copy: staged
};

// A maximal run of compute nodes (build order) on one backend. Leaves are not part of
// any split. `foreign_srcs` are the sources the run reads from another backend's
// memory, each copied in (`copies`, same order) before the run executes.
struct Split {
  graph::BackendId backend = graph::kBackendCpu;
  graph::NodeId first = graph::kNoNode;  // first node id of the run
  graph::NodeId last = graph::kNoNode;   // last node id of the run (inclusive)
  std::vector<graph::NodeId> nodes;      // compute nodes of the run, ascending
  std::vector<graph::NodeId> foreign_srcs;
  std::vector<SplitCopy> copies;
  uint64_t copy_bytes = 0;               // bytes of the copy buffer (aligned sum)
  alloc::Buffer copy_buffer;             // on this split's backend; owned by the plan
  mutable std::vector<std::byte*> data;  // this split's node memory table (NodeData)
};

// Split layout and op census of one graph, computed once per uid.
struct SplitPlan {
  uint64_t uid = 0;
  std::vector<Split> splits;
  std::array<int32_t, static_cast<size_t>(graph::Op::kCount)> op_census{};  // every node
  int32_t n_compute = 0;                                                    // non-leaf nodes
  uint64_t bytes_copied_per_execute = 0;  // Σ copies' bytes: what one step moves
  std::vector<std::byte> staging;         // host staging for device -> device copies
  // Node memory resolved by the first execute of this uid, reused while the allocator
  // and its arena generation are unchanged (a reused decode step does no lookups).
  // Weights are bound once before the first execute (Engine::create); KV regions never
  // move; arenas move only with a new arena_generation.
  mutable std::vector<std::byte*> node_data;
  mutable const alloc::Allocator* data_allocator = nullptr;
  mutable uint64_t data_arena_generation = 0;
};

// What the per-execute trace hook sees (MINFER_GRAPH_TRACE): the plan and whether it
// was planned by this call or reused from an earlier one.
struct ExecTrace {
  const SplitPlan* plan = nullptr;
  bool planned_now = false;
  uint64_t execute_index = 0;  // executes so far on this scheduler, from 0
};
using TraceHook = std::function<void(const ExecTrace&)>;
// Multi-line human-readable rendering: "uid 7: 3 splits, 412 nodes\n  cpu [3..411] ...".
std::string format_trace(const ExecTrace& trace, const graph::ComputeGraph& graph,
                         const std::function<std::string_view(graph::BackendId)>& backend_name);

// Per-op timing of one execute (the profile hook, MINFER_OP_TIMING-style): one span per
// compute node that does work (leaves and the aliasing reshape/view are not timed),
// in execution order. Times are steady-clock nanoseconds; the CPU backend runs a node
// to completion before the next, so a span is that node's wall time.
struct OpSpan {
  graph::NodeId node = graph::kNoNode;
  graph::Op op = graph::Op::kInput;
  int32_t layer = -1;
  uint64_t start_ns = 0;  // steady_clock, since its epoch
  uint64_t dur_ns = 0;
};
struct ExecProfile {
  const graph::ComputeGraph* graph = nullptr;  // the graph run (valid during the hook)
  uint64_t uid = 0;
  uint64_t execute_index = 0;
  bool planned_now = false;
  uint64_t start_ns = 0;  // the whole execute (planning, every split, synchronize)
  uint64_t dur_ns = 0;
  std::vector<OpSpan> ops;
};
using ProfileHook = std::function<void(const ExecProfile&)>;

struct AssignStats {
  int32_t n_kept = 0;        // compute nodes left on the builder's placement
  int32_t n_reassigned = 0;  // moved to a higher-priority-order backend that supports them
};

struct SchedStats {
  uint64_t executes = 0;
  uint64_t plans_built = 0;
  uint64_t plans_reused = 0;
  uint64_t data_resolves = 0;  // executes that resolved node memory (not a cached step)
  uint64_t copies = 0;         // split-boundary copies run
  uint64_t bytes_copied = 0;   // their bytes
};

class Scheduler {
 public:
  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Registers a backend; registration order is priority order (first = preferred).
  // A second backend with the same id is a broken invariant (MINFER_CHECK).
  void add_backend(std::unique_ptr<backend::Backend> backend);
  backend::Backend* backend(graph::BackendId id) const;  // nullptr when not registered
  // The backend's memory for the allocator (register_backend); nullptr when unknown.
  std::shared_ptr<alloc::MemoryResource> memory(graph::BackendId id) const;
  size_t n_backends() const { return backends_.size(); }
  backend::Backend* backend_at(size_t i) const { return backends_.at(i).get(); }

  // Placement (before fusion, caching and allocation): each compute node keeps the
  // builder's placement when that backend is registered and supports it, else goes to
  // the first backend in priority order that does. Error when none does — naming the
  // node, its op, its dtype and its sources' dtypes. Leaves keep their placement.
  Result<AssignStats> assign_backends(graph::ComputeGraph& graph) const;

  // For the fusion pass: whether a node's backend can run the fused op (sources F32).
  graph::FusionSupport fusion_support() const;

  // The split plan of `graph` (validated: every compute node's backend registered and
  // supporting it, else Error). Cached by uid; a graph with uid 0 is planned afresh on
  // every call (tests) and not cached.
  Result<const SplitPlan*> plan(const graph::ComputeGraph& graph);

  // Runs the graph currently mapped by `allocator` (map_graph + input fills done):
  // plan (or reuse the plan), resolve node memory, execute split by split, synchronize.
  Status execute(const graph::ComputeGraph& graph, alloc::Allocator& allocator);

  // Called once per execute, after planning and before running (nullptr: off).
  void set_trace_hook(TraceHook hook) { trace_ = std::move(hook); }
  // Called after each execute with its per-op timing (nullptr: off, no clock is read).
  // While set, each node runs as its own backend call between two clock reads.
  void set_profile_hook(ProfileHook hook) { profile_hook_ = std::move(hook); }
  bool profiling() const { return static_cast<bool>(profile_hook_); }
  // The graph `uid` left the runtime (GraphCache eviction, replacement, destruction):
  // its plan goes and every backend releases its state for it. The cache's policy is
  // the only one: the scheduler never drops a plan on its own.
  void forget(uint64_t uid);
  size_t n_plans() const { return plans_.size(); }  // cached split plans
  // The cached split plan of graph `uid` (nullptr: none) — its splits and copies.
  const SplitPlan* find_plan(uint64_t uid) const {
    auto it = plans_.find(uid);
    return it == plans_.end() ? nullptr : &it->second;
  }
  const SchedStats& stats() const { return stats_; }

 private:
  Result<SplitPlan> build_plan(const graph::ComputeGraph& graph) const;

  Status resolve_data(const graph::ComputeGraph& graph, const alloc::Allocator& allocator,
                      const SplitPlan& plan) const;
  Status run_copies(const Split& split, const SplitPlan& plan);
  size_t index_of(graph::BackendId id) const;

  std::vector<std::unique_ptr<backend::Backend>> backends_;
  std::vector<std::shared_ptr<alloc::MemoryResource>> memories_;  // parallel to backends_
  std::vector<uint64_t> fences_;  // last fence each backend recorded (parallel)
  std::unordered_map<uint64_t, SplitPlan> plans_;
  SplitPlan scratch_plan_;  // uid-0 graphs
  std::vector<DType> src_dtypes_;
  TraceHook trace_;
  ProfileHook profile_hook_;
  ExecProfile profile_;  // reused: a profiled step allocates nothing once warm
  SchedStats stats_;
};

}  // namespace minfer::sched
