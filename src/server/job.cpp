// Stage 17 (HTTP): the request path the generating routes share — a parsed request →
// prompt tokens → sequence state → scheduler; its events collected whole or streamed as
// server-sent events in the route's dialect (server/routes.h).
// Invariant: every dialect reaches the engine through submit_completion only.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "server/connection.h"
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
JobEvent client_gone(JobStream& stream) {
  stream.cancel();
  request_log().status = 499;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  JobEvent ev;
  while (Clock::now() < deadline) {
    if (stream.pop(ev, std::chrono::milliseconds(50)) && ev.final) {
      note_counts(ev);
      return ev;
    }
  }
  return JobEvent{.final = true, .error = "cancelled", .error_status = 499};
}

// Everything a streaming response needs across content-provider calls.
struct StreamState {
  std::shared_ptr<JobStream> stream;
  std::unique_ptr<SseWriter> writer;
  bool sent_head = false;
  bool finished = false;
  std::atomic<int32_t>* open_streams = nullptr;  // ServerContext::open_streams
  ClientWatch client{nullptr};
  std::chrono::milliseconds stall_timeout{0};  // --stream-timeout
};

}  // namespace

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
  out = {};
  if (!plan.track) return {};
  auto close = ctx.tok.encode(chat::kThinkingClose, {.add_special = false, .parse_special = true});
  if (!close.ok()) {
    return bad_request("cannot tokenize the thinking block's close tag: " + close.error().message);
  }
  out = {.track = true,
         .split = r.reasoning_split.value_or(ctx.options.reasoning_split),
         .forced_open = plan.forced_open,
         .budget = budget,
         .close_tokens = std::move(*close)};
  return {};
}

}  // namespace

std::string request_scoped_id(const char* prefix) {
  const std::string& id = request_log().request_id;
  return id.empty() ? random_id(prefix) : prefix + id;
}

std::optional<ApiError> render_chat_prompt(ServerContext& ctx, const CompletionRequest& r,
                                           ToolFormat format, std::string& out) {
  auto rendered = r.tools.active() || r.tool_history
                      ? render_tool_prompt(ctx.renderer, r.messages_json, r.tools, format)
                      : ctx.renderer.render(r.messages, /*add_generation_prompt=*/true);
  if (!rendered.ok()) {
    return bad_request("the chat template cannot render these messages: " +
                       rendered.error().message);
  }
  out = std::move(*rendered);
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
  if (prompt.size() >= n_ctx) {
    return reject(ApiError{
        .status = 400,
        .type = "exceed_context_size_error",
        .message =
            fmt::format("the prompt has {} tokens; a request may use {} positions "
                        "(prompt + completion), see {}",
                        prompt.size(), n_ctx, n_ctx < server_n_ctx ? "num_ctx" : "--n-ctx")});
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
  auto state = engine::SequenceState::create(ctx.tok, ctx.scheduler.token_bytes(), r.seq,
                                             std::move(constraint));
  if (!state.ok()) return reject(bad_request(state.error().message));

  out.stream = std::make_shared<JobStream>();
  if (auto e = submit_refusal(ctx, ctx.scheduler.submit(Job{.prompt = std::move(prompt),
                                                            .state = std::move(*state),
                                                            .stream = out.stream}))) {
    return e;
  }
  ctx.metrics.requests_total.fetch_add(1, std::memory_order_relaxed);
  return {};
}

JobEvent collect_events(JobStream& stream, const std::function<void(const JobEvent&)>& on_event) {
  // Looked for on a clock, not only when no event comes: a fast generation never
  // leaves the pop waiting.
  constexpr auto kClientPoll = std::chrono::milliseconds(50);
  ClientWatch client(request_log().req);
  auto next_look = Clock::now() + kClientPoll;
  JobEvent ev;
  for (;;) {
    const bool got = stream.pop(ev, kClientPoll);
    if (got) on_event(ev);
    if (got && ev.final) break;
    if (Clock::now() >= next_look) {
      if (client.gone()) return client_gone(stream);
      next_look = Clock::now() + kClientPoll;
    }
  }
  note_counts(ev);
  return ev;
}

void reply_stream(ServerContext& ctx, httplib::Response& res, std::shared_ptr<JobStream> stream,
                  std::unique_ptr<SseWriter> writer, const char* content_type) {
  auto st = std::make_shared<StreamState>();
  st->stream = std::move(stream);
  st->writer = std::move(writer);
  st->open_streams = ctx.open_streams;
  // The request outlives its response's writes (httplib writes within process_request).
  st->client = ClientWatch(request_log().req);
  st->stall_timeout = std::chrono::seconds(ctx.options.stream_timeout_s);
  res.set_header("Cache-Control", "no-cache");
  // Counted until the response is gone (the releaser runs when httplib drops it, after
  // the last chunk or a failed write).
  if (st->open_streams != nullptr) st->open_streams->fetch_add(1, std::memory_order_acq_rel);
  res.set_chunked_content_provider(
      content_type,
      [st](size_t /*offset*/, httplib::DataSink& sink) {
        if (!st->sent_head) {
          st->sent_head = true;
          const std::string f = st->writer->head();
          if (!f.empty() && !sink.write(f.data(), f.size())) {
            client_gone(*st->stream);
            return false;
          }
          return true;
        }
        JobEvent ev;
        if (!st->stream->pop(ev, std::chrono::milliseconds(200))) {
          if (sink.is_writable()) return true;
          client_gone(*st->stream);
          return false;
        }
        const std::string frames = st->writer->frames(ev);
        if (ev.final) note_counts(ev);
        // A client that stops reading: its frames wait here once kMaxUnsent bytes are
        // unsent (the scheduler pauses the sequence once the stream is full too), until
        // it has taken no bytes for --stream-timeout; then the job is cancelled and the
        // connection closed.
        constexpr size_t kMaxUnsent = size_t{64} << 10;
        if (!frames.empty() && !ev.final &&
            !st->client.drained_within(kMaxUnsent, st->stall_timeout)) {
          std::fprintf(stderr, "[server] a stream took no bytes for %lld s: cancelled\n",
                       static_cast<long long>(st->stall_timeout.count() / 1000));
          client_gone(*st->stream);
          return false;
        }
        if (!frames.empty() && !sink.write(frames.data(), frames.size())) {
          if (ev.final) {
            request_log().status = 499;  // the counts are noted: the request had ended
          } else {
            client_gone(*st->stream);
          }
          return false;
        }
        if (ev.final) {
          st->finished = true;
          sink.done();
        }
        return true;
      },
      [st](bool /*success*/) {
        if (!st->finished) st->stream->cancel();
        if (st->open_streams != nullptr) st->open_streams->fetch_sub(1, std::memory_order_acq_rel);
      });
}

}  // namespace minfer::server
