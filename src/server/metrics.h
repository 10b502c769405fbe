// Stage 17 (HTTP): the server's counters and gauges, published as Prometheus text.
// Invariants: written by the inference thread (engine counters) and the HTTP threads
// (request counters) with relaxed atomics; reading them never waits on the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace minfer::server {

struct Metrics {
  // Requests (HTTP threads).
  std::atomic<uint64_t> requests_total{0};       // generation requests accepted into the queue
  std::atomic<uint64_t> requests_rejected{0};    // refused with 4xx before the queue
  std::atomic<uint64_t> requests_queue_full{0};  // refused with 429
  // Scheduler (inference thread).
  std::atomic<uint64_t> requests_completed{0};
  std::atomic<uint64_t> requests_cancelled{0};  // client gone, or the drain deadline
  std::atomic<uint64_t> requests_failed{0};     // the forward failed
  std::atomic<uint64_t> finished_stop{0};       // completed: end of generation or a stop string
  std::atomic<uint64_t> finished_length{0};     // completed: max_tokens or the context
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> running{0};
  std::atomic<int64_t> slots_idle_cached{0};  // finished sequences whose cells are kept
  std::atomic<uint64_t> prompt_tokens{0};     // of completed and running requests
  std::atomic<uint64_t> completion_tokens{0};
  std::atomic<uint64_t> prefill_tokens{0};        // prompt tokens actually decoded
  std::atomic<uint64_t> prefix_reused_tokens{0};  // prompt tokens found in cached cells
  std::atomic<uint64_t> decode_tokens{0};         // decode rows run
  std::atomic<uint64_t> prefill_ns{0};            // step time, split by row share
  std::atomic<uint64_t> decode_ns{0};
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> kv_cells_total{0};
  std::atomic<uint64_t> kv_cells_used{0};
  std::atomic<uint64_t> kv_cells_shared{0};  // cells read by more than one sequence
  std::atomic<int> draining{0};
};

// Prometheus text exposition format 0.0.4.
std::string render_metrics(const Metrics& m, uint32_t n_slots);

}  // namespace minfer::server
