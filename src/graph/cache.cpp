// Stage 8 (graph reuse): the MRU cache, uid stamping and the structural check.
// Invariant: uids come from one process-wide counter, so two caches (server slots)
// never hand out the same uid and a backend's replay cache keyed by uid stays sound.
#include "graph/cache.h"

#include <fmt/format.h>

#include <atomic>
#include <string>

namespace minfer::graph {
namespace {

std::atomic<uint64_t> g_next_uid{1};

std::string describe(const ComputeGraph& g, size_t i) {
  const Node& n = g.nodes()[i];
  return fmt::format("node {} ({} '{}')", i, op_name(n.op), n.name);
}

}  // namespace

GraphCache::GraphCache(std::unique_ptr<GraphMemory> memory) : memory_(std::move(memory)) {}

GraphCache::~GraphCache() {
  if (release_hook_) {
    for (const Entry& e : entries_) release_hook_(e.graph->uid());
  }
}

void GraphCache::release(uint64_t uid) {
  if (memory_) memory_->release_graph(uid);
  if (release_hook_) release_hook_(uid);
}

Result<bool> GraphCache::try_reuse(const GraphParams& params) {
  size_t pos = 0;
  while (pos < entries_.size() && !(entries_[pos].params == params)) ++pos;
  if (pos == entries_.size()) {
    stats_.misses++;
    return false;
  }
  if (pos != 0) {
    Entry hit = std::move(entries_[pos]);
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(pos));
    entries_.insert(entries_.begin(), std::move(hit));
  }
  if (memory_) {
    Status st = memory_->map_graph(*entries_.front().graph);
    if (!st.ok()) {
      return st.error().context(
          fmt::format("re-map onto cached graph uid {}", entries_.front().graph->uid()));
    }
  }
  stats_.reuses++;
  return true;
}

Result<const ComputeGraph*> GraphCache::replace_graph(ComputeGraph graph,
                                                      const GraphParams& params) {
  MINFER_CHECK(graph.uid() == 0, "replace_graph: graph already cached with uid %llu",
               static_cast<unsigned long long>(graph.uid()));
  MINFER_TRY_STATUS(validate(params));
  graph.uid_ = g_next_uid.fetch_add(1, std::memory_order_relaxed);
  if (memory_) {
    Status st = memory_->map_graph(graph);
    if (!st.ok()) return st.error().context(fmt::format("map graph uid {}", graph.uid()));
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].params == params) {
      release(entries_[i].graph->uid());
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  entries_.insert(entries_.begin(),
                  Entry{params, std::make_unique<ComputeGraph>(std::move(graph))});
  while (entries_.size() > kMaxCachedGraphs) {
    release(entries_.back().graph->uid());
    entries_.pop_back();
    stats_.evictions++;
  }
  stats_.rebuilds++;
  return entries_.front().graph.get();
}

Result<const ComputeGraph*> GraphCache::get_or_build(
    const GraphParams& params, const std::function<ComputeGraph(const GraphParams&)>& build) {
  MINFER_TRY(bool hit, try_reuse(params));
  if (hit) return entries_.front().graph.get();
  MINFER_TRY_STATUS(validate(params));
  return replace_graph(build(params), params);
}

const ComputeGraph& GraphCache::current() const {
  MINFER_CHECK(!entries_.empty(), "GraphCache::current() on an empty cache");
  return *entries_.front().graph;
}

const GraphParams& GraphCache::current_params() const {
  MINFER_CHECK(!entries_.empty(), "GraphCache::current_params() on an empty cache");
  return entries_.front().params;
}

std::vector<GraphParams> GraphCache::cached_params() const {
  std::vector<GraphParams> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.params);
  return out;
}

Status GraphCache::verify_structural(const ComputeGraph& a, const ComputeGraph& b) {
  if (a.size() != b.size()) {
    return make_error(fmt::format("graphs differ in size: {} vs {} nodes", a.size(), b.size()));
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const Node& x = a.nodes()[i];
    const Node& y = b.nodes()[i];
    std::string what;
    if (x.op != y.op) {
      what = fmt::format("op {} vs {}", op_name(x.op), op_name(y.op));
    } else if (x.dtype != y.dtype) {
      what = fmt::format("dtype {} vs {}", dtype_name(x.dtype), dtype_name(y.dtype));
    } else if (!(x.shape == y.shape)) {
      what = fmt::format("shape {} vs {}", x.shape.str(), y.shape.str());
    } else if (x.n_src != y.n_src || x.src != y.src) {
      what = "sources differ";
    } else if (!(x.params == y.params)) {
      what = "op params differ";
    } else if (x.name != y.name) {
      what = fmt::format("name '{}' vs '{}'", x.name, y.name);
    } else if (x.backend != y.backend) {
      what = fmt::format("backend {} vs {}", x.backend, y.backend);
    } else if (x.layer != y.layer || x.is_output != y.is_output) {
      what = "layer or output flag differs";
    }
    if (!what.empty()) return make_error(describe(a, i) + ": " + what);
  }
  if (a.inputs() != b.inputs()) return make_error("input lists differ");
  if (a.outputs() != b.outputs()) return make_error("output lists differ");
  return Ok{};
}

}  // namespace minfer::graph
