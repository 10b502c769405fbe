// Stage 17 (HTTP): the completion routes — request → prompt tokens → job; events →
// OpenAI response JSON or SSE chunks (chat.completion[.chunk], text_completion).
#include <fmt/format.h>

#include <random>

#include "server/constraint.h"
#include "server/routes.h"
#include "server/tools.h"

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                   std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
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

json usage_json(const JobEvent& ev) {
  return json{{"prompt_tokens", ev.n_prompt},
              {"completion_tokens", ev.n_generated},
              {"total_tokens", ev.n_prompt + ev.n_generated},
              {"prompt_tokens_details", {{"cached_tokens", ev.n_reused}}}};
}

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
void append_chat_logprobs(json& content, const std::vector<LogprobEntry>& entries) {
  for (const LogprobEntry& e : entries) {
    json top = json::array();
    for (const auto& [tok, lp] : e.top) {
      top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_json(tok)}});
    }
    content.push_back({{"token", e.token},
                       {"logprob", e.logprob},
                       {"bytes", bytes_json(e.token)},
                       {"top_logprobs", std::move(top)}});
  }
}

// Legacy completions logprobs: parallel arrays.
struct TextLogprobs {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = 0;
  void append(const std::vector<LogprobEntry>& entries) {
    for (const LogprobEntry& e : entries) {
      tokens.push_back(e.token);
      token_logprobs.push_back(e.logprob);
      json t = json::object();
      for (const auto& [tok, lp] : e.top) t[tok] = lp;
      top.push_back(std::move(t));
      offsets.push_back(offset);
      offset += e.token.size();
    }
  }
  json to_json() const {
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top},
            {"text_offset", offsets}};
  }
};

// Everything a streaming response needs across content-provider calls.
struct StreamState {
  std::shared_ptr<JobStream> stream;
  Endpoint endpoint = Endpoint::kChat;
  std::string id, model;
  int64_t created = 0;
  bool logprobs = false;
  bool include_usage = false;
  bool sent_head = false;
  bool finished = false;
  std::atomic<int32_t>* open_streams = nullptr;  // ServerContext::open_streams
  TextLogprobs text_lp;
  std::unique_ptr<ToolCallParser> tools;  // tools in play: content and calls split
};

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

// Content before the first call that is only whitespace is not content.
bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

