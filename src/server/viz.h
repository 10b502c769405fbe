// Stage 17 (HTTP): the engine view's data — the runtime graph of the loaded model (as
// Graphviz DOT, laid out to SVG on first request) and the live panel's state: per-step
// timings, graph reuses vs rebuilds, KV cells per sequence, the per-op breakdown of
// the last step. Served at GET /viz, /viz/graph.svg, /viz/graph.json, /viz/events.
// Invariants: the inference thread writes (record_step, record_ops, record_kv); HTTP
// threads read snapshots under the mutex and never touch the engine; per-op timing runs
// only while an events client is connected (clients() > 0), so a server nobody watches
// runs the untimed path.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "core/result.h"
#include "graph/graph.h"
#include "sched/sched.h"
#include "server/metrics.h"

namespace minfer::server {

// The view's DOT of a runtime graph: one cluster per transformer layer; every compute
// node is a box labelled with op, name, shape, dtype, backend and the ops a fused node
// stands for; leaves read inside layers (weights, KV regions, per-step inputs) are
// listed in their consumer's label. Node n<id> is the graph's node id.
std::string viz_dot(const graph::ComputeGraph& g, const std::string& title);
// Lays out DOT with Graphviz (dot engine) and renders SVG. Error when this build has
// no Graphviz (MINFER_HAVE_GRAPHVIZ) or the layout fails.
Result<std::string> layout_svg(const std::string& dot);
// The ops a fused node computes ("rms_norm · mul"); empty for a plain op.
const char* fused_ops(graph::Op op);

struct StepRecord {
  uint64_t index = 0;  // step number since start
  double t_s = 0.0;    // seconds since the view started
  uint32_t n_prefill = 0, n_decode = 0;
  double ms = 0.0;  // the forward
  uint64_t graph_uid = 0;
  bool rebuilt = false;  // this step built its graph (else reused a cached one)
};

struct SeqKv {
  int32_t seq = 0;
  std::string state;  // empty / idle (cached prefix) / prefill / decode
  uint32_t cells = 0;
  uint32_t shared = 0;  // of them, read by another sequence too
  uint32_t n_past = 0;
  int32_t generated = 0;
};

class VizState {
 public:
  explicit VizState(std::string model_name);
  // At start (before the inference thread runs): the decode graph and its DOT.
  void set_graph(const graph::ComputeGraph& g);

  // Inference thread.
  void record_step(uint32_t n_prefill, uint32_t n_decode, uint64_t forward_ns, uint64_t graph_uid,
                   bool rebuilt, uint64_t rebuilds, uint64_t reuses);
  void record_ops(const sched::ExecProfile& p);
  void record_kv(std::vector<SeqKv> seqs, uint32_t total, uint32_t used, uint32_t shared);
  bool want_profile() const { return clients_.load(std::memory_order_relaxed) > 0; }

  // HTTP threads.
  int client_connected() { return ++clients_; }
  void client_gone() { --clients_; }
  int clients() const { return clients_.load(); }
  // The SVG (laid out once, then cached) or the error that stopped the layout.
  Result<std::string> svg();
  std::string graph_json() const;
  // Waits up to `wait_ms` for a step newer than `*seen`, then returns one event's JSON:
  // the counters of `m`, the steps after `*seen` (at most 64), KV, the last step's ops.
  std::string snapshot(const Metrics& m, uint32_t n_slots, uint64_t* seen, int wait_ms);
  uint64_t steps() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> clients_{0};
  std::chrono::steady_clock::time_point t0_;
  // Graph (set once at start).
  std::string dot_, model_name_, graph_json_;
  size_t n_nodes_ = 0;
  // Layout.
  std::mutex svg_mu_;
  bool svg_done_ = false;
  Result<std::string> svg_{std::string()};
  // Live.
  std::deque<StepRecord> steps_;
  uint64_t n_steps_ = 0, rebuilds_ = 0, reuses_ = 0, graph_uid_ = 0;
  std::vector<SeqKv> seqs_;
  uint32_t kv_total_ = 0, kv_used_ = 0, kv_shared_ = 0;
  // The last profiled step: per op kind and the slowest nodes.
  struct OpSum {
    graph::Op op;
    uint64_t ns = 0;
    uint32_t n = 0;
  };
  std::vector<OpSum> last_ops_;
  std::vector<sched::OpSpan> last_top_;
  uint64_t last_ops_uid_ = 0, last_ops_ns_ = 0, last_ops_step_ = 0;
  uint64_t profiled_steps_ = 0;
};

}  // namespace minfer::server
