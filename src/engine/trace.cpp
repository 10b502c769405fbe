// Stage 15 (the loop): Chrome trace-event JSON of a run's per-op profile.
#include "engine/trace.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace minfer::engine {

void TraceWriter::add(const sched::ExecProfile& p, const char* kind) {
  if (p.graph != nullptr && names_.find(p.uid) == names_.end()) {
    std::vector<std::string>& names = names_[p.uid];
    names.reserve(p.graph->size());
    for (const graph::Node& n : p.graph->nodes()) names.push_back(n.name);
  }
  steps_.push_back(Step{.kind = kind,
                        .start_ns = p.start_ns,
                        .dur_ns = p.dur_ns,
                        .uid = p.uid,
                        .planned_now = p.planned_now,
                        .first_op = static_cast<uint32_t>(ops_.size()),
                        .n_ops = static_cast<uint32_t>(p.ops.size())});
  ops_.insert(ops_.end(), p.ops.begin(), p.ops.end());
}

std::string TraceWriter::json() const {
  using J = nlohmann::ordered_json;
  const uint64_t t0 = steps_.empty() ? 0 : steps_.front().start_ns;
  auto us = [&](uint64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };
  auto dur = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  J events = J::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", process_name_}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", "steps"}}}});
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    events.push_back({{"name", s.kind},
                      {"cat", "step"},
                      {"ph", "X"},
                      {"ts", us(s.start_ns)},
                      {"dur", dur(s.dur_ns)},
                      {"pid", 1},
                      {"tid", 1},
                      {"args",
                       {{"step", i},
                        {"graph_uid", s.uid},
                        {"planned_now", s.planned_now},
                        {"n_ops", s.n_ops}}}});
    const auto names = names_.find(s.uid);
    for (uint32_t k = s.first_op; k < s.first_op + s.n_ops; ++k) {
      const sched::OpSpan& o = ops_[k];
      J args{{"step", i}, {"node", o.node}, {"layer", o.layer}};
      if (names != names_.end() && o.node >= 0 &&
          static_cast<size_t>(o.node) < names->second.size()) {
        args["tensor"] = names->second[static_cast<size_t>(o.node)];
      }
      events.push_back({{"name", std::string(graph::op_name(o.op))},
                        {"cat", "op"},
                        {"ph", "X"},
                        {"ts", us(o.start_ns)},
                        {"dur", dur(o.dur_ns)},
                        {"pid", 1},
                        {"tid", 1},
                        {"args", std::move(args)}});
    }
  }
  J j{{"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"producer", "minfer --dump-trace"}, {"steps", steps_.size()}}}};
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status TraceWriter::write(const std::string& path) const {
  const std::string text = json();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error("--dump-trace: cannot open '" + path + "' for writing");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return make_error("--dump-trace: cannot write '" + path + "'");
  return Ok{};
}

}  // namespace minfer::engine
