// Stage 15 (the loop): --dump-trace — the per-op profile of every forward of a run as
// Chrome trace-event JSON (the format chrome://tracing and Perfetto open): one "X"
// (complete) event per forward on the "steps" track and, nested inside it in time,
// one per executed op, named by the op. Times are microseconds from the first forward.
// Invariant: the writer only records what the scheduler's profile hook reports (one
// span per timed compute node; the aliasing reshape/view nodes do no work and are not
// spans), so the trace has exactly the ops that ran, step by step.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "sched/sched.h"

namespace minfer::engine {

class TraceWriter {
 public:
  explicit TraceWriter(std::string process_name) : process_name_(std::move(process_name)) {}
  // One forward (called from the profile hook); `kind` names the step ("prefill",
  // "decode"). Node names are taken from the profile's graph, once per graph uid.
  void add(const sched::ExecProfile& p, const char* kind);
  size_t n_steps() const { return steps_.size(); }
  size_t n_spans() const { return ops_.size(); }
  // The whole trace: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
  std::string json() const;
  Status write(const std::string& path) const;

 private:
  struct Step {
    const char* kind;
    uint64_t start_ns, dur_ns, uid;
    bool planned_now;
    uint32_t first_op, n_ops;
  };
  std::string process_name_;
  std::vector<Step> steps_;
  std::vector<sched::OpSpan> ops_;
  std::unordered_map<uint64_t, std::vector<std::string>> names_;  // per uid, by node id
};

}  // namespace minfer::engine
