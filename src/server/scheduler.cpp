// Stage 17 (HTTP): the inference thread's step loop — admission with prefix reuse,
// one mixed decode/prefill batch per step, per-sequence sampling, event delivery.
#include "server/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;

// Prompt rows a step runs at least while a prompt waits (decode rows never starve it).
constexpr uint32_t kMinPrefill = 16;

uint64_t ns_between(Clock::time_point t0, Clock::time_point t1) {
  return t1 > t0 ? static_cast<uint64_t>(
                       std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count())
                 : 0;
}

uint64_t ns_since(Clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

}  // namespace

size_t JobStream::bytes_of(const JobEvent& ev) {
  size_t n = ev.text.size() + ev.reasoning.size();
  for (const LogprobEntry& lp : ev.logprobs) {
    n += lp.token.size() + sizeof(float);
    for (const auto& [token, logprob] : lp.top) n += token.size() + sizeof(logprob);
  }
  return n;
}

void JobStream::push(JobEvent ev) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.fetch_add(bytes_of(ev), std::memory_order_relaxed);
    events_.push_back(std::move(ev));
  }
  cv_.notify_one();
}

bool JobStream::pop(JobEvent& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [this] { return !events_.empty(); })) return false;
  out = std::move(events_.front());
  events_.pop_front();
  pending_.fetch_sub(bytes_of(out), std::memory_order_relaxed);
  return true;
}

bool JobStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [this] { return !events_.empty(); });
}

Scheduler::Scheduler(engine::Context& engine, const SchedulerOptions& options, Metrics& metrics,
                     VizState* viz)
    : engine_(engine),
      options_(options),
      metrics_(metrics),
      viz_(viz),
      token_bytes_(engine.token_bytes()) {}

Scheduler::~Scheduler() {
  drain(Clock::now());
  join();
}

Status Scheduler::start() {
  const engine::ContextOptions ctx{.n_cells = options_.n_slots * options_.n_ctx,
                                   .n_seq_max = options_.n_slots,
                                   .n_ctx_seq = options_.n_ctx,
                                   .n_runs = 2};
  MINFER_TRY_STATUS(engine_.set_context(ctx));
  if (options_.spec.draft != nullptr) {
    if (Status st = options_.spec.draft->set_context(ctx); !st.ok()) {
      return st.error().context("the draft model");
    }
    draft_batch_ = engine::Batch(options_.step_tokens + options_.n_slots);
  }
  slots_.resize(options_.n_slots);
  for (uint32_t i = 0; i < options_.n_slots; ++i) {
    slots_[i].seq = static_cast<engine::SeqId>(i);
    slots_[i].tokens.reserve(options_.n_ctx);
  }
  // Rows: decode rows and drafts under step_tokens, then a prefill chunk of at least
  // kMinPrefill (step()).
  batch_ = engine::Batch(options_.step_tokens + options_.n_slots + kMinPrefill);
  row_slot_.reserve(options_.step_tokens + options_.n_slots + kMinPrefill);
  for (Slot& s : slots_) s.draft.reserve(options_.step_tokens);
  metrics_.kv_cells_total.store(ctx.n_cells, std::memory_order_relaxed);
  if (!options_.kv_events.endpoint.empty()) {
    MINFER_TRY(kv_events_, KvEventPublisher::open(options_.kv_events, metrics_.kv_events_dropped));
    kv_blocks_ = std::make_unique<KvBlockIndex>(options_.kv_events.block_size, slots_.size());
    cached_.resize(slots_.size());
    metrics_.kv_event_block_size.store(options_.kv_events.block_size, std::memory_order_relaxed);
    metrics_.kv_events_on.store(1, std::memory_order_relaxed);
    // The first batch: a router that knew this endpoint's previous process forgets it.
    kv_blocks_->clear(kv_changes_);
    kv_events_->publish(std::move(kv_changes_));
    kv_changes_.clear();
  }
  if (viz_ != nullptr) {
    // The graph a decode step of one sequence runs, placed and fused (the view's picture).
    auto g = engine_.runtime_graph(1, 1);
    if (!g.ok()) return g.error().context("viz: the decode graph");
    viz_->set_graph(*g);
    publish_kv();
  }
  thread_ = std::thread([this] { loop(); });
  return Ok{};
}