json chunk_base(const StreamState& s) {
  json j{{"id", s.id},
         {"object", s.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
         {"created", s.created},
         {"model", s.model}};
  return j;
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

// The SSE frames for one event (content, then on the final event the finish chunk and
// the usage chunk); [DONE] is written by the caller.
std::string frames_for(StreamState& s, const JobEvent& ev) {
  std::string out;
  const bool chat = s.endpoint == Endpoint::kChat;
  if (!ev.error.empty()) {
    return sse(
        error_body(ApiError{.status = ev.error_status,
                            .type = ev.error_status == 503 ? "unavailable_error" : "server_error",
                            .message = ev.error}));
  }
  std::string text = s.tools ? s.tools->feed(ev.text) : ev.text;
  if (s.tools && ev.final) {
    text += s.tools->finish();
    if (!s.tools->calls().empty() && blank(text)) text.clear();
  }
  if (!text.empty() || !ev.logprobs.empty()) {
    json c = chunk_base(s);
    json choice{{"index", 0}};
    if (chat) {
      choice["delta"] = {{"content", text}};
      if (s.logprobs) {
        json content = json::array();
        append_chat_logprobs(content, ev.logprobs);
        choice["logprobs"] = {{"content", std::move(content)}};
      } else {
        choice["logprobs"] = nullptr;
      }
    } else {
      choice["text"] = text;
      if (s.logprobs) {
        TextLogprobs lp;
        lp.offset = s.text_lp.offset;
        lp.append(ev.logprobs);
        s.text_lp.offset = lp.offset;
        choice["logprobs"] = lp.to_json();
      } else {
        choice["logprobs"] = nullptr;
      }
    }
    choice["finish_reason"] = nullptr;
    c["choices"] = json::array({std::move(choice)});
    out += sse(c);
  }
  const bool called = s.tools && !s.tools->calls().empty();
  if (ev.final && called) {
    // As OpenAI streams a call: its id, type and name with empty arguments, then the
    // arguments (here in one piece: they are known once the call is parsed).
    const std::vector<ToolCall>& calls = s.tools->calls();
    for (size_t i = 0; i < calls.size(); ++i) {
      json head{{"index", i},
                {"id", calls[i].id},
                {"type", "function"},
                {"function", {{"name", calls[i].name}, {"arguments", ""}}}};
      json args{{"index", i}, {"function", {{"arguments", calls[i].arguments}}}};
      for (json* tc : {&head, &args}) {
        json c = chunk_base(s);
        c["choices"] = json::array({json{{"index", 0},
                                         {"delta", {{"tool_calls", json::array({*tc})}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
        out += sse(c);
      }
    }
  }
  if (ev.final) {
    json c = chunk_base(s);
    json choice{{"index", 0}};
    if (chat) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = called ? "tool_calls" : finish_reason(ev.stop);
    c["choices"] = json::array({std::move(choice)});
    out += sse(c);
    if (s.include_usage) {
      json u = chunk_base(s);
      u["choices"] = json::array();
      u["usage"] = usage_json(ev);
      out += sse(u);
    }
  }
  return out;
}

void note_counts(const JobEvent& ev) {
  RequestLog& log = request_log();
  log.n_prompt = ev.n_prompt;
  log.n_generated = ev.n_generated;
  log.n_reused = ev.n_reused;
}

// The client left mid-stream: the scheduler frees the slot at its next step and sends a
// final event with the counts so far, which the request's log line reports under
// status 499 (nginx's "client closed request"). A job cancelled while still queued
// gets no event; its line then says what was known (the prompt, no completion).
void client_gone(StreamState& st) {
  st.stream->cancel();
  request_log().status = 499;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  JobEvent ev;
  while (Clock::now() < deadline) {
    if (st.stream->pop(ev, std::chrono::milliseconds(50)) && ev.final) {
      note_counts(ev);
      return;
    }
  }
}

void reply_stream(httplib::Response& res, std::shared_ptr<StreamState> st) {
  res.set_header("Cache-Control", "no-cache");
  // Counted until the response is gone (the releaser runs when httplib drops it, after
  // the last chunk or a failed write).
  if (st->open_streams != nullptr) st->open_streams->fetch_add(1, std::memory_order_acq_rel);
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t /*offset*/, httplib::DataSink& sink) {
        if (!st->sent_head) {
          st->sent_head = true;
          if (st->endpoint == Endpoint::kChat) {
            json c = chunk_base(*st);
            c["choices"] = json::array({json{{"index", 0},
                                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}});
            const std::string f = sse(c);
            if (!sink.write(f.data(), f.size())) {
              client_gone(*st);
              return false;
            }
          }
          return true;
        }
        JobEvent ev;
        if (!st->stream->pop(ev, std::chrono::milliseconds(200))) {
          if (sink.is_writable()) return true;
          client_gone(*st);
          return false;
        }
        std::string frames = frames_for(*st, ev);
        if (ev.final) {
          note_counts(ev);
          frames += "data: [DONE]\n\n";
        }
        if (!frames.empty() && !sink.write(frames.data(), frames.size())) {
          if (ev.final) {
            request_log().status = 499;  // the counts are noted: the request had ended
          } else {
            client_gone(*st);
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

}  // namespace

void handle_completion(ServerContext& ctx, Endpoint endpoint, const std::string& request_body,
                       httplib::Response& res) {
  CompletionRequest r;
  if (auto e = parse_completion(request_body, endpoint, ctx.tok.n_vocab(), r)) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e);
  }
  auto reject = [&](ApiError e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    reply_error(res, e);
  };
  // Tools: the template's call format; required / named choice (and the generic
  // format) become the request's grammar.
  const ToolFormat format = tool_format(ctx.renderer.source());
  if (endpoint == Endpoint::kChat && r.tools.active()) {
    auto g = tool_grammar(r.tools, format);
    if (!g.ok()) return reject(bad_request("tools: " + g.error().message));
    if (!g->empty()) {
      if (!r.grammar.empty()) {
        return reject(bad_request(fmt::format(
            "tools: the tool call format ({}) constrains the output here; it cannot be combined "
            "with 'grammar', 'json_schema' or a JSON response_format",
            tool_format_name(format))));
      }
      r.grammar = std::move(*g);
    }
  }
  // Prompt tokens: the chat template's render, or the prompt text, or given ids.
  std::vector<engine::TokenId> prompt;
  if (endpoint == Endpoint::kChat || r.prompt) {
    std::string text;
    if (endpoint == Endpoint::kChat) {
      auto rendered = r.tools.active() || r.tool_history
                          ? render_tool_prompt(ctx.renderer, r.messages_json, r.tools, format)
                          : ctx.renderer.render(r.messages, /*add_generation_prompt=*/true);
      if (!rendered.ok()) {
        return reject(bad_request("the chat template cannot render these messages: " +
                                  rendered.error().message));
      }
      text = std::move(*rendered);
    } else {
      text = *r.prompt;
    }
    auto toks = chat::tokenize_prompt(ctx.tok, text);
    if (!toks.ok())
      return reject(bad_request("cannot tokenize the prompt: " + toks.error().message));
    prompt = std::move(*toks);
  } else {
    prompt.assign(r.prompt_tokens.begin(), r.prompt_tokens.end());
  }
  const uint32_t n_ctx = ctx.scheduler.options().n_ctx;
  if (prompt.empty()) return reject(bad_request("the prompt has no tokens"));
  if (prompt.size() >= n_ctx) {
    return reject(
        ApiError{.status = 400,
                 .type = "exceed_context_size_error",
                 .message = fmt::format("the prompt has {} tokens; a request may use {} positions "
                                        "(prompt + completion), see --n-ctx",
                                        prompt.size(), n_ctx)});
  }
  request_log().n_prompt = static_cast<int32_t>(prompt.size());
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

  auto stream = std::make_shared<JobStream>();
  switch (ctx.scheduler.submit(
      Job{.prompt = std::move(prompt), .state = std::move(*state), .stream = stream})) {
    case SubmitResult::kQueued:
      break;
    case SubmitResult::kQueueFull:
      ctx.metrics.requests_queue_full.fetch_add(1, std::memory_order_relaxed);
      return reply_error(res, ApiError{.status = 429,
                                       .type = "rate_limit_error",
                                       .message = "every slot is busy and the queue is full; "
                                                  "retry later"});
    case SubmitResult::kDraining:
      return reply_error(res, ApiError{.status = 503,
                                       .type = "unavailable_error",
                                       .message = "the server is shutting down"});
  }
  ctx.metrics.requests_total.fetch_add(1, std::memory_order_relaxed);

  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  const std::string id = random_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  if (r.stream) {
    auto st = std::make_shared<StreamState>();
    st->stream = stream;
    st->endpoint = endpoint;
    st->id = id;
    st->model = model;
    st->created = created;
    st->logprobs = r.logprobs;
    st->include_usage = r.include_usage;
    st->open_streams = ctx.open_streams;
    if (endpoint == Endpoint::kChat && r.tools.active()) {
      st->tools = std::make_unique<ToolCallParser>(format, true);
    }
    return reply_stream(res, std::move(st));
  }

  // Non-streaming: collect every event, then one response.
  std::string text;
  json chat_lp = json::array();
  TextLogprobs text_lp;
  JobEvent ev;
  for (;;) {
    if (!stream->pop(ev, std::chrono::milliseconds(1000))) continue;
    text += ev.text;
    if (r.logprobs) {
      if (endpoint == Endpoint::kChat) {
        append_chat_logprobs(chat_lp, ev.logprobs);
      } else {
        text_lp.append(ev.logprobs);
      }
    }
    if (ev.final) break;
  }
  note_counts(ev);
  if (!ev.error.empty()) {
    return reply_error(
        res, ApiError{.status = ev.error_status,
                      .type = ev.error_status == 503 ? "unavailable_error" : "server_error",
                      .message = ev.error});
  }
  json choice{{"index", 0}};
  std::vector<ToolCall> calls;
  if (endpoint == Endpoint::kChat && r.tools.active()) {
    ToolCallParser parser(format, true);
    std::string content = parser.feed(text);
    content += parser.finish();
    calls = parser.calls();
    text = std::move(content);
  }
  if (endpoint == Endpoint::kChat && !calls.empty()) {
    choice["message"] = {{"role", "assistant"},
                         {"content", blank(text) ? json(nullptr) : json(text)},
                         {"tool_calls", tool_calls_json(calls)}};
    choice["logprobs"] = r.logprobs ? json{{"content", std::move(chat_lp)}} : json(nullptr);
  } else if (endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    choice["logprobs"] = r.logprobs ? json{{"content", std::move(chat_lp)}} : json(nullptr);
  } else {
    choice["text"] = text;
    choice["logprobs"] = r.logprobs ? text_lp.to_json() : json(nullptr);
  }
  choice["finish_reason"] = calls.empty() ? finish_reason(ev.stop) : "tool_calls";
  json body{{"id", id},
            {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({std::move(choice)})},
            {"usage", usage_json(ev)}};
  reply_json(res, body);
}

}  // namespace minfer::server
