// Stage 17 (HTTP): the request path the generating routes share — a parsed request →
// prompt tokens → sequence state → scheduler; its events collected whole or streamed as
// server-sent events in the route's dialect (server/routes.h).
// Invariant: every dialect reaches the engine through submit_completion only.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "server/constraint.h"
#include "server/routes.h"

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;

// The client left mid-stream: the scheduler frees the slot at its next step and sends a
// final event with the counts so far, which the request's log line reports under
// status 499 (nginx's "client closed request"). A job cancelled while still queued
// gets no event; its line then says what was known (the prompt, no completion), and
// the event returned is a made-up final one.
JobEvent client_gone(ChoiceStreams& choices) {
  choices.cancel();
  request_log().status = 499;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  JobEvent ev;
  while (!choices.done() && Clock::now() < deadline) {
    (void)choices.pop(ev, std::chrono::milliseconds(50));
  }
  if (choices.done()) {
    JobEvent total = choices.total();
    note_counts(total);
    return total;
  }
  return JobEvent{.final = true, .error = "cancelled", .error_status = 499};
}

// Everything a streaming response needs across content-provider calls.
struct StreamState {
  explicit StreamState(std::vector<std::shared_ptr<JobStream>> streams)
      : choices(std::move(streams)) {}
  ChoiceStreams choices;
  std::unique_ptr<SseWriter> writer;
  bool sent_head = false;
  bool finished = false;                         // every choice's final event written
  std::atomic<int32_t>* open_streams = nullptr;  // ServerContext::open_streams
  std::chrono::milliseconds stall_timeout{0};    // --stream-timeout
};

}  // namespace

ChoiceStreams::ChoiceStreams(std::vector<std::shared_ptr<JobStream>> streams)
    : streams_(std::move(streams)), finals_(streams_.size()), finished_(streams_.size(), false) {}

bool ChoiceStreams::take(size_t i, JobEvent& ev, std::chrono::milliseconds timeout) {
  if (finished_[i] || !streams_[i]->pop(ev, timeout)) return false;
  ev.choice = static_cast<int32_t>(i);
  next_ = (i + 1) % streams_.size();
  if (ev.final) {
    finished_[i] = true;
    ++n_done_;
    finals_[i] = JobEvent{.final = true,
                          .stop = ev.stop,
                          .error = ev.error,
                          .error_status = ev.error_status,
                          .n_prompt = ev.n_prompt,
                          .n_generated = ev.n_generated,
                          .n_reasoning = ev.n_reasoning,
                          .n_reused = ev.n_reused,
                          .choice = ev.choice};
  }
  return true;
}

bool ChoiceStreams::pop(JobEvent& ev, std::chrono::milliseconds timeout) {
  if (streams_.size() == 1) return take(0, ev, timeout);
  // Each unfinished choice looked at in turn without waiting; then a short wait on one,
  // until the timeout (JobStream has no wait on several).
  constexpr auto kWait = std::chrono::milliseconds(2);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    for (size_t k = 0; k < streams_.size(); ++k) {
      if (take((next_ + k) % streams_.size(), ev, std::chrono::milliseconds(0))) return true;
    }
    if (done() || Clock::now() >= deadline) return false;
    for (size_t k = 0; k < streams_.size(); ++k) {
      const size_t i = (next_ + k) % streams_.size();
      if (finished_[i]) continue;
      if (take(i, ev, kWait)) return true;
      break;
    }
  }
}

void ChoiceStreams::cancel() {
  for (auto& s : streams_) s->cancel();
}

JobEvent ChoiceStreams::total() const {
  JobEvent t{.final = true};
  bool first = true;
  for (size_t i = 0; i < finals_.size(); ++i) {
    if (!finished_[i]) continue;
    const JobEvent& f = finals_[i];
    if (first) {
      t.stop = f.stop;
      t.n_prompt = f.n_prompt;
      t.n_reused = f.n_reused;
      first = false;
    }
    if (t.error.empty() && !f.error.empty()) {
      t.error = f.error;
      t.error_status = f.error_status;
    }
    t.n_generated += f.n_generated;
    t.n_reasoning += f.n_reasoning;
  }
  return t;
}