SubmitResult Scheduler::submit(Job job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_) return SubmitResult::kDraining;
    if (queue_.size() >= options_.max_queue) return SubmitResult::kQueueFull;
    job.arrived = Clock::now();
    queue_.push_back(std::move(job));
    metrics_.queue_depth.store(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
  }
  cv_.notify_one();
  return SubmitResult::kQueued;
}

SubmitResult Scheduler::submit_embed(std::shared_ptr<EmbedJob> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_) return SubmitResult::kDraining;
    if (embed_queue_.size() >= options_.max_queue) return SubmitResult::kQueueFull;
    embed_queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return SubmitResult::kQueued;
}

SubmitResult Scheduler::submit_slot_command(std::shared_ptr<SlotCommand> cmd) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_.load(std::memory_order_acquire)) return SubmitResult::kDraining;
    slot_queue_.push_back(std::move(cmd));
  }
  cv_.notify_one();
  return SubmitResult::kQueued;
}

SlotInfo Scheduler::slot_info(size_t i) const {
  const Slot& s = slots_[i];
  const bool processing = busy(s);
  return SlotInfo{.id = static_cast<uint32_t>(i),
                  .processing = processing,
                  .n_cached = static_cast<uint32_t>(s.n_past),
                  .n_generated = processing && s.job.state ? s.job.state->n_generated() : 0,
                  .id_task = processing ? static_cast<int64_t>(s.admitted_at) : -1};
}

void Scheduler::empty_slot(Slot& s) {
  if (s.state == SlotState::kIdle)
    metrics_.slots_idle_cached.fetch_sub(1, std::memory_order_relaxed);
  engine_.kv_cells()->seq_rm(s.seq, -1, -1);
  s.tokens.clear();
  s.n_past = 0;
  s.state = SlotState::kEmpty;
}

void Scheduler::run_embeds(std::vector<std::shared_ptr<EmbedJob>>& jobs) {
  // Requests with the same options share decodes; a failure is retried request by request
  // so that one request's error never fails another.
  size_t first = 0;
  while (first < jobs.size()) {
    size_t last = first + 1;
    while (last < jobs.size() && jobs[last]->options.pooling == jobs[first]->options.pooling &&
           jobs[last]->options.normalize == jobs[first]->options.normalize) {
      ++last;
    }
    std::vector<std::vector<engine::TokenId>> inputs;
    std::vector<std::vector<int32_t>> types;
    for (size_t j = first; j < last; ++j) {
      for (size_t k = 0; k < jobs[j]->inputs.size(); ++k) {
        types.push_back(jobs[j]->token_types.empty()
                            ? std::vector<int32_t>(jobs[j]->inputs[k].size(), 0)
                            : std::move(jobs[j]->token_types[k]));
        inputs.push_back(std::move(jobs[j]->inputs[k]));
      }
    }
    auto r = engine::embed(engine_, inputs, jobs[first]->options, types);
    size_t at = 0;
    for (size_t j = first; j < last; ++j) {
      const size_t n = jobs[j]->inputs.size();
      if (r.ok()) {
        engine::Embeddings mine{.pooling = r->pooling, .dim = r->dim};
        for (size_t k = at; k < at + n; ++k) {
          mine.vectors.push_back(std::move(r->vectors[k]));
          mine.n_tokens.push_back(r->n_tokens[k]);
        }
        jobs[j]->done.set_value(std::move(mine));
      } else if (last - first == 1) {
        jobs[j]->done.set_value(r.error());
      } else {
        std::vector<std::vector<engine::TokenId>> own(
            inputs.begin() + static_cast<ptrdiff_t>(at),
            inputs.begin() + static_cast<ptrdiff_t>(at + n));
        std::vector<std::vector<int32_t>> own_types(types.begin() + static_cast<ptrdiff_t>(at),
                                                    types.begin() + static_cast<ptrdiff_t>(at + n));
        jobs[j]->done.set_value(engine::embed(engine_, own, jobs[j]->options, own_types));
      }
      at += n;
    }
    first = last;
  }
}

