// Stage 7 (graph IR): DOT / JSON writers (nlohmann::json handles escaping for us).
// Invariant: every node and every edge of the graph appears exactly once.
#include "graph/export.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace minfer::graph {
namespace {

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

nlohmann::json params_json(const Node& n) {
  nlohmann::json p = nlohmann::json::object();
  const OpParams& q = n.params;
  switch (n.op) {
    case Op::kRmsNorm:
    case Op::kRmsNormMul:
    case Op::kNorm:
      p["eps"] = q.eps;
      break;
    case Op::kScale:
    case Op::kSoftmax:
      p["scale"] = q.scale;
      break;
    case Op::kRope:
      p["mode"] = q.rope_mode == RopeMode::kNeox ? "neox" : "normal";
      p["n_rot"] = q.n_rot;
      p["freq_base"] = q.freq_base;
      p["freq_scale"] = q.freq_scale;
      break;
    case Op::kKvRegion:
    case Op::kKvStore:
      p["layer"] = q.layer;
      p["kind"] = q.kv_kind == KvKind::kK ? "k" : "v";
      break;
    case Op::kAttention:
      p["layer"] = q.layer;
      p["n_head"] = q.n_head;
      p["n_head_kv"] = q.n_head_kv;
      p["scale"] = q.scale;
      p["causal"] = q.causal != 0;
      p["numerics"] = q.ggml_f16 != 0 ? "ggml-f16" : "f32";
      break;
    case Op::kView:
      p["offset"] = q.offset;
      break;
    case Op::kHadamard:
      p["n"] = q.n_rot;
      break;
    case Op::kGeglu:
    case Op::kGelu:
      p["table"] = q.ggml_f16 != 0 ? "llamacpp-fma" : "plain";
      break;
    default:
      break;
  }
  return p;
}

}  // namespace

std::string to_dot(const ComputeGraph& g) {
  std::string out = fmt::format("digraph minfer_graph_{} {{\n  rankdir=TB;\n", g.uid());
  out += "  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    std::string style;
    if (n.op == Op::kInput)
      style = ", style=filled, fillcolor=\"#cfe8ff\"";
    else if (n.op == Op::kWeight)
      style = ", style=filled, fillcolor=\"#eeeeee\"";
    else if (n.op == Op::kKvRegion)
      style = ", style=filled, fillcolor=\"#ffe0b0\"";
    else if (n.is_output)
      style = ", style=filled, fillcolor=\"#c8f0c8\"";
    out += fmt::format("  n{} [label=\"{} {}\\n{} {} {}\"{}];\n", i, i, dot_escape(n.name),
                       op_name(n.op), dtype_name(n.dtype), n.shape.str(), style);
  }
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    for (int s = 0; s < n.n_src; ++s) out += fmt::format("  n{} -> n{};\n", n.src[s], i);
  }
  out += "}\n";
  return out;
}

std::string to_json(const ComputeGraph& g, int indent) {
  nlohmann::json j;
  j["uid"] = g.uid();
  j["inputs"] = g.inputs();
  j["outputs"] = g.outputs();
  nlohmann::json nodes = nlohmann::json::array();
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    nlohmann::json shape = nlohmann::json::array();
    for (int d = 0; d < n.shape.n_dims; ++d) shape.push_back(n.shape.ne[d]);
    nlohmann::json src = nlohmann::json::array();
    for (int s = 0; s < n.n_src; ++s) src.push_back(n.src[s]);
    nodes.push_back({{"id", i},
                     {"op", std::string(op_name(n.op))},
                     {"name", n.name},
                     {"dtype", std::string(dtype_name(n.dtype))},
                     {"shape", shape},
                     {"src", src},
                     {"backend", n.backend},
                     {"layer", n.layer},
                     {"output", n.is_output},
                     {"params", params_json(n)}});
  }
  j["nodes"] = std::move(nodes);
  return j.dump(indent);
}

}  // namespace minfer::graph
