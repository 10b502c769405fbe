// Stage 17 (HTTP): the engine view's data — DOT of the runtime graph, its Graphviz
// layout, and the live panel's state and event JSON.
#include "server/viz.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "server/api.h"

#ifdef MINFER_HAVE_GRAPHVIZ
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#endif

// Graphviz 2.43 and the fontconfig / pango it sizes labels with (pango initializes
// fontconfig on a thread of its own) keep caches that gvFreeContext does not release;
// LeakSanitizer would report them at exit. The layout runs once per process (cached),
// so what they keep is bounded: stacks through those libraries are left out of the
// leak check (a sanitizer build's default suppressions), nothing else.
#if defined(__SANITIZE_ADDRESS__)
#define MINFER_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MINFER_LSAN 1
#endif
#endif
#if defined(MINFER_LSAN) && defined(MINFER_HAVE_GRAPHVIZ)
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libgvc.so\nleak:libcgraph.so\nleak:libgvplugin_\nleak:libfontconfig.so\n"
         "leak:libpango\n";
}
#endif

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;
using graph::Op;

std::string dot_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

const char* fill_of(const graph::Node& n) {
  if (n.op == Op::kInput) return "#cfe8ff";
  if (n.op == Op::kKvRegion || n.op == Op::kKvStore) return "#ffe0b0";
  if (n.op == Op::kMulMat) return "#e6dcff";
  if (n.op == Op::kAttention) return "#ffd6d6";
  if (n.is_output) return "#c8f0c8";
  if (fused_ops(n.op)[0] != '\0') return "#fff3b0";
  return "#ffffff";
}

}  // namespace

const char* fused_ops(Op op) {
  switch (op) {
    case Op::kRmsNormMul:
      return "rms_norm · mul";
    case Op::kSwiglu:
      return "silu · mul";
    case Op::kAttention:
      return "QKᵀ · scale · mask · softmax · V";
    default:
      return "";
  }
}

std::string viz_dot(const graph::ComputeGraph& g, const std::string& title) {
  std::string out = fmt::format(
      "digraph minfer {{\n  graph [rankdir=TB, fontname=\"monospace\", fontsize=11, "
      "label=\"{}\", labelloc=t, nodesep=0.15, ranksep=0.25];\n"
      "  node [shape=box, style=\"rounded,filled\", fontname=\"monospace\", fontsize=9, "
      "margin=\"0.06,0.03\", height=0.3];\n  edge [arrowsize=0.5, color=\"#888888\"];\n",
      dot_escape(title));
  // Leaves read inside a layer (weights, KV regions, the per-step inputs every layer
  // reads) are written into their consumers' labels: as boxes they would sit at the top
  // rank with an edge into every layer, and each layer's cluster would span from there.
  std::vector<bool> folded(g.size(), false);
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (n.op == Op::kWeight || n.op == Op::kKvRegion) folded[i] = true;
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    for (int s = 0; s < n.n_src; ++s) {
      const graph::Node& src = g.node(n.src[s]);
      if (src.op == Op::kInput && n.layer >= 0) folded[static_cast<size_t>(n.src[s])] = true;
    }
  }
  std::map<int32_t, std::vector<graph::NodeId>> by_layer;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!folded[i]) by_layer[g.nodes()[i].layer].push_back(static_cast<graph::NodeId>(i));
  }
  auto label = [&](graph::NodeId id) {
    const graph::Node& n = g.node(id);
    std::string l = fmt::format("{} {}\n{} {} · {}", graph::op_name(n.op), n.name, n.shape.str(),
                                dtype_name(n.dtype), n.backend == graph::kBackendCpu ? "cpu" : "?");
    if (const char* f = fused_ops(n.op); f[0] != '\0') l += fmt::format("\nfused: {}", f);
    for (int s = 0; s < n.n_src; ++s) {
      if (!folded[static_cast<size_t>(n.src[s])]) continue;
      const graph::Node& src = g.node(n.src[s]);
      l += fmt::format("\n{}: {} {}", src.op == Op::kWeight ? "w" : graph::op_name(src.op),
                       src.name, dtype_name(src.dtype));
    }
    return l;
  };
  for (const auto& [layer, ids] : by_layer) {
    const bool cluster = layer >= 0;
    if (cluster) {
      out += fmt::format(
          "  subgraph cluster_layer_{} {{\n    label=\"layer {}\"; style=\"rounded,dashed\"; "
          "color=\"#aaaaaa\";\n",
          layer, layer);
    }
    for (graph::NodeId id : ids) {
      const graph::Node& n = g.node(id);
      out += fmt::format("{}  n{} [label=\"{}\", fillcolor=\"{}\", tooltip=\"node {}\"];\n",
                         cluster ? "  " : "", id, dot_escape(label(id)), fill_of(n), id);
    }
    if (cluster) out += "  }\n";
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (folded[i]) continue;
    for (int s = 0; s < n.n_src; ++s) {
      if (folded[static_cast<size_t>(n.src[s])]) continue;
      out += fmt::format("  n{} -> n{};\n", n.src[s], i);
    }
  }
  out += "}\n";
  return out;
}