void Scheduler::drain(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!draining_ || deadline < deadline_) deadline_ = deadline;  // a second call may hasten it
    draining_ = true;
  }
  metrics_.draining.store(1, std::memory_order_relaxed);
  cv_.notify_all();
}

void Scheduler::join() {
  if (thread_.joinable()) thread_.join();
}

void Scheduler::loop() {
  std::vector<Job> admitted;
  std::vector<std::shared_ptr<EmbedJob>> embeds;
  std::vector<std::shared_ptr<SlotCommand>> slot_cmds;
  for (;;) {
    admitted.clear();
    embeds.clear();
    slot_cmds.clear();
    bool stop = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      auto any_busy = [this] {
        return std::any_of(slots_.begin(), slots_.end(), [this](const Slot& s) { return busy(s); });
      };
      cv_.wait(lk, [&] {
        return any_busy() || !queue_.empty() || !embed_queue_.empty() || !slot_queue_.empty() ||
               draining_;
      });
      // Slot commands first, before admission: an erase answered 200 found the slot idle.
      slot_cmds.assign(slot_queue_.begin(), slot_queue_.end());
      slot_queue_.clear();
      if (draining_ && Clock::now() >= deadline_) {
        // The drain deadline: whatever is still queued or running is abandoned.
        for (Job& j : queue_) {
          metrics_.requests_cancelled.fetch_add(1, std::memory_order_relaxed);
          j.stream->push(
              {.final = true, .error = "the server is shutting down", .error_status = 503});
        }
        queue_.clear();
        for (auto& e : embed_queue_) e->done.set_value(Error{"the server is shutting down"});
        embed_queue_.clear();
        stop = true;
      } else if (draining_ && !any_busy() && queue_.empty() && embed_queue_.empty()) {
        stop = true;
      }
      // Admission: a queued request takes a slot that no running request holds.
      size_t n_free = static_cast<size_t>(
          std::count_if(slots_.begin(), slots_.end(), [this](const Slot& s) { return !busy(s); }));
      while (!stop && n_free > 0 && !queue_.empty()) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        if (!admitted.back().stream->cancelled()) n_free--;
      }
      metrics_.queue_depth.store(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
      if (!stop) {
        embeds.assign(embed_queue_.begin(), embed_queue_.end());
        embed_queue_.clear();
      }
    }
    for (auto& c : slot_cmds) run_slot_command(*c);
    if (!embeds.empty()) run_embeds(embeds);
    if (stop) {
      for (Slot& s : slots_) {
        if (busy(s)) {
          finish(s, {.final = true, .error = "the server is shutting down", .error_status = 503},
                 false, Outcome::kCancelled);
        }
      }
      publish_kv();
      if (kv_blocks_) {
        // The caches end with the process.
        kv_blocks_->clear(kv_changes_);
        kv_events_->publish(std::move(kv_changes_));
        kv_changes_.clear();
        metrics_.kv_blocks.store(0, std::memory_order_relaxed);
      }
      {
        // Under the lock: a slot command queued from now on is refused by submit.
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& c : slot_queue_) {
          c->done.set_value({.status = 503, .error = "the server is shutting down"});
        }
        slot_queue_.clear();
        stopped_.store(true, std::memory_order_release);
      }
      return;
    }
    for (Job& j : admitted) {
      if (j.stream->cancelled()) {
        metrics_.requests_cancelled.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      admit(std::move(j));
    }
    cancel_gone();
    if (std::none_of(slots_.begin(), slots_.end(), [this](const Slot& s) { return busy(s); })) {
      publish_kv();
      publish_blocks();
      continue;
    }
    if (Status st = step(); !st.ok()) fail_batch(st.error().message);
    publish_kv();
    publish_blocks();
  }
}

