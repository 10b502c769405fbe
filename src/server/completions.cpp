// Stage 17 (HTTP): the OpenAI completion routes — the request parsed (api.cpp) and run
// on the shared path (job.cpp); its events → OpenAI response JSON or SSE chunks
// (chat.completion[.chunk], text_completion).
#include <fmt/format.h>

#include "server/routes.h"
#include "server/tools.h"

namespace minfer::server {
namespace {

json usage_json(const JobEvent& ev) {
  return json{{"prompt_tokens", ev.n_prompt},
              {"completion_tokens", ev.n_generated},
              {"total_tokens", ev.n_prompt + ev.n_generated},
              {"prompt_tokens_details", {{"cached_tokens", ev.n_reused}}}};
}

// With a thinking block: the reasoning tokens among the completion's.
json usage_json_with_reasoning(const JobEvent& ev) {
  json u = usage_json(ev);
  if (ev.n_reasoning > 0) u["completion_tokens_details"] = {{"reasoning_tokens", ev.n_reasoning}};
  return u;
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

// OpenAI's stream: chat.completion.chunk / text_completion chunks, then [DONE].
struct OpenAiStream {
  Endpoint endpoint = Endpoint::kChat;
  std::string id, model;
  int64_t created = 0;
  bool logprobs = false;
  bool include_usage = false;
  // Per choice (the request's n): its text offset for logprobs, its tool-call parser
  // (tools in play: content and calls split).
  std::vector<TextLogprobs> text_lp;
  std::vector<std::unique_ptr<ToolCallParser>> tools;
  std::string echo;  // completions with echo: the prompt text, each choice's first chunk
  int32_t n_finished = 0;
  JobEvent total;  // the finished choices' counts (usage)
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

json chunk_base(const OpenAiStream& s) {
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
std::string frames_for(OpenAiStream& s, const JobEvent& ev) {
  std::string out;
  const bool chat = s.endpoint == Endpoint::kChat;
  const auto idx = static_cast<size_t>(ev.choice);
  std::unique_ptr<ToolCallParser>& tools = s.tools[idx];
  if (!ev.error.empty()) {
    return sse(
        error_body(ApiError{.status = ev.error_status,
                            .type = ev.error_status == 503 ? "unavailable_error" : "server_error",
                            .message = ev.error}));
  }
  // A thinking block's text first, in its own chunks (llama-server's
  // delta.reasoning_content), so a client sees it end before the answer begins.
  if (chat && !ev.reasoning.empty()) {
    json c = chunk_base(s);
    c["choices"] = json::array({json{{"index", idx},
                                     {"delta", {{"reasoning_content", ev.reasoning}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    out += sse(c);
  }
  std::string text = tools ? tools->feed(ev.text) : ev.text;
  if (tools && ev.final) {
    text += tools->finish();
    if (!tools->calls().empty() && blank(text)) text.clear();
  }
  if (!text.empty() || !ev.logprobs.empty()) {
    json c = chunk_base(s);
    json choice{{"index", idx}};
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
        lp.offset = s.text_lp[idx].offset;
        lp.append(ev.logprobs);
        s.text_lp[idx].offset = lp.offset;
        choice["logprobs"] = lp.to_json();
      } else {
        choice["logprobs"] = nullptr;
      }
    }
    choice["finish_reason"] = nullptr;
    c["choices"] = json::array({std::move(choice)});
    out += sse(c);
  }
  const bool called = tools && !tools->calls().empty();
  if (ev.final && called) {
    // As OpenAI streams a call: its id, type and name with empty arguments, then the
    // arguments (here in one piece: they are known once the call is parsed).
    const std::vector<ToolCall>& calls = tools->calls();
    for (size_t i = 0; i < calls.size(); ++i) {
      json head{{"index", i},
                {"id", calls[i].id},
                {"type", "function"},
                {"function", {{"name", calls[i].name}, {"arguments", ""}}}};
      json args{{"index", i}, {"function", {{"arguments", calls[i].arguments}}}};
      for (json* tc : {&head, &args}) {
        json c = chunk_base(s);
        c["choices"] = json::array({json{{"index", idx},
                                         {"delta", {{"tool_calls", json::array({*tc})}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
        out += sse(c);
      }
    }
  }
  if (ev.final) {
    json c = chunk_base(s);
    json choice{{"index", idx}};
    if (chat) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = called ? "tool_calls" : finish_reason(ev.stop);
    c["choices"] = json::array({std::move(choice)});
    out += sse(c);
    // Usage once, after the last choice: the prompt once, the completions summed.
    if (s.n_finished == 0) {
      s.total.n_prompt = ev.n_prompt;
      s.total.n_reused = ev.n_reused;
    }
    s.total.n_generated += ev.n_generated;
    s.total.n_reasoning += ev.n_reasoning;
    ++s.n_finished;
    if (s.include_usage && s.n_finished == static_cast<int32_t>(s.tools.size())) {
      json u = chunk_base(s);
      u["choices"] = json::array();
      u["usage"] = usage_json_with_reasoning(s.total);
      out += sse(u);
    }
  }
  return out;
}

class OpenAiSse final : public SseWriter {
 public:
  explicit OpenAiSse(OpenAiStream s) : s_(std::move(s)) {}
  std::string head() override {
    std::string out;
    for (size_t i = 0; i < s_.tools.size(); ++i) {
      json c = chunk_base(s_);
      if (s_.endpoint == Endpoint::kChat) {
        c["choices"] = json::array({json{{"index", i},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
      } else if (!s_.echo.empty()) {
        c["choices"] = json::array({json{
            {"index", i}, {"text", s_.echo}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
      } else {
        continue;
      }
      out += sse(c);
    }
    return out;
  }
  std::string frames(const JobEvent& ev) override {
    std::string out = frames_for(s_, ev);
    if (s_.n_finished == static_cast<int32_t>(s_.tools.size())) out += "data: [DONE]\n\n";
    return out;
  }

 private:
  OpenAiStream s_;
};

}  // namespace

void handle_completion(ServerContext& ctx, Endpoint endpoint, const std::string& request_body,
                       http::Response& res) {
  CompletionRequest r;
  if (auto e = parse_completion(request_body, endpoint, ctx.tok.n_vocab(), r)) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e);
  }
  SubmittedJob job;
  if (auto e = submit_completion(ctx, r, job)) return reply_error(res, *e);
  const ToolFormat format = job.format;

  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  const std::string id = request_scoped_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  // echo (completions): the prompt's text starts each choice's text.
  std::string echo;
  if (endpoint == Endpoint::kCompletion && r.echo) {
    echo = r.prompt ? *r.prompt : ctx.tok.decode(r.prompt_tokens);
  }
  const size_t n = job.choices.size();
  if (r.stream) {
    OpenAiStream st{.endpoint = endpoint,
                    .id = id,
                    .model = model,
                    .created = created,
                    .logprobs = r.logprobs,
                    .include_usage = r.include_usage,
                    .text_lp = std::vector<TextLogprobs>(n),
                    .tools = {},
                    .echo = echo};
    for (size_t i = 0; i < n; ++i) {
      st.tools.push_back(endpoint == Endpoint::kChat && r.tools.active()
                             ? std::make_unique<ToolCallParser>(format, true)
                             : nullptr);
    }
    return reply_stream(ctx, res, std::move(job.choices),
                        std::make_unique<OpenAiSse>(std::move(st)));
  }

  // Non-streaming: collect every choice's events, then one response.
  struct Choice {
    std::string text, reasoning;
    json chat_lp = json::array();
    TextLogprobs text_lp;
    engine::SeqStop stop = engine::SeqStop::kNone;
  };
  std::vector<Choice> acc(n);
  ChoiceStreams streams(std::move(job.choices));
  const JobEvent ev = collect_choices(streams, [&](const JobEvent& e) {
    Choice& c = acc[static_cast<size_t>(e.choice)];
    c.text += e.text;
    c.reasoning += e.reasoning;
    if (e.final) c.stop = e.stop;
    if (r.logprobs) {
      if (endpoint == Endpoint::kChat) {
        append_chat_logprobs(c.chat_lp, e.logprobs);
      } else {
        c.text_lp.append(e.logprobs);
      }
    }
  });
  if (!ev.error.empty()) {
    return reply_error(
        res, ApiError{.status = ev.error_status,
                      .type = ev.error_status == 503 ? "unavailable_error" : "server_error",
                      .message = ev.error});
  }
  json choices = json::array();
  for (size_t i = 0; i < n; ++i) {
    Choice& c = acc[i];
    std::string& text = c.text;
    json choice{{"index", i}};
    std::vector<ToolCall> calls;
    if (endpoint == Endpoint::kChat && r.tools.active()) {
      ToolCallParser parser(format, true);
      text = parser.feed_all(text);
      calls = parser.calls();
    }
    if (endpoint == Endpoint::kChat && !calls.empty()) {
      choice["message"] = {{"role", "assistant"},
                           {"content", blank(text) ? json(nullptr) : json(text)},
                           {"tool_calls", tool_calls_json(calls)}};
      choice["logprobs"] = r.logprobs ? json{{"content", std::move(c.chat_lp)}} : json(nullptr);
    } else if (endpoint == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] = r.logprobs ? json{{"content", std::move(c.chat_lp)}} : json(nullptr);
    } else {
      choice["text"] = echo + text;
      choice["logprobs"] = r.logprobs ? c.text_lp.to_json() : json(nullptr);
    }
    if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
    choice["finish_reason"] = calls.empty() ? finish_reason(c.stop) : "tool_calls";
    choices.push_back(std::move(choice));
  }
  json body{{"id", id},
            {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", std::move(choices)},
            {"usage", usage_json_with_reasoning(ev)}};
  reply_json(res, body);
}

}  // namespace minfer::server