Result<std::string> layout_svg(const std::string& dot) {
#ifdef MINFER_HAVE_GRAPHVIZ
  GVC_t* gvc = gvContext();
  if (gvc == nullptr) return make_error("graphviz: cannot create a context");
  Agraph_t* g = agmemread(dot.c_str());
  if (g == nullptr) {
    gvFreeContext(gvc);
    return make_error("graphviz: cannot parse the graph's DOT");
  }
  std::string svg;
  std::string err;
  if (gvLayout(gvc, g, "dot") != 0) {
    err = "graphviz: the dot layout failed (is the layout plugin installed? `dot -c`)";
  } else {
    char* buf = nullptr;
    unsigned int len = 0;
    if (gvRenderData(gvc, g, "svg", &buf, &len) != 0 || buf == nullptr) {
      err = "graphviz: cannot render SVG";
    } else {
      svg.assign(buf, len);
    }
    if (buf != nullptr) gvFreeRenderData(buf);
    gvFreeLayout(gvc, g);
  }
  agclose(g);
  gvFreeContext(gvc);
  if (!err.empty()) return make_error(err);
  return svg;
#else
  (void)dot;
  return make_error("this build has no Graphviz (libgraphviz-dev); /viz/graph.json has the graph");
#endif
}

VizState::VizState(std::string model_name)
    : t0_(Clock::now()), model_name_(std::move(model_name)) {}

void VizState::set_graph(const graph::ComputeGraph& g) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::string& model_name = model_name_;
  n_nodes_ = g.size();
  dot_ = viz_dot(g, fmt::format("{} — decode step graph ({} nodes)", model_name, g.size()));
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int d = 0; d < n.shape.n_dims; ++d) shape.push_back(n.shape.ne[d]);
    nlohmann::ordered_json src = nlohmann::ordered_json::array();
    for (int s = 0; s < n.n_src; ++s) src.push_back(n.src[s]);
    nodes.push_back({{"id", i},
                     {"op", std::string(graph::op_name(n.op))},
                     {"name", n.name},
                     {"dtype", std::string(dtype_name(n.dtype))},
                     {"shape", shape},
                     {"src", src},
                     {"backend", n.backend == graph::kBackendCpu ? "cpu" : "other"},
                     {"layer", n.layer},
                     {"fused", fused_ops(n.op)}});
  }
  graph_json_ = dump(nlohmann::ordered_json{{"model", model_name}, {"nodes", std::move(nodes)}});
}

Result<std::string> VizState::svg() {
  std::lock_guard<std::mutex> lk(svg_mu_);  // one layout at a time; Graphviz is not reentrant
  if (!svg_done_) {
    std::string dot;
    {
      std::lock_guard<std::mutex> g(mu_);
      dot = dot_;
    }
    svg_ = dot.empty() ? Result<std::string>(make_error("no graph was recorded")) : layout_svg(dot);
    svg_done_ = true;
  }
  return svg_;
}

std::string VizState::graph_json() const {
  std::lock_guard<std::mutex> lk(mu_);
  return graph_json_;
}

uint64_t VizState::steps() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_steps_;
}

void VizState::record_step(uint32_t n_prefill, uint32_t n_decode, uint64_t forward_ns,
                           uint64_t graph_uid, bool rebuilt, uint64_t rebuilds, uint64_t reuses) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    StepRecord r{.index = n_steps_++,
                 .t_s = std::chrono::duration<double>(Clock::now() - t0_).count(),
                 .n_prefill = n_prefill,
                 .n_decode = n_decode,
                 .ms = static_cast<double>(forward_ns) * 1e-6,
                 .graph_uid = graph_uid,
                 .rebuilt = rebuilt};
    steps_.push_back(r);
    if (steps_.size() > 256) steps_.pop_front();
    rebuilds_ = rebuilds;
    reuses_ = reuses;
    graph_uid_ = graph_uid;
  }
  cv_.notify_all();
}

