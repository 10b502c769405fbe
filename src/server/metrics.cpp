// Stage 17 (HTTP): Prometheus text for GET /metrics.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/kv_events.h"

namespace minfer::server {
namespace {

void put(std::string& out, const char* name, const char* type, const char* help, double value) {
  fmt::format_to(std::back_inserter(out),
                 "# HELP minfer_{} {}\n# TYPE minfer_{} {}\nminfer_{} {}\n", name, help, name, type,
                 name, value);
}

void put_vllm(std::string& out, const char* name, const char* type, const char* help,
              double value) {
  fmt::format_to(std::back_inserter(out), "# HELP vllm:{} {}\n# TYPE vllm:{} {}\nvllm:{} {}\n",
                 name, help, name, type, name, value);
}

template <typename T>
double ld(const std::atomic<T>& a) {
  return static_cast<double>(a.load(std::memory_order_relaxed));
}

}  // namespace

Histogram::Histogram(std::span<const double> bounds_s)
    : n_bounds_(std::min(bounds_s.size(), kMaxBounds)) {
  std::copy_n(bounds_s.begin(), n_bounds_, bounds_.begin());
}

void Histogram::observe_ns(uint64_t ns) {
  const double s = static_cast<double>(ns) * 1e-9;
  size_t b = 0;
  while (b < n_bounds_ && s > bounds_[b]) ++b;
  counts_[b].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const char* name, const char* help) const {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  // Read the buckets first and derive the count from them, so one scrape is consistent
  // (+Inf equals _count) while observations land.
  uint64_t cumulative = 0;
  for (size_t b = 0; b < n_bounds_; ++b) {
    cumulative += counts_[b].load(std::memory_order_relaxed);
    fmt::format_to(it, "{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[b], cumulative);
  }
  cumulative += counts_[n_bounds_].load(std::memory_order_relaxed);
  fmt::format_to(it, "{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative,
                 name, static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9, name,
                 cumulative);
}

std::string render_metrics(const Metrics& m, uint32_t n_slots) {
  std::string out;
  out.reserve(4096);
  put(out, "requests_total", "counter", "generation requests accepted", ld(m.requests_total));
  put(out, "requests_completed_total", "counter", "requests that finished generating",
      ld(m.requests_completed));
  put(out, "requests_cancelled_total", "counter",
      "requests abandoned (client disconnected or drain deadline)", ld(m.requests_cancelled));
  put(out, "requests_failed_total", "counter", "requests whose forward failed",
      ld(m.requests_failed));
  put(out, "requests_rejected_total", "counter", "requests refused with a 4xx (bad input, auth)",
      ld(m.requests_rejected));
  put(out, "requests_queue_full_total", "counter", "requests refused with 429 (queue full)",
      ld(m.requests_queue_full));
  put(out, "queue_depth", "gauge", "requests waiting for a slot", ld(m.queue_depth));
  put(out, "requests_running", "gauge", "requests holding a slot", ld(m.running));
  put(out, "slots_total", "gauge", "sequence slots", n_slots);
  put(out, "slots_idle_cached", "gauge", "free slots whose cells are kept as a prefix cache",
      ld(m.slots_idle_cached));
  put(out, "prompt_tokens_total", "counter", "prompt tokens of admitted requests",
      ld(m.prompt_tokens));
  put(out, "completion_tokens_total", "counter", "generated tokens", ld(m.completion_tokens));
  put(out, "prefill_tokens_total", "counter", "prompt tokens decoded (not found in the cache)",
      ld(m.prefill_tokens));
  put(out, "prefix_reused_tokens_total", "counter", "prompt tokens reused from cached cells",
      ld(m.prefix_reused_tokens));
  put(out, "decode_tokens_total", "counter",
      "decode rows run (one per running request and step; draft rows counted apart)",
      ld(m.decode_tokens));
  const double prefill_s = ld(m.prefill_ns) * 1e-9;
  const double decode_s = ld(m.decode_ns) * 1e-9;
  put(out, "prefill_seconds_total", "counter", "forward time spent on prompt rows", prefill_s);
  put(out, "decode_seconds_total", "counter", "forward time spent on decode rows", decode_s);
  put(out, "prefill_tokens_per_second", "gauge", "prompt rows per second of forward time",
      prefill_s > 0 ? ld(m.prefill_tokens) / prefill_s : 0.0);
  put(out, "decode_tokens_per_second", "gauge", "decode rows per second of forward time",
      decode_s > 0 ? ld(m.decode_tokens) / decode_s : 0.0);
  put(out, "steps_total", "counter", "forward steps (one batch each)", ld(m.steps));
  const double drafted = ld(m.spec_draft_tokens);
  const double accepted = ld(m.spec_accepted_tokens);
  put(out, "spec_decode_drafts_total", "counter",
      "speculative decoding: drafts verified (a sequence's step with draft rows)",
      ld(m.spec_drafts));
  put(out, "spec_decode_draft_tokens_total", "counter",
      "speculative decoding: draft tokens run as rows", drafted);
  put(out, "spec_decode_accepted_tokens_total", "counter",
      "speculative decoding: draft tokens the samples agreed with (kept)", accepted);
  put(out, "spec_decode_acceptance_rate", "gauge", "accepted / draft tokens (0 before any draft)",
      drafted > 0 ? accepted / drafted : 0.0);
  const double total = ld(m.kv_cells_total);
  const double used = ld(m.kv_cells_used);
  put(out, "kv_cells_total", "gauge", "cells of the KV arena", total);
  put(out, "kv_cells_used", "gauge", "cells holding a position", used);
  put(out, "kv_cells_free", "gauge", "free cells", total - used);
  put(out, "kv_cells_shared", "gauge", "cells read by more than one sequence",
      ld(m.kv_cells_shared));
  put(out, "draining", "gauge", "1 while shutting down", ld(m.draining));
  if (m.kv_events_on.load(std::memory_order_relaxed) != 0) {
    put(out, "kv_blocks", "gauge", "distinct full KV blocks the slots hold (--kv-events)",
        ld(m.kv_blocks));
    put(out, "kv_events_dropped_total", "counter",
        "KV event batches dropped because the publisher's queue was full", ld(m.kv_events_dropped));
    // What a router needs to recompute block hashes (docs/USAGE.md "KV events").
    fmt::format_to(std::back_inserter(out),
                   "# HELP minfer_kv_events_info how --kv-events hashes blocks\n"
                   "# TYPE minfer_kv_events_info gauge\n"
                   "minfer_kv_events_info{{block_size=\"{}\",hash=\"xxh3_64\",seed=\"{:#x}\","
                   "layout=\"parent_u64le+tokens_u32le\"}} 1\n",
                   m.kv_event_block_size.load(std::memory_order_relaxed), kKvBlockHashSeed);
  }
  // vLLM's names for the same quantities, which routers and gateways (llm-d, Envoy AI
  // Gateway) read to pick a replica; the values are the ones above.
  put_vllm(out, "num_requests_running", "gauge", "requests holding a slot", ld(m.running));
  put_vllm(out, "num_requests_waiting", "gauge", "requests waiting for a slot", ld(m.queue_depth));
  put_vllm(out, "kv_cache_usage_perc", "gauge", "fraction of KV cells in use (0..1)",
           total > 0 ? used / total : 0.0);
  put_vllm(out, "prompt_tokens_total", "counter", "prompt tokens of admitted requests",
           ld(m.prompt_tokens));
  put_vllm(out, "generation_tokens_total", "counter", "generated tokens", ld(m.completion_tokens));
  put_vllm(out, "spec_decode_num_drafts_total", "counter", "drafts verified", ld(m.spec_drafts));
  put_vllm(out, "spec_decode_num_draft_tokens_total", "counter", "draft tokens run", drafted);
  put_vllm(out, "spec_decode_num_accepted_tokens_total", "counter", "draft tokens accepted",
           accepted);
  fmt::format_to(std::back_inserter(out),
                 "# HELP vllm:request_success_total requests that finished, by reason\n"
                 "# TYPE vllm:request_success_total counter\n"
                 "vllm:request_success_total{{finished_reason=\"stop\"}} {}\n"
                 "vllm:request_success_total{{finished_reason=\"length\"}} {}\n",
                 ld(m.finished_stop), ld(m.finished_length));
  // The KV arena as vLLM's cache description: one cell per block.
  fmt::format_to(std::back_inserter(out),
                 "# HELP vllm:cache_config_info the KV cache: blocks of one cell\n"
                 "# TYPE vllm:cache_config_info gauge\n"
                 "vllm:cache_config_info{{block_size=\"1\",num_gpu_blocks=\"{}\"}} 1\n",
                 m.kv_cells_total.load(std::memory_order_relaxed));
  m.time_to_first_token.render(out, "vllm:time_to_first_token_seconds",
                               "arrival at the scheduler to the first generated token");
  m.inter_token_latency.render(out, "vllm:inter_token_latency_seconds",
                               "time between two generated tokens of one request");
  m.e2e_request_latency.render(out, "vllm:e2e_request_latency_seconds",
                               "arrival at the scheduler to the end of a completed request");
  return out;
}

}  // namespace minfer::server