void Scheduler::admit(Job job) {
  kv::KvCells& kv = *engine_.kv_cells();
  const std::vector<engine::TokenId>& prompt = job.prompt;
  // Tokens of `s` in the KV that equal the prompt's first tokens.
  auto common = [&](const Slot& s) {
    const size_t n = std::min(s.n_past, prompt.size());
    size_t i = 0;
    while (i < n && s.tokens[i] == prompt[i]) ++i;
    return i;
  };
  // Target: the free slot with the longest cached prefix; with none, an empty slot,
  // then the least recently used idle cache.
  Slot* target = nullptr;
  size_t target_common = 0;
  for (Slot& s : slots_) {
    if (busy(s)) continue;
    const size_t c = common(s);
    const auto better = [&] {
      if (!target) return true;
      if (c != target_common) return c > target_common;
      if ((s.state == SlotState::kEmpty) != (target->state == SlotState::kEmpty)) {
        return s.state == SlotState::kEmpty;
      }
      return s.last_used < target->last_used;
    };
    if (better()) {
      target = &s;
      target_common = c;
    }
  }
  MINFER_CHECK(target != nullptr, "admit: no free slot (admission counted %zu)", slots_.size());
  // A longer prefix held by another sequence (running or idle) is shared copy-on-write.
  Slot* source = nullptr;
  size_t source_common = target_common;
  for (Slot& s : slots_) {
    if (&s == target) continue;
    const size_t c = common(s);
    if (c > source_common) {
      source = &s;
      source_common = c;
    }
  }
  // The last prompt token is always decoded: its row gives the first logits.
  const size_t max_reuse = prompt.size() - 1;
  size_t reuse = 0;
  if (source) {
    kv.seq_rm(target->seq, -1, -1);
    reuse = std::min(source_common, max_reuse);
    if (reuse > 0) {
      if (Status st = kv.seq_cp(source->seq, target->seq, 0, static_cast<kv::Pos>(reuse));
          !st.ok()) {
        std::fprintf(stderr, "[server] prefix share failed (%s); prefilling in full\n",
                     st.error().message.c_str());
        kv.seq_rm(target->seq, -1, -1);
        reuse = 0;
      }
    }
  } else {
    reuse = std::min(target_common, max_reuse);
    kv.seq_rm(target->seq, static_cast<kv::Pos>(reuse), -1);
  }
  // Cells for the rest of the prompt and the reply as one contiguous run, so the
  // sequence's window stays one run (plus one for a shared prefix): sequences decoding
  // side by side would otherwise interleave their cells, and every window would grow a
  // run per generated token. A store too fragmented for the run goes on unreserved (the
  // engine raises the window layout; the bits are the same).
  kv.release(target->seq);
  {
    const int32_t n_predict = job.state->options().n_predict;
    const size_t room = options_.n_ctx > reuse ? options_.n_ctx - reuse : 0;
    const size_t reply = n_predict >= 0 ? static_cast<size_t>(n_predict) : room;
    // The sequence's own cached cells may fall inside the run (reserve() takes cells
    // free or held by the sequence alone): count them in, so the new rows still fit.
    const size_t own = source ? 0 : reuse;
    const size_t need = own + std::min(room, prompt.size() - reuse + reply);
    if (need > 0) (void)kv.reserve(target->seq, static_cast<uint32_t>(need));
  }
  if (target->state == SlotState::kIdle) {
    metrics_.slots_idle_cached.fetch_sub(1, std::memory_order_relaxed);
  }
  target->tokens.assign(prompt.begin(), prompt.end());
  target->n_past = reuse;
  target->n_reused = static_cast<int32_t>(reuse);
  target->state = SlotState::kPrefill;
  target->draft_cap = job.spec.n_max;
  target->admitted_at = ++tick_;
  target->last_used = tick_;
  job.state->reset(prompt);
  // (prompt may be the job's own tokens: count them before the job moves)
  metrics_.prefix_reused_tokens.fetch_add(reuse, std::memory_order_relaxed);
  metrics_.prompt_tokens.fetch_add(prompt.size(), std::memory_order_relaxed);
  target->job = std::move(job);
  metrics_.running.fetch_add(1, std::memory_order_relaxed);
}

