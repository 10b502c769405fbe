// Stage 17 (HTTP): the request scheduler — one inference thread owns the Engine and
// runs the step loop of continuous batching (ARCHITECTURE §2b "Server").
// Invariants: only the inference thread touches the engine and the KV cells; each
// step is one engine.decode(batch) carrying a decode row of every running sequence
// first (a speculating one's draft after it, as rows of its sequence), then prefill
// chunks of admitting sequences under the step token budget; draft rows the samples
// did not keep leave the KV before the next step; a
// request never fails for lack of cells (n_seq_max = slots and every sequence stays
// below n_ctx positions, so used cells <= slots × n_ctx, the arena); a cancelled
// request's cells are freed at the start of the next step; a sequence whose stream is
// full (JobStream) sits out steps, never blocking the others.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "server/kv_events.h"
#include "server/metrics.h"
#include "server/viz.h"

namespace minfer::server {

struct LogprobEntry {
  std::string token;  // the token's bytes (may be a partial UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

// One message from the inference thread to the request's HTTP thread.
struct JobEvent {
  std::string text;  // complete UTF-8, no stop-string prefix
  // A thinking block's text (complete UTF-8), split from `text` when the request asks.
  std::string reasoning;
  std::vector<LogprobEntry> logprobs;
  bool final = false;
  engine::SeqStop stop = engine::SeqStop::kNone;
  std::string stop_string;  // stop kStopString: which of the request's stop strings
  std::string error;        // final with an error: the request failed (message for the client)
  int error_status = 500;   // its HTTP status: 503 when the server is shutting down
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  int32_t n_reasoning = 0;  // of n_generated, sampled inside a thinking block
  int32_t n_reused = 0;     // prompt tokens taken from cached cells
  // Which of the request's choices (n > 1) the event is of: set where the HTTP thread
  // reads them as one stream (ChoiceStreams); the scheduler knows no choices.
  int32_t choice = 0;
};

// The channel between one request's HTTP thread and the inference thread.
// Bounded: once the events not yet popped hold `max_pending_bytes` of text and logprob
// tokens, full() is true and the scheduler runs no step of this sequence until the
// reader pops (a client that stops reading costs no memory past the bound; the HTTP
// writer cancels it after --stream-timeout). push() itself never blocks or refuses: the
// inference thread never waits on one reader, and a final event always gets through.
class JobStream {
 public:
  static constexpr size_t kMaxPendingBytes = size_t{1} << 20;
  explicit JobStream(size_t max_pending_bytes = kMaxPendingBytes)
      : max_pending_(max_pending_bytes) {}
  void push(JobEvent ev);
  // Waits up to `timeout` for an event; false when none came.
  bool pop(JobEvent& out, std::chrono::milliseconds timeout);
  // Waits up to `timeout` until an event is there, leaving it for pop; false when none.
  bool wait(std::chrono::milliseconds timeout);
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  bool full() const { return pending_bytes() >= max_pending_; }
  size_t pending_bytes() const { return pending_.load(std::memory_order_relaxed); }