void note_counts(const JobEvent& ev) {
  RequestLog& log = request_log();
  log.n_prompt = ev.n_prompt;
  log.n_generated = ev.n_generated;
  log.n_reused = ev.n_reused;
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                   std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

namespace {

// A thinking template's block for this request (chat::plan_thinking): tracked, split
// as asked, bounded by the request's budget or the server's.
std::optional<ApiError> plan_reasoning(ServerContext& ctx, const CompletionRequest& r,
                                       std::string& text, engine::ReasoningOptions& out) {
  const int32_t budget = r.reasoning_budget.value_or(ctx.options.reasoning_budget);
  const chat::ThinkingPlan plan =
      chat::plan_thinking(ctx.renderer.source(), text, budget, !r.grammar.empty());
  auto options = chat::reasoning_options(
      plan, ctx.tok, r.reasoning_split.value_or(ctx.options.reasoning_split), budget);
  if (!options.ok()) return bad_request(options.error().message);
  out = std::move(*options);
  return {};
}

}  // namespace

std::string request_scoped_id(const char* prefix) {
  const std::string& id = request_log().request_id;
  return id.empty() ? random_id(prefix) : prefix + id;
}

std::optional<ApiError> render_chat_prompt(ServerContext& ctx, const CompletionRequest& r,
                                           ToolFormat format, std::string& out) {
  // A last assistant message (without tool calls) is a prefill, continued rather than
  // answered (llama-server's and Anthropic's behaviour): the turns before it rendered
  // with the generation prompt, then its content as the reply's start. A template
  // renders a closed assistant turn with its end-of-turn; this way none follows the
  // prefill whatever the template, and the reply holds only the continuation.
  const json* last = r.messages_json.empty() ? nullptr : &r.messages_json.back();
  const bool prefill = last != nullptr && !r.messages.empty() &&
                       r.messages.back().role == "assistant" &&
                       field(*last, "tool_calls") == nullptr;
  std::span<const chat::Message> messages(r.messages);
  json messages_json = r.messages_json;
  if (prefill) {
    messages = messages.first(messages.size() - 1);
    messages_json.erase(messages_json.end() - 1);
  }
  auto rendered =
      r.tools.active() || r.tool_history
          ? render_tool_prompt(ctx.renderer, messages_json, r.tools, format, r.chat_template_kwargs)
      : r.chat_template_kwargs.empty()
          ? ctx.renderer.render(messages, /*add_generation_prompt=*/true)
          : ctx.renderer.render_json(messages_json, nullptr, true, r.chat_template_kwargs);
  if (!rendered.ok()) {
    return bad_request("the chat template cannot render these messages: " +
                       rendered.error().message);
  }
  out = std::move(*rendered);
  if (prefill) out += r.messages.back().content;
  return {};
}

std::optional<ApiError> prompt_tokens(ServerContext& ctx, const CompletionRequest& r,
                                      ToolFormat format, std::vector<engine::TokenId>& out,
                                      engine::ReasoningOptions* reasoning) {
  const bool chat = r.endpoint == Endpoint::kChat;
  if (!chat && !r.prompt) {
    out.assign(r.prompt_tokens.begin(), r.prompt_tokens.end());
    return {};
  }
  std::string text;
  if (chat) {
    if (auto e = render_chat_prompt(ctx, r, format, text)) return e;
    if (reasoning != nullptr) {
      if (auto e = plan_reasoning(ctx, r, text, *reasoning)) return e;
    }
  } else {
    text = *r.prompt;
  }
  auto toks = chat::tokenize_prompt(ctx.tok, text);
  if (!toks.ok()) return bad_request("cannot tokenize the prompt: " + toks.error().message);
  out = std::move(*toks);
  return {};
}

const char* finish_reason(engine::SeqStop stop) {
  switch (stop) {
    case engine::SeqStop::kEog:
    case engine::SeqStop::kStopString:
      return "stop";
    default:
      return "length";
  }
}

std::optional<ApiError> submit_refusal(ServerContext& ctx, SubmitResult result) {
  switch (result) {
    case SubmitResult::kQueued:
      return std::nullopt;
    case SubmitResult::kQueueFull:
      ctx.metrics.requests_queue_full.fetch_add(1, std::memory_order_relaxed);
      return ApiError{.status = 429,
                      .type = "rate_limit_error",
                      .message = "every slot is busy and the queue is full; retry later"};
    case SubmitResult::kDraining:
      break;
  }
  return ApiError{
      .status = 503, .type = "unavailable_error", .message = "the server is shutting down"};
}

std::optional<ApiError> submit_completion(ServerContext& ctx, CompletionRequest& r,
                                          SubmittedJob& out) {
  auto reject = [&](ApiError e) -> std::optional<ApiError> {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return e;
  };
  if (ctx.engine.hparams().embeddings_out) {
    return reject(bad_request(
        fmt::format("the served model ({}) is an embedding model: it cannot generate text; use "
                    "/v1/embeddings",
                    ctx.engine.hparams().arch)));
  }
  // Tools: the template's call format; required / named choice (and the generic
  // format) become the request's grammar.
  out.format = tool_format(ctx.renderer.source());
  if (r.endpoint == Endpoint::kChat && r.tools.active()) {
    auto g = tool_grammar(r.tools, out.format);
    if (!g.ok()) return reject(bad_request("tools: " + g.error().message));
    if (!g->empty()) {
      if (!r.grammar.empty()) {
        return reject(bad_request(fmt::format(
            "tools: the tool call format ({}) constrains the output here; it cannot be combined "
            "with 'grammar', 'json_schema' or a JSON response_format",
            tool_format_name(out.format))));
      }
      r.grammar = std::move(*g);
    }
  }
  std::vector<engine::TokenId> prompt;
  if (auto e = prompt_tokens(ctx, r, out.format, prompt, &r.seq.reasoning)) return reject(*e);
  const uint32_t server_n_ctx = ctx.scheduler.options().n_ctx;
  const uint32_t n_ctx = r.n_ctx > 0 ? std::min(r.n_ctx, server_n_ctx) : server_n_ctx;
  if (prompt.empty()) return reject(bad_request("the prompt has no tokens"));
  const uint32_t n_slots = ctx.scheduler.options().n_slots;
  if (r.n < 1 || static_cast<uint32_t>(r.n) > n_slots) {
    return reject(bad_request(fmt::format(
        "'n' is {}; this server decodes at most {} choices of a request side by side (its "
        "--slots)",
        r.n, n_slots)));
  }
  if (prompt.size() >= n_ctx) {
    return reject(ApiError{
        .status = 400,
        .type = "exceed_context_size_error",
        .message = fmt::format("the prompt has {} tokens; a request may use {} positions "
                               "(prompt + completion), see {}",
                               prompt.size(), n_ctx,
                               n_ctx < server_n_ctx ? "num_ctx" : "the server's --n-ctx or -c")});
  }
  // Speculative decoding: the request's speculative.* over the server's defaults. A
  // request on a server started without --spec-ngram or -md opts in with
  // speculative.n_max > 0 and drafts with n-grams of kRequestNgram tokens.
  JobSpec spec;
  {
    constexpr int32_t kRequestNgram = 3;
    const engine::SpecOptions& d = ctx.scheduler.options().spec;
    const int32_t n_max = r.spec_n_max.value_or(d.enabled() ? d.n_max : 0);
    if (n_max > 0) {
      if (r.spec_n_min && *r.spec_n_min > n_max) {
        return reject(bad_request(fmt::format(
            "'speculative.n_min' ({}) is above the draft's maximum {} (the server's --draft-max "
            "or 'speculative.n_max'): no draft would be run",
            *r.spec_n_min, n_max)));
      }
      const bool model = d.draft != nullptr;
      spec = JobSpec{.ngram = model ? 0 : (d.ngram > 0 ? d.ngram : kRequestNgram),
                     .model = model,
                     .n_max = n_max,
                     .n_min = std::min(r.spec_n_min.value_or(d.n_min), n_max),
                     .p_min = r.spec_p_min.value_or(d.p_min)};
    }
  }
  out.n_prompt = static_cast<int32_t>(prompt.size());
  request_log().n_prompt = out.n_prompt;
  r.seq.n_ctx = n_ctx;
  std::unique_ptr<engine::TokenConstraint> constraint;
  if (!r.grammar.empty()) {
    auto c = make_grammar_constraint(r.grammar, ctx.vocab);
    if (!c.ok()) return reject(bad_request("invalid grammar: " + c.error().message));
    constraint = std::move(*c);
  }
  // Choice i is its own sequence seeded seed + i: a seeded request is reproducible, and
  // its choice 0 is the n = 1 answer. Each gets its own constraint (grammar state) and
  // all are built before any is queued, so a bad one queues none.
  std::vector<Job> jobs;
  for (int32_t i = 0; i < r.n; ++i) {
    std::unique_ptr<engine::TokenConstraint> own;
    if (i == 0) {
      own = std::move(constraint);
    } else if (!r.grammar.empty()) {
      auto c = make_grammar_constraint(r.grammar, ctx.vocab);
      if (!c.ok()) return reject(bad_request("invalid grammar: " + c.error().message));
      own = std::move(*c);
    }
    engine::SequenceOptions seq = r.seq;
    seq.sampler.seed = r.seq.sampler.seed + static_cast<uint64_t>(i);
    auto state =
        engine::SequenceState::create(ctx.tok, ctx.scheduler.token_bytes(), seq, std::move(own));
    if (!state.ok()) return reject(bad_request(state.error().message));
    jobs.push_back(Job{.prompt = prompt, .spec = spec, .state = std::move(*state)});
  }
  // Choice 0 first; the others once its prompt is prefilled (its first event is there):
  // admitted then, they share its prompt cells copy-on-write (Scheduler::admit) instead
  // of each prefilling the prompt side by side.
  out.choices.clear();
  auto cancel_all = [&] {
    for (auto& s : out.choices) s->cancel();
    out.choices.clear();
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (i == 1) {
      http::ClientLink* client = request_log().client;
      while (!out.choices[0]->wait(std::chrono::milliseconds(50))) {
        if (client != nullptr && client->gone()) {
          cancel_all();
          request_log().status = 499;
          return ApiError{.status = 499, .type = "cancelled", .message = "the client left"};
        }
      }
    }
    auto stream = std::make_shared<JobStream>();
    jobs[i].stream = stream;
    if (auto e = submit_refusal(ctx, ctx.scheduler.submit(std::move(jobs[i])))) {
      cancel_all();  // all or none
      return e;
    }
    out.choices.push_back(std::move(stream));
  }
  out.stream = out.choices.front();
  ctx.metrics.requests_total.fetch_add(1, std::memory_order_relaxed);
  return {};
}

JobEvent collect_choices(ChoiceStreams& choices,
                         const std::function<void(const JobEvent&)>& on_event) {
  // Looked for on a clock, not only when no event comes: a fast generation never
  // leaves the pop waiting.
  constexpr auto kClientPoll = std::chrono::milliseconds(50);
  http::ClientLink* client = request_log().client;
  auto next_look = Clock::now() + kClientPoll;
  JobEvent ev;
  while (!choices.done()) {
    if (choices.pop(ev, kClientPoll)) on_event(ev);
    if (choices.done()) break;
    if (Clock::now() >= next_look) {
      if (client != nullptr && client->gone()) return client_gone(choices);
      next_look = Clock::now() + kClientPoll;
    }
  }
  JobEvent total = choices.total();
  note_counts(total);
  return total;
}

JobEvent collect_events(JobStream& stream, const std::function<void(const JobEvent&)>& on_event) {
  // Not owned here: the caller's stream outlives the call.
  ChoiceStreams one({std::shared_ptr<JobStream>(&stream, [](JobStream*) {})});
  JobEvent last;
  JobEvent total = collect_choices(one, [&](const JobEvent& ev) {
    if (ev.final) last = ev;
    on_event(ev);
  });
  // The final event as it came (its stop string and text), the counts noted.
  return last.final ? last : total;
}

void reply_stream(ServerContext& ctx, http::Response& res, std::shared_ptr<JobStream> stream,
                  std::unique_ptr<SseWriter> writer, const char* content_type) {
  reply_stream(ctx, res, std::vector<std::shared_ptr<JobStream>>{std::move(stream)},
               std::move(writer), content_type);
}

void reply_stream(ServerContext& ctx, http::Response& res,
                  std::vector<std::shared_ptr<JobStream>> streams,
                  std::unique_ptr<SseWriter> writer, const char* content_type) {
  auto st = std::make_shared<StreamState>(std::move(streams));
  st->writer = std::move(writer);
  st->open_streams = ctx.open_streams;
  st->stall_timeout = std::chrono::seconds(ctx.options.stream_timeout_s);
  res.set_header("Cache-Control", "no-cache");
  // Counted until the response is gone (the release runs when the transport drops it,
  // after the last chunk or a failed write).
  if (st->open_streams != nullptr) st->open_streams->fetch_add(1, std::memory_order_acq_rel);
  res.set_chunked(
      content_type,
      [st](http::StreamSink& sink) {
        if (!st->sent_head) {
          st->sent_head = true;
          const std::string f = st->writer->head();
          if (!f.empty() && !sink.write(f)) {
            client_gone(st->choices);
            return false;
          }
          return true;
        }
        JobEvent ev;
        if (!st->choices.pop(ev, std::chrono::milliseconds(200))) {
          if (sink.writable()) return true;
          client_gone(st->choices);
          return false;
        }
        const std::string frames = st->writer->frames(ev);
        // The stream ends with the last choice's final event.
        const bool last = ev.final && st->choices.done();
        if (last) note_counts(st->choices.size() == 1 ? ev : st->choices.total());
        // A client that stops reading: its frames wait here once kMaxUnsent bytes are
        // unsent (the scheduler pauses the sequence once the stream is full too), until
        // it has taken no bytes for --stream-timeout; then the job is cancelled and the
        // connection closed.
        constexpr size_t kMaxUnsent = size_t{64} << 10;
        if (!frames.empty() && !last && !sink.drained_within(kMaxUnsent, st->stall_timeout)) {
          std::fprintf(stderr, "[server] a stream took no bytes for %lld s: cancelled\n",
                       static_cast<long long>(st->stall_timeout.count() / 1000));
          client_gone(st->choices);
          return false;
        }
        if (!frames.empty() && !sink.write(frames)) {
          if (last) {
            request_log().status = 499;  // the counts are noted: the request had ended
          } else {
            client_gone(st->choices);
          }
          return false;
        }
        if (last) {
          st->finished = true;
          sink.done();
        }
        return true;
      },
      [st](bool /*finished*/) {
        if (!st->finished) st->choices.cancel();
        if (st->open_streams != nullptr) st->open_streams->fetch_sub(1, std::memory_order_acq_rel);
      });
}

}  // namespace minfer::server