void Scheduler::cancel_gone() {
  for (Slot& s : slots_) {
    if (busy(s) && s.job.stream->cancelled()) {
      finish(s, {.final = true, .error = "cancelled"}, /*keep_cells=*/false, Outcome::kCancelled);
    }
  }
}

Status Scheduler::step() {
  batch_.clear();
  row_slot_.clear();
  // Decode rows of every running sequence first: streams keep flowing during prefills.
  // A sequence whose reader has not taken its pending output sits this step out.
  uint32_t n_decode = 0;
  for (Slot& s : slots_) {
    s.decoding = s.state == SlotState::kDecode && !s.job.stream->full();
    s.draft.clear();
    if (!s.decoding) continue;
    s.row = static_cast<uint32_t>(batch_.size());
    batch_.add(s.next_token, s.seq, static_cast<int32_t>(s.n_past), true);
    row_slot_.push_back(&s);
    n_decode++;
  }
  // Speculating sequences' drafts (prompt lookup on their history), as further rows of
  // their sequences, within what is left of the step's budget once every running
  // sequence has its row. A draft's length changes how many tokens a step yields,
  // never which: the rows are sampled in order and kept while they agree.
  const uint32_t n_decode_rows = n_decode;
  uint32_t n_drafted = 0;
  drafting_.clear();
  for (Slot& s : slots_) {
    if (!s.decoding || !s.job.spec.enabled()) continue;
    const uint32_t left = options_.step_tokens > n_decode ? options_.step_tokens - n_decode : 0;
    const engine::SequenceState& st = *s.job.state;
    const auto pos = static_cast<int64_t>(s.n_past);  // next_token's position
    // Positions after `pos` the request may use, and one token fewer than max_tokens
    // still allows (the row after the last draft token samples one more).
    int64_t n_max =
        std::min<int64_t>({s.draft_cap, left, static_cast<int64_t>(st.options().n_ctx) - 1 - pos});
    if (st.options().n_predict >= 0) {
      n_max = std::min<int64_t>(n_max, st.options().n_predict - st.n_generated() - 1);
    }
    if (n_max <= 0) continue;
    if (s.job.spec.model) {
      // Drafted below, with the other slots the model drafts for; its rows held.
      s.draft_want = static_cast<int32_t>(n_max);
      drafting_.push_back(&s);
      n_decode += static_cast<uint32_t>(n_max);
      continue;
    }
    engine::ngram_draft(s.tokens, s.job.spec.ngram, static_cast<int32_t>(n_max), s.draft);
    n_decode += static_cast<uint32_t>(s.draft.size());
  }
  if (!drafting_.empty()) {
    MINFER_TRY_STATUS(draft_with_model());
    for (Slot* s : drafting_) {
      n_decode -= static_cast<uint32_t>(s->draft_want) - static_cast<uint32_t>(s->draft.size());
    }
  }
  for (Slot& s : slots_) {
    if (s.draft.empty()) continue;
    if (s.draft.size() < static_cast<size_t>(std::max(s.job.spec.n_min, 1))) {
      n_decode -= static_cast<uint32_t>(s.draft.size());
      s.draft.clear();
      continue;
    }
    const auto pos = static_cast<int64_t>(s.n_past);
    s.draft_row = static_cast<uint32_t>(batch_.size());
    for (size_t i = 0; i < s.draft.size(); ++i) {
      batch_.add(s.draft[i], s.seq, static_cast<int32_t>(pos + 1 + static_cast<int64_t>(i)), true);
      row_slot_.push_back(nullptr);  // sampled with the slot's first row
    }
    n_drafted += static_cast<uint32_t>(s.draft.size());
  }
  // Then prefill chunks, first come first served, under the step's token budget.
  uint32_t budget =
      std::max(options_.step_tokens > n_decode ? options_.step_tokens - n_decode : 0U, kMinPrefill);
  std::vector<Slot*>& order = prefill_order_;
  order.clear();
  for (Slot& s : slots_) {
    if (s.state == SlotState::kPrefill) order.push_back(&s);
  }
  std::sort(order.begin(), order.end(),
            [](const Slot* a, const Slot* b) { return a->admitted_at < b->admitted_at; });
  uint32_t n_prefill = 0;
  bool completes = false;  // some chunk ends its prompt (that row asks for logits)
  for (Slot* s : order) {
    if (budget == 0) break;
    const size_t left = s->tokens.size() - s->n_past;
    s->step_rows = static_cast<uint32_t>(std::min<size_t>(left, budget));
    completes = completes || s->step_rows == left;
    budget -= s->step_rows;
    n_prefill += s->step_rows;
  }
  const size_t n_rows_step = n_decode + n_prefill;
  if (n_rows_step == 0) {
    // Every running sequence is paused on its reader: wait a little for one to read
    // (readers do not signal the scheduler), or for new work.
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(5),
                 [this] { return !queue_.empty() || !embed_queue_.empty() || draining_; });
    return Ok{};
  }
  // decode() needs one logits row; a step of mid-prompt chunks only asks for the last
  // row's and drops it.
  const bool dummy_logits = n_decode == 0 && !completes;
  for (Slot* s : order) {
    for (uint32_t k = 0; k < s->step_rows; ++k) {
      const size_t pos = s->n_past + k;
      const bool last = pos + 1 == s->tokens.size();
      const bool want = last || (dummy_logits && batch_.size() + 1 == n_rows_step);
      batch_.add(s->tokens[pos], s->seq, static_cast<int32_t>(pos), want);
      row_slot_.push_back(last ? s : nullptr);
    }
  }

  if (viz_ != nullptr && viz_->want_profile() != profiling_) {
    profiling_ = !profiling_;
    engine_.set_profile_hook(profiling_ ? sched::ProfileHook([this](const sched::ExecProfile& p) {
      viz_->record_ops(p);
    })
                                        : sched::ProfileHook());
  }
  const uint64_t rebuilds_before = engine_.stats().rebuilds;
  const auto t0 = Clock::now();
  MINFER_TRY(const engine::BatchLogits logits, engine_.decode(batch_));
  const uint64_t dt = ns_since(t0);
  if (viz_ != nullptr) {
    const engine::EngineStats es = engine_.stats();
    viz_->record_step(n_prefill, n_decode, dt, es.graph_uid, es.rebuilds != rebuilds_before,
                      es.rebuilds, es.reuses);
  }
  const uint64_t n_rows = n_rows_step;
  metrics_.prefill_ns.fetch_add(dt * n_prefill / n_rows, std::memory_order_relaxed);
  metrics_.decode_ns.fetch_add(dt * n_decode / n_rows, std::memory_order_relaxed);
  metrics_.prefill_tokens.fetch_add(n_prefill, std::memory_order_relaxed);
  metrics_.decode_tokens.fetch_add(n_decode_rows, std::memory_order_relaxed);
  metrics_.steps.fetch_add(1, std::memory_order_relaxed);
  metrics_.spec_draft_tokens.fetch_add(n_drafted, std::memory_order_relaxed);

  // The rows are in the KV now.
  for (Slot& s : slots_) {
    if (s.decoding) {
      s.n_past++;
    } else if (s.state == SlotState::kPrefill) {
      s.n_past += s.step_rows;
      s.step_rows = 0;
    }
  }
  for (size_t r = 0; r < row_slot_.size(); ++r) {
    if (Slot* s = row_slot_[r]) sample_rows(*s, logits, r);
  }
  return Ok{};
}