 private:
  static size_t bytes_of(const JobEvent& ev);
  const size_t max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
  std::atomic<size_t> pending_{0};
  std::atomic<bool> cancelled_{false};
};

// Speculative decoding of one request (prompt lookup, engine/speculative.h): each step
// its pending token and up to n_max tokens drafted from its history run as rows of its
// sequence; the rows are sampled in order while they agree with the draft. n_max 0: off.
// With the server's draft model (-md) instead, the draft is that model's most likely
// tokens while their probability is at least p_min.
struct JobSpec {
  int32_t ngram = 0;    // the n-gram matched in the history
  bool model = false;   // the draft model drafts (ngram unused)
  int32_t n_max = 0;    // tokens drafted at most per step
  int32_t n_min = 0;    // a shorter draft is not run
  float p_min = 0.75f;  // the draft model's probability floor
  bool enabled() const { return (ngram > 0 || model) && n_max > 0; }
};

struct Job {
  std::vector<engine::TokenId> prompt;
  JobSpec spec;
  std::unique_ptr<engine::SequenceState> state;  // created (validated) on the HTTP thread
  std::shared_ptr<JobStream> stream;
  std::chrono::steady_clock::time_point arrived;  // set by Scheduler::submit
};

// An embedding request (encoder models): its inputs, validated on the HTTP thread (each
// non-empty, within n_ctx, ids inside the vocabulary), embedded on the inference thread
// between steps; the vectors or the error come back through `done`.
struct EmbedJob {
  std::vector<std::vector<engine::TokenId>> inputs;
  engine::EmbedOptions options;
  std::vector<std::vector<int32_t>> token_types;  // per input, or empty: every token type 0
  std::promise<Result<engine::Embeddings>> done;
};

// One slot as GET /slots reports it (read on the inference thread between steps).
struct SlotInfo {
  uint32_t id = 0;
  bool processing = false;  // a request runs on it (prefill or decode)
  uint32_t n_cached = 0;    // tokens whose cells the slot holds (the prefix cache when idle)
  int32_t n_generated = 0;  // processing: tokens generated so far
  int64_t id_task = -1;     // processing: the request's admission number; -1 when idle
};

// A request about the slots, run by the inference thread between steps (the scheduler
// owns the KV cells): list them; erase one idle slot's cached cells; save them (its
// tokens and KV rows) to a file in the session format (chat/session_file.h), or restore
// such a file as that slot's prefix cache.
struct SlotCommand {
  enum class Kind : uint8_t { kList, kErase, kSave, kRestore };
  Kind kind = Kind::kList;
  uint32_t slot = 0;  // all but kList
  std::string path;   // kSave, kRestore
  struct Reply {
    // 404 no such slot, 409 the slot is processing a request, 400 a file that cannot be
    // restored (what differs is named), 500 a file that cannot be written.
    int status = 200;
    std::string error;
    std::vector<SlotInfo> slots;  // kList: every slot
    uint32_t n_tokens = 0;        // tokens erased, saved or restored
  };
  std::promise<Reply> done;
};

struct SchedulerOptions {
  uint32_t n_slots = 4;        // sequences decoded together
  uint32_t n_ctx = 2048;       // positions one request may use
  uint32_t max_queue = 64;     // waiting requests past the slots; more → 429
  uint32_t step_tokens = 512;  // rows per step (decode rows + prefill chunks)
  KvEventsOptions kv_events;   // endpoint empty: no events
  // Speculative decoding's defaults for a request that does not choose (--spec-ngram,
  // --draft-max, --draft-min, --draft-p-min; ngram 0: off unless a request opts in).
  // `draft`: the draft model's context (-md), sized by start() like the engine's (one
  // sequence per slot); null: prompt lookup.
  engine::SpecOptions spec;
};

enum class SubmitResult : uint8_t { kQueued, kQueueFull, kDraining };

class Scheduler {
 public:
  // `viz` (optional): the engine view's state, fed by the inference thread.
  Scheduler(engine::Context& engine, const SchedulerOptions& options, Metrics& metrics,
            VizState* viz = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Sizes the KV arena (slots × n_ctx cells) and starts the inference thread.
  Status start();
  SubmitResult submit(Job job);
  // Queues an embedding request; the inference thread runs every queued one as soon as
  // it is free, the inputs of several requests packed into the same decodes (an input's
  // vector does not depend on its neighbours: engine/embed.h).
  SubmitResult submit_embed(std::shared_ptr<EmbedJob> job);
  // Queues a slot command; the inference thread answers it between steps. kDraining once
  // the scheduler has stopped (nothing would answer).
  SubmitResult submit_slot_command(std::shared_ptr<SlotCommand> cmd);
  // Stops accepting; the loop finishes what runs and what is queued, cancelling what is
  // left at `deadline`, then exits. A later call may only bring the deadline closer.
  // join() waits for it.
  void drain(std::chrono::steady_clock::time_point deadline);
  // The inference thread has left its loop: every job it held got its final event.
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  void join();
  const SchedulerOptions& options() const { return options_; }
  // The model's token bytes, shared by every request's SequenceState.
  const engine::TokenBytes& token_bytes() const { return token_bytes_; }

 private:
  enum class SlotState : uint8_t { kEmpty, kIdle, kPrefill, kDecode };
  struct Slot {
    engine::SeqId seq = 0;
    SlotState state = SlotState::kEmpty;
    std::vector<engine::TokenId> tokens;  // tokens of this sequence; [0, n_past) are in the KV
    size_t n_past = 0;
    uint64_t last_used = 0;  // admission tick, for LRU eviction of idle caches
    Job job;
    engine::TokenId next_token = 0;      // kDecode: the row to run
    std::vector<engine::TokenId> draft;  // kDecode: tokens drafted after it this step
    uint32_t row = 0;                    // the batch row of next_token (decoding)
    uint32_t draft_row = 0;              // the batch row of draft[0]
    // Tokens the next draft may have (1..spec.n_max): one more than the last draft's
    // agreeing tokens after a miss, doubled after a draft kept whole. A miss costs the
    // batch its rows; the length never changes the tokens (sample_rows).
    int32_t draft_cap = 0;
    // The draft model: the tokens in its KV for this sequence (positions 0..), and the
    // draft this step may have (draft_with_model).
    std::vector<engine::TokenId> draft_kv;
    int32_t draft_want = 0;
    bool draft_done = false;
    int32_t n_reused = 0;
    uint64_t admitted_at = 0;  // admission order: prefill chunks go first come first served
    uint32_t step_rows = 0;    // kPrefill: prompt rows in the batch being run
    bool decoding = false;     // kDecode: its row is in the batch being run (not paused)
    // The last generated token's time (the latency histograms); epoch: none yet.
    std::chrono::steady_clock::time_point last_token_at;
  };

  void loop();
  void run_embeds(std::vector<std::shared_ptr<EmbedJob>>& jobs);
  void run_slot_command(SlotCommand& cmd);
  void save_slot(Slot& slot, const std::string& path, SlotCommand::Reply& reply);
  void restore_slot(Slot& slot, const std::string& path, SlotCommand::Reply& reply);
  void empty_slot(Slot& slot);
  SlotInfo slot_info(size_t i) const;
  void admit(Job job);
  void cancel_gone();
  Status step();
  enum class Outcome : uint8_t { kCompleted, kCancelled, kFailed };
  void finish(Slot& slot, JobEvent ev, bool keep_cells, Outcome outcome);
  // Samples the slot's rows in order — `first` (the last fed token's), then its draft's
  // while the samples agree with it — emits the tokens as one event, removes the draft
  // rows past the last agreeing one from the KV, and finishes the request at a stop.
  void sample_rows(Slot& slot, const engine::BatchLogits& logits, size_t first);
  // The draft model's drafts of the slots in drafting_ (each up to its draft_want):
  // their histories caught up in its KV in chunks of step_tokens rows, then one forward
  // per drafted token with a row of every slot still drafting.
  Status draft_with_model();
  void fail_batch(const std::string& message);
  void publish_kv();
  // KV events: brings the block index to every slot's cached tokens ([0, n_past) of
  // `tokens`) and queues what changed. Called at the end of every loop iteration, so
  // whatever changes a slot's tokens or n_past on the inference thread (admission,
  // truncation, eviction, release, and any later code that edits a slot) is published
  // without a call of its own.
  void publish_blocks();
  bool busy(const Slot& s) const {
    return s.state == SlotState::kPrefill || s.state == SlotState::kDecode;
  }

  engine::Context& engine_;
  SchedulerOptions options_;
  Metrics& metrics_;
  VizState* viz_ = nullptr;
  bool profiling_ = false;  // the engine's profile hook is set (a viz client watches)
  const engine::TokenBytes& token_bytes_;  // the model's (LoadedModel::token_bytes)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::deque<std::shared_ptr<EmbedJob>> embed_queue_;
  std::deque<std::shared_ptr<SlotCommand>> slot_queue_;
  bool draining_ = false;
  std::atomic<bool> stopped_{false};
  std::chrono::steady_clock::time_point deadline_{};
  std::thread thread_;

  // Inference thread only.
  std::vector<Slot> slots_;
  engine::Batch batch_;
  std::vector<Slot*> row_slot_;  // per batch row: its slot when the row asked for logits
  std::vector<Slot*> prefill_order_;
  engine::Batch draft_batch_;      // the draft model's rows
  std::vector<Slot*> drafting_;    // slots the draft model drafts for this step
  std::vector<Slot*> draft_rows_;  // per draft_batch_ row: the slot whose draft it extends
  uint64_t tick_ = 0;
  // KV events (null when off).
  std::unique_ptr<KvEventPublisher> kv_events_;
  std::unique_ptr<KvBlockIndex> kv_blocks_;
  std::vector<std::span<const engine::TokenId>> cached_;
  std::vector<KvEvent> kv_changes_;
};

}  // namespace minfer::server