void VizState::record_ops(const sched::ExecProfile& p) {
  std::array<OpSum, static_cast<size_t>(Op::kCount)> sums{};
  for (const sched::OpSpan& s : p.ops) {
    OpSum& o = sums[static_cast<size_t>(s.op)];
    o.op = s.op;
    o.ns += s.dur_ns;
    o.n++;
  }
  std::lock_guard<std::mutex> lk(mu_);
  last_ops_.clear();
  for (const OpSum& o : sums) {
    if (o.n > 0) last_ops_.push_back(o);
  }
  std::sort(last_ops_.begin(), last_ops_.end(),
            [](const OpSum& a, const OpSum& b) { return a.ns > b.ns; });
  last_top_.assign(p.ops.begin(), p.ops.end());
  const size_t k = std::min<size_t>(last_top_.size(), 12);
  std::partial_sort(
      last_top_.begin(), last_top_.begin() + static_cast<std::ptrdiff_t>(k), last_top_.end(),
      [](const sched::OpSpan& a, const sched::OpSpan& b) { return a.dur_ns > b.dur_ns; });
  last_top_.resize(k);
  last_ops_uid_ = p.uid;
  last_ops_ns_ = p.dur_ns;
  last_ops_step_ = n_steps_;  // record_step of this step comes next: its index
  profiled_steps_++;
}

void VizState::record_kv(std::vector<SeqKv> seqs, uint32_t total, uint32_t used, uint32_t shared) {
  std::lock_guard<std::mutex> lk(mu_);
  seqs_ = std::move(seqs);
  kv_total_ = total;
  kv_used_ = used;
  kv_shared_ = shared;
}

std::string VizState::snapshot(const Metrics& m, uint32_t n_slots, uint64_t* seen, int wait_ms) {
  using J = nlohmann::ordered_json;
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(wait_ms), [&] { return n_steps_ > *seen; });
  auto ld = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  const double prefill_s = static_cast<double>(ld(m.prefill_ns)) * 1e-9;
  const double decode_s = static_cast<double>(ld(m.decode_ns)) * 1e-9;
  J j;
  j["t"] = std::chrono::duration<double>(Clock::now() - t0_).count();
  j["model"] = model_name_;
  j["requests"] = {{"queue_depth", ld(m.queue_depth)},
                   {"running", ld(m.running)},
                   {"slots", n_slots},
                   {"total", ld(m.requests_total)},
                   {"completed", ld(m.requests_completed)},
                   {"cancelled", ld(m.requests_cancelled)},
                   {"failed", ld(m.requests_failed)}};
  j["tokens"] = {
      {"prompt", ld(m.prompt_tokens)},
      {"completion", ld(m.completion_tokens)},
      {"prefill", ld(m.prefill_tokens)},
      {"prefix_reused", ld(m.prefix_reused_tokens)},
      {"decode", ld(m.decode_tokens)},
      {"prefill_per_s", prefill_s > 0 ? static_cast<double>(ld(m.prefill_tokens)) / prefill_s : 0},
      {"decode_per_s", decode_s > 0 ? static_cast<double>(ld(m.decode_tokens)) / decode_s : 0}};
  j["graph"] = {{"uid", graph_uid_},
                {"rebuilds", rebuilds_},
                {"reuses", reuses_},
                {"steps", n_steps_},
                {"nodes", n_nodes_}};
  J steps = J::array();
  const uint64_t from = std::max(*seen, n_steps_ > 64 ? n_steps_ - 64 : 0);
  for (const StepRecord& r : steps_) {
    if (r.index < from) continue;
    steps.push_back({{"i", r.index},
                     {"t", r.t_s},
                     {"prefill", r.n_prefill},
                     {"decode", r.n_decode},
                     {"ms", r.ms},
                     {"uid", r.graph_uid},
                     {"rebuilt", r.rebuilt}});
  }
  *seen = n_steps_;
  j["steps"] = std::move(steps);
  J seqs = J::array();
  for (const SeqKv& s : seqs_) {
    seqs.push_back({{"seq", s.seq},
                    {"state", s.state},
                    {"cells", s.cells},
                    {"shared", s.shared},
                    {"n_past", s.n_past},
                    {"generated", s.generated}});
  }
  j["kv"] = {{"total", kv_total_},
             {"used", kv_used_},
             {"free", kv_total_ - std::min(kv_used_, kv_total_)},
             {"shared", kv_shared_},
             {"seqs", std::move(seqs)}};
  J ops = J::array();
  for (const OpSum& o : last_ops_) {
    ops.push_back({{"op", std::string(graph::op_name(o.op))},
                   {"us", static_cast<double>(o.ns) * 1e-3},
                   {"n", o.n}});
  }
  J top = J::array();
  for (const sched::OpSpan& s : last_top_) {
    top.push_back({{"node", s.node},
                   {"op", std::string(graph::op_name(s.op))},
                   {"layer", s.layer},
                   {"us", static_cast<double>(s.dur_ns) * 1e-3}});
  }
  j["ops"] = {{"step", last_ops_step_},
              {"uid", last_ops_uid_},
              {"us", static_cast<double>(last_ops_ns_) * 1e-3},
              {"profiled_steps", profiled_steps_},
              {"by_op", std::move(ops)},
              {"slowest", std::move(top)}};
  j["clients"] = clients_.load();
  return dump(j);
}

}  // namespace minfer::server