void Scheduler::sample_rows(Slot& slot, const engine::BatchLogits& logits, size_t first) {
  Slot* s = &slot;
  // Only a decoding slot ran a draft this step (a prompt's last row has none).
  const bool drafted = s->decoding && first == s->row && !s->draft.empty();
  const size_t n_draft = drafted ? s->draft.size() : 0;
  if (drafted) metrics_.spec_drafts.fetch_add(1, std::memory_order_relaxed);
  JobEvent je;  // every token of this step, as one event
  for (size_t i = 0;; ++i) {
    // Row i: the last fed token's (i == 0), else draft[i - 1]'s; its sample goes at n_past.
    const size_t row = i == 0 ? first : s->draft_row + i - 1;
    auto ev_or = s->job.state->next(logits.row(row));
    if (!ev_or.ok()) {
      finish(*s, {.final = true, .error = ev_or.error().message}, false, Outcome::kFailed);
      return;
    }
    const engine::SeqEvent& ev = *ev_or;
    je.text.append(ev.text);
    je.reasoning.append(ev.reasoning);
    const bool generated = ev.token >= 0 && ev.stop != engine::SeqStop::kEog;
    if (generated) {
      metrics_.completion_tokens.fetch_add(1, std::memory_order_relaxed);
      const auto now = Clock::now();
      if (s->last_token_at == Clock::time_point{}) {
        metrics_.time_to_first_token.observe_ns(ns_between(s->job.arrived, now));
      } else {
        metrics_.inter_token_latency.observe_ns(ns_between(s->last_token_at, now));
      }
      s->last_token_at = now;
    }
    if (generated && s->job.state->options().top_logprobs >= 0) {
      LogprobEntry lp{
          .token = std::string(token_bytes_[ev.token]), .logprob = ev.logprob, .top = {}};
      for (const engine::TokenLogprob& t : ev.top) {
        lp.top.emplace_back(std::string(token_bytes_[t.token]), t.logprob);
      }
      je.logprobs.push_back(std::move(lp));
    }
    // Draft rows past n_past hold tokens the sequence does not have (rejected, or after
    // a stop): out of the KV, so the next rows land at their positions.
    const bool past_rows = i < n_draft;
    if (ev.feed && i < n_draft && ev.token == s->draft[i]) {
      // The sample agrees with the draft: that token is in the KV already.
      MINFER_CHECK(static_cast<size_t>(ev.pos) == s->n_past, "draft token at %zu, fed at %d",
                   s->n_past, ev.pos);
      metrics_.spec_accepted_tokens.fetch_add(1, std::memory_order_relaxed);
      s->tokens.push_back(ev.token);
      s->n_past++;
      continue;
    }
    if (drafted) {
      const auto kept = static_cast<int32_t>(i);  // draft tokens the samples agreed with
      const int32_t floor = std::max(s->job.spec.n_min, 1);
      s->draft_cap = kept == static_cast<int32_t>(n_draft)
                         ? std::min(s->job.spec.n_max, std::max(s->draft_cap, kept) * 2)
                         : std::max(floor, kept + 1);
    }
    if (past_rows) engine_.kv_cells()->seq_rm(s->seq, static_cast<kv::Pos>(s->n_past), -1);
    if (ev.feed) {
      s->tokens.push_back(ev.token);
      s->next_token = ev.token;
      s->state = SlotState::kDecode;
      if (!je.text.empty() || !je.reasoning.empty() || !je.logprobs.empty())
        s->job.stream->push(std::move(je));
    } else {
      je.final = true;
      je.stop = ev.stop;
      je.stop_string = s->job.state->stop_string();
      finish(*s, std::move(je), /*keep_cells=*/true, Outcome::kCompleted);
    }
    return;
  }
}

