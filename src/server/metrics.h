// Stage 17 (HTTP): the server's counters and gauges, published as Prometheus text.
// Invariants: written by the inference thread (engine counters) and the HTTP threads
// (request counters) with relaxed atomics; reading them never waits on the engine.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>

namespace minfer::server {

// A Prometheus histogram of durations, lock-free: one counter per upper bound (seconds,
// ascending; a value is counted in the first bucket whose bound it does not exceed, and
// rendered cumulatively), the overflow bucket, and the sum in nanoseconds.
class Histogram {
 public:
  static constexpr size_t kMaxBounds = 24;
  explicit Histogram(std::span<const double> bounds_s);
  void observe_ns(uint64_t ns);
  // `_bucket{le=...}` lines, `_sum` (seconds) and `_count` of metric `name` (with its
  // HELP and TYPE lines).
  void render(std::string& out, const char* name, const char* help) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::array<double, kMaxBounds> bounds_{};
  size_t n_bounds_ = 0;
  std::array<std::atomic<uint64_t>, kMaxBounds + 1> counts_{};  // the last: above every bound
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds (seconds) of the latency histograms, spanning a loopback token (ms) to a
// long generation queued behind others (minutes).
inline constexpr double kTtftBounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                         0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                         7.5,   10.0,  20.0, 40.0, 80.0, 160.0};
inline constexpr double kItlBounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                        0.1,   0.15,   0.2,   0.3,  0.4,   0.5,  0.75,
                                        1.0,   2.5,    5.0,   7.5,  10.0};
inline constexpr double kE2eBounds[] = {0.1,  0.3,  0.5,  0.8,  1.0,   1.5,  2.0,  2.5,
                                        5.0,  10.0, 15.0, 20.0, 30.0,  40.0, 50.0, 60.0,
                                        120., 240., 480., 960., 1920., 7680.};

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
  std::atomic<uint64_t> decode_tokens{0};         // decode rows run (drafts apart)
  std::atomic<uint64_t> prefill_ns{0};            // step time, split by row share
  std::atomic<uint64_t> decode_ns{0};
  std::atomic<uint64_t> steps{0};
  // Speculative decoding: draft tokens run as rows, those the samples agreed with, and
  // the drafts (steps of a sequence that ran one).
  std::atomic<uint64_t> spec_draft_tokens{0};
  std::atomic<uint64_t> spec_accepted_tokens{0};
  std::atomic<uint64_t> spec_drafts{0};
  std::atomic<uint64_t> kv_cells_total{0};
  std::atomic<uint64_t> kv_cells_used{0};
  std::atomic<uint64_t> kv_cells_shared{0};  // cells read by more than one sequence
  std::atomic<int> draining{0};
  // KV events (--kv-events; rendered only when on).
  std::atomic<int> kv_events_on{0};
  std::atomic<uint32_t> kv_event_block_size{0};
  std::atomic<uint64_t> kv_blocks{0};          // distinct blocks the slots hold
  std::atomic<uint64_t> kv_events_dropped{0};  // batches dropped from a full queue
  // Latencies of generation requests (inference thread): arrival at the scheduler to the
  // first generated token, between two generated tokens of one request, and arrival to
  // the end of a completed request.
  Histogram time_to_first_token{kTtftBounds};
  Histogram inter_token_latency{kItlBounds};
  Histogram e2e_request_latency{kE2eBounds};
};

// Prometheus text exposition format 0.0.4.
std::string render_metrics(const Metrics& m, uint32_t n_slots);

}  // namespace minfer::server