void Scheduler::finish(Slot& s, JobEvent ev, bool keep_cells, Outcome outcome) {
  if (s.job.state) {
    ev.n_prompt = s.job.state->n_prompt();
    ev.n_generated = s.job.state->n_generated();
    ev.n_reasoning = s.job.state->n_reasoning();
  }
  ev.n_reused = s.n_reused;
  if (outcome == Outcome::kCompleted) {
    metrics_.e2e_request_latency.observe_ns(ns_between(s.job.arrived, Clock::now()));
  }
  std::shared_ptr<JobStream> stream = std::move(s.job.stream);
  s.job = Job{};
  s.last_token_at = {};
  s.step_rows = 0;
  // The reservation's unused cells go back to the shared store; the cells written
  // stay with the sequence (a prefix cache) or are freed below.
  engine_.kv_cells()->release(s.seq);
  if (keep_cells) {
    // The cells stay as a prefix cache for later requests, until the slot is needed.
    s.tokens.resize(s.n_past);
    s.state = SlotState::kIdle;
    metrics_.slots_idle_cached.fetch_add(1, std::memory_order_relaxed);
  } else {
    engine_.kv_cells()->seq_rm(s.seq, -1, -1);
    s.tokens.clear();
    s.n_past = 0;
    s.state = SlotState::kEmpty;
    metrics_.kv_cells_used.store(engine_.kv_cells()->n_used(), std::memory_order_relaxed);
  }
  // Counters first, then the event: a client that has its answer sees them updated.
  metrics_.running.fetch_sub(1, std::memory_order_relaxed);
  switch (outcome) {
    case Outcome::kCompleted:
      metrics_.requests_completed.fetch_add(1, std::memory_order_relaxed);
      (ev.stop == engine::SeqStop::kEog || ev.stop == engine::SeqStop::kStopString
           ? metrics_.finished_stop
           : metrics_.finished_length)
          .fetch_add(1, std::memory_order_relaxed);
      break;
    case Outcome::kCancelled:
      metrics_.requests_cancelled.fetch_add(1, std::memory_order_relaxed);
      break;
    case Outcome::kFailed:
      metrics_.requests_failed.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  if (stream) stream->push(std::move(ev));
}

void Scheduler::fail_batch(const std::string& message) {
  std::fprintf(stderr, "[server] forward failed: %s\n", message.c_str());
  for (Slot& s : slots_) {
    if (!busy(s)) continue;
    finish(s, {.final = true, .error = "the forward failed: " + message}, false, Outcome::kFailed);
  }
}

void Scheduler::publish_blocks() {
  if (!kv_blocks_) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    cached_[i] = std::span<const engine::TokenId>(slots_[i].tokens).first(slots_[i].n_past);
  }
  kv_blocks_->update(cached_, kv_changes_);
  metrics_.kv_blocks.store(kv_blocks_->n_blocks(), std::memory_order_relaxed);
  if (kv_changes_.empty()) return;
  kv_events_->publish(std::move(kv_changes_));
  kv_changes_.clear();
}

void Scheduler::publish_kv() {
  const kv::KvCells& kv = *engine_.kv_cells();
  uint64_t shared = 0;
  const bool per_seq = viz_ != nullptr;
  std::vector<SeqKv> seqs(per_seq ? slots_.size() : 0);
  static_assert(kv::kMaxSeqs <= 64, "the holder mask below has a bit per slot");
  for (uint32_t c = 0; c < kv.n_ctx(); ++c) {
    if (kv.pos(static_cast<int32_t>(c)) < 0) continue;
    uint64_t held = 0;  // bit i: slot i's sequence reads the cell (slots <= kv::kMaxSeqs = 64)
    uint32_t readers = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!kv.has_seq(static_cast<int32_t>(c), slots_[i].seq)) continue;
      held |= uint64_t{1} << i;
      readers++;
    }
    shared += readers > 1 ? 1U : 0U;
    if (!per_seq) continue;
    for (uint64_t m = held; m != 0; m &= m - 1) {
      SeqKv& q = seqs[static_cast<size_t>(std::countr_zero(m))];
      q.cells++;
      q.shared += readers > 1 ? 1U : 0U;
    }
  }
  metrics_.kv_cells_used.store(kv.n_used(), std::memory_order_relaxed);
  metrics_.kv_cells_shared.store(shared, std::memory_order_relaxed);
  if (!per_seq) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    seqs[i].seq = s.seq;
    seqs[i].state = s.state == SlotState::kEmpty     ? "empty"
                    : s.state == SlotState::kIdle    ? "idle"
                    : s.state == SlotState::kPrefill ? "prefill"
                                                     : "decode";
    seqs[i].n_past = static_cast<uint32_t>(s.n_past);
    seqs[i].generated = s.job.state ? s.job.state->n_generated() : 0;
  }
  viz_->record_kv(std::move(seqs), kv.n_ctx(), kv.n_used(), static_cast<uint32_t>(shared));
}

}  // namespace minfer::server
