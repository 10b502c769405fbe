// Stage 17 (HTTP): Anthropic's Messages API — POST /v1/messages and
// /v1/messages/count_tokens. A request is translated into the OpenAI chat request the
// rest of the server speaks (system → a system message, tool_use blocks → assistant
// tool_calls, tool_result blocks → tool messages, tools → functions, tool_choice any →
// required, thinking → a reasoning budget), validated by the same parser and run on the
// same path (render → SequenceState → scheduler); the events come back as a `message` or
// Anthropic's SSE events (a thinking template's block as a `thinking` content block).
// Reference: Anthropic's API docs (Messages, Streaming Messages, Extended thinking,
// Count tokens). Invariants: a block or field this server cannot honour (images,
// documents, server tools, an assistant prefill) is a 400 naming it, never ignored (past
// thinking blocks are accepted and not rendered, as the templates drop them); errors use
// Anthropic's shape ({"type":"error","error":{...}}).
#include <fmt/format.h>

#include <map>

#include "server/routes.h"

namespace minfer::server {
namespace {

using Opt = std::optional<ApiError>;

std::string block_type(const json& b) {
  const json* t = b.is_object() ? field(b, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : std::string();
}

// `system`, or a tool_result's `content`: a string or an array of text blocks.
Opt text_of(const json& v, const std::string& where, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
    return {};
  }
  if (!v.is_array()) {
    return bad_request(fmt::format("{} must be a string or an array of text blocks", where));
  }
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string type = block_type(v[k]);
    if (type != "text") {
      return bad_request(fmt::format("{}[{}]: only 'text' blocks are supported here, got '{}'",
                                     where, k, type.empty() ? "(no type)" : type));
    }
    const json* t = field(v[k], "text");
    if (!t || !t->is_string())
      return bad_request(fmt::format("{}[{}].text must be a string", where, k));
    if (!out.empty()) out += "\n";
    out += t->get<std::string>();
  }
  return {};
}

// One Anthropic message → OpenAI messages (a user turn with tool results becomes one
// tool message per result, then the user's text, as Anthropic asks results to come
// first). `names` maps tool_use ids of earlier turns to their tool names.
Opt translate_message(const json& msg, size_t i, std::map<std::string, std::string>& names,
                      json& out) {
  if (!msg.is_object()) return bad_request(fmt::format("messages[{}] must be an object", i));
  const json* role_j = field(msg, "role");
  if (!role_j || !role_j->is_string())
    return bad_request(fmt::format("messages[{}].role must be a string", i));
  const std::string role = role_j->get<std::string>();
  if (role != "user" && role != "assistant") {
    return bad_request(fmt::format(
        "messages[{}].role '{}' is unknown (user, assistant; the system prompt is 'system')", i,
        role));
  }
  const json* content = field(msg, "content");
  if (!content) return bad_request(fmt::format("messages[{}].content is required", i));
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return {};
  }
  if (!content->is_array()) {
    return bad_request(
        fmt::format("messages[{}].content must be a string or an array of content blocks", i));
  }
  std::string text;
  json calls = json::array();
  json results = json::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const json& b = (*content)[k];
    const std::string where = fmt::format("messages[{}].content[{}]", i, k);
    const std::string type = block_type(b);
    if (type == "text") {
      const json* t = field(b, "text");
      if (!t || !t->is_string()) return bad_request(where + ".text must be a string");
      text += t->get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      const json* id = field(b, "id");
      const json* name = field(b, "name");
      const json* input = field(b, "input");
      if (!id || !id->is_string()) return bad_request(where + ".id must be a string");
      if (!name || !name->is_string()) return bad_request(where + ".name must be a string");
      if (input && !input->is_object()) return bad_request(where + ".input must be an object");
      names[id->get<std::string>()] = name->get<std::string>();
      calls.push_back(
          {{"id", *id},
           {"type", "function"},
           {"function", {{"name", *name}, {"arguments", dump(input ? *input : json::object())}}}});
    } else if (type == "tool_result" && role == "user") {
      const json* id = field(b, "tool_use_id");
      if (!id || !id->is_string()) return bad_request(where + ".tool_use_id must be a string");
      std::string result;
      if (const json* c = field(b, "content")) {
        if (auto e = text_of(*c, where + ".content", result)) return e;
      }
      const json* is_error = field(b, "is_error");
      if (is_error && !is_error->is_boolean())
        return bad_request(where + ".is_error must be a boolean");
      // The templates have no field for a failed call: the model reads it in the text.
      if (is_error && is_error->get<bool>()) result = "Error: " + result;
      json tm{{"role", "tool"}, {"tool_call_id", *id}, {"content", result}};
      if (auto it = names.find(id->get<std::string>()); it != names.end()) tm["name"] = it->second;
      results.push_back(std::move(tm));
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      // An earlier turn's thinking, sent back as Anthropic's clients do: the templates
      // drop past reasoning (Qwen3's, DeepSeek-R1's), so it is not rendered.
    } else if (type == "tool_use" || type == "tool_result") {
      return bad_request(fmt::format("{}: a '{}' block belongs in {} messages", where, type,
                                     type == "tool_use" ? "assistant" : "user"));
    } else {
      return bad_request(
          fmt::format("{}: '{}' blocks are not supported (text, tool_use, tool_result)", where,
                      type.empty() ? "(no type)" : type));
    }
  }
  for (json& r : results) out.push_back(std::move(r));
  if (role == "assistant") {
    json m{{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    out.push_back(std::move(m));
  } else if (!text.empty() || results.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
  return {};
}

// tools [{name, description, input_schema}] → OpenAI functions.
Opt translate_tools(const json& tools, json& out) {
  if (!tools.is_array()) return bad_request("'tools' must be an array");
  out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object()) return bad_request(fmt::format("tools[{}] must be an object", i));
    const std::string type = block_type(t);
    if (!type.empty() && type != "custom") {
      return bad_request(fmt::format(
          "tools[{}]: '{}' tools (Anthropic's server and client tools) are not supported; give "
          "name, description and input_schema",
          i, type));
    }
    const json* name = field(t, "name");
    if (!name || !name->is_string())
      return bad_request(fmt::format("tools[{}].name must be a string", i));
    const json* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) {
      return bad_request(fmt::format("tools[{}].input_schema must be a JSON Schema object", i));
    }
    json fn{{"name", *name}, {"parameters", *schema}};
    if (const json* d = field(t, "description")) {
      if (!d->is_string())
        return bad_request(fmt::format("tools[{}].description must be a string", i));
      fn["description"] = *d;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return {};
}

// tool_choice {type: auto | any | tool (name) | none, disable_parallel_tool_use}.
Opt translate_tool_choice(const json& tc, json& oa) {
  if (!tc.is_object()) return bad_request("'tool_choice' must be an object with a 'type'");
  const std::string type = block_type(tc);
  if (type == "auto") {
    oa["tool_choice"] = "auto";
  } else if (type == "any") {
    oa["tool_choice"] = "required";
  } else if (type == "none") {
    oa["tool_choice"] = "none";
  } else if (type == "tool") {
    const json* name = field(tc, "name");
    if (!name || !name->is_string())
      return bad_request("tool_choice 'tool' needs 'name' (a string)");
    oa["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return bad_request(
        fmt::format("tool_choice type '{}' is unknown (auto, any, tool, none)", type));
  }
  // Several calls in one turn only when asked for (disable_parallel_tool_use: false):
  // Anthropic allows them by default, but a small model held to the several-calls
  // grammar tends to repeat its call until max_tokens, so the server's default (one
  // call, llama-server's) stays.
  if (const json* d = field(tc, "disable_parallel_tool_use")) {
    if (!d->is_boolean())
      return bad_request("tool_choice.disable_parallel_tool_use must be a boolean");
    oa["parallel_tool_calls"] = !d->get<bool>();
  }
  return {};
}

// An Anthropic body → the OpenAI chat body parse_completion takes. `generating`:
// /v1/messages (max_tokens required), not count_tokens.
Opt translate_request(const json& j, bool generating, json& oa) {
  oa = json::object();
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) return bad_request("'model' must be a string");
    oa["model"] = *m;
  }
  if (generating) {
    const json* mt = field(j, "max_tokens");
    if (!mt) return bad_request("'max_tokens' is required");
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) {
      return bad_request("'max_tokens' must be an integer >= 1");
    }
    oa["max_tokens"] = *mt;
  }
  // Extended thinking: a thinking template's block, split out (thinking content blocks)
  // and bounded by budget_tokens. Absent or disabled: no thinking (the block closed in
  // the prompt, server/job.cpp), Anthropic's default.
  oa["reasoning_format"] = "deepseek";
  oa["thinking_budget_tokens"] = 0;
  if (const json* t = field(j, "thinking")) {
    const std::string type = t->is_object() ? block_type(*t) : "";
    if (type == "enabled") {
      const json* bt = field(*t, "budget_tokens");
      if (!bt || !bt->is_number_integer() || bt->get<int64_t>() < 1 ||
          bt->get<int64_t>() > (int64_t{1} << 30)) {
        return bad_request("'thinking.budget_tokens' must be an integer >= 1 (type \"enabled\")");
      }
      oa["thinking_budget_tokens"] = *bt;
    } else if (type != "disabled") {
      return bad_request(
          "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": "
          "\"disabled\"}");
    }
  }
  if (const json* md = field(j, "metadata")) {
    if (!md->is_object()) return bad_request("'metadata' must be an object");
  }
  json messages = json::array();
  if (const json* sys = field(j, "system")) {
    std::string text;
    if (auto e = text_of(*sys, "system", text)) return e;
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  const json* msgs = field(j, "messages");
  if (!msgs) return bad_request("'messages' is required");
  if (!msgs->is_array()) return bad_request("'messages' must be an array");
  if (msgs->empty()) return bad_request("'messages' must not be empty");
  std::map<std::string, std::string> names;
  for (size_t i = 0; i < msgs->size(); ++i) {
    if (auto e = translate_message((*msgs)[i], i, names, messages)) return e;
  }
  if ((*msgs).back().is_object() && (*msgs).back().value("role", "") == "assistant") {
    // The chat template opens a new assistant turn after the messages; continuing the
    // last one needs a render that leaves it open, which the templates do not offer.
    return bad_request(fmt::format(
        "messages[{}]: a final assistant message (a prefill to continue) is not supported",
        msgs->size() - 1));
  }
  oa["messages"] = std::move(messages);
  if (const json* s = field(j, "stop_sequences")) {
    constexpr size_t kMaxStops = 16;
    if (!s->is_array()) return bad_request("'stop_sequences' must be an array of strings");
    if (s->size() > kMaxStops) {
      return bad_request(
          fmt::format("'stop_sequences' has {} entries, at most {}", s->size(), kMaxStops));
    }
    for (const json& e : *s) {
      if (!e.is_string()) return bad_request("'stop_sequences' must be an array of strings");
    }
    oa["stop"] = *s;
  }
  if (const json* t = field(j, "temperature")) {
    if (!t->is_number() || !(t->get<double>() >= 0.0 && t->get<double>() <= 1.0)) {
      return bad_request("'temperature' must be a number in [0, 1]");
    }
  }
  for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
    if (const json* v = field(j, key)) oa[key] = *v;
  }
  if (const json* t = field(j, "tools")) {
    json tools;
    if (auto e = translate_tools(*t, tools)) return e;
    oa["tools"] = std::move(tools);
  }
  if (const json* tc = field(j, "tool_choice")) {
    if (auto e = translate_tool_choice(*tc, oa)) return e;
  }
  return {};
}

Opt parse_request(ServerContext& ctx, const std::string& body, bool generating,
                  CompletionRequest& r) {
  json j;
  if (auto e = parse_object(body, j)) return e;
  json oa;
  if (auto e = translate_request(j, generating, oa)) return e;
  return parse_completion_json(oa, Endpoint::kChat, ctx.tok.n_vocab(), r);
}

const char* stop_reason(engine::SeqStop stop) {
  switch (stop) {
    case engine::SeqStop::kEog:
      return "end_turn";
    case engine::SeqStop::kStopString:
      return "stop_sequence";
    case engine::SeqStop::kContext:
      return "model_context_window_exceeded";
    default:
      return "max_tokens";
  }
}

json stop_sequence(const JobEvent& ev) {
  return ev.stop == engine::SeqStop::kStopString ? json(ev.stop_string) : json(nullptr);
}

json tool_use_block(const ToolCall& c) {
  json input = json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
  return json{{"type", "tool_use"},
              {"id", random_id("toolu_")},
              {"name", c.name},
              {"input", input.is_discarded() ? json::object() : std::move(input)}};
}

// A thinking block's signature: Anthropic's encrypts the thinking so its API can check a
// block sent back; this server checks nothing (past thinking is not rendered), so it is
// empty.
constexpr const char* kSignature = "";

std::string event(const char* name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, dump(data));
}

ApiError event_error(const JobEvent& ev) {
  return ApiError{.status = ev.error_status, .type = "server_error", .message = ev.error};
}

// Anthropic's stream: message_start, ping, per block content_block_start / _delta /
// _stop, message_delta, message_stop. A text block opens with the first text that is
// not only whitespace (whitespace before a tool call is not content, as in the
// non-streamed reply); tool_use blocks follow at the end, their input in one
// input_json_delta (known once the call is parsed).
class AnthropicSse final : public SseWriter {
 public:
  AnthropicSse(json message, std::unique_ptr<ToolCallParser> tools)
      : message_(std::move(message)), tools_(std::move(tools)) {}

  std::string head() override {
    return event("message_start", {{"type", "message_start"}, {"message", message_}}) +
           event("ping", {{"type", "ping"}});
  }

  std::string frames(const JobEvent& ev) override {
    if (!ev.error.empty()) return event("error", anthropic_error_body(event_error(ev)));
    std::string out;
    // A thinking block first: opened by the first reasoning, closed (with its signature)
    // when the answer starts or the message ends.
    if (!ev.reasoning.empty()) {
      if (!thinking_open_) {
        out +=
            event("content_block_start",
                  {{"type", "content_block_start"},
                   {"index", index_},
                   {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
        thinking_open_ = true;
      }
      out += event("content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", index_},
                    {"delta", {{"type", "thinking_delta"}, {"thinking", ev.reasoning}}}});
    }
    if (thinking_open_ && (!ev.text.empty() || ev.final)) {
      out += event("content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", index_},
                    {"delta", {{"type", "signature_delta"}, {"signature", kSignature}}}});
      out += block_stop();
      thinking_open_ = false;
    }
    std::string text = tools_ ? tools_->feed(ev.text) : ev.text;
    if (tools_ && ev.final) text += tools_->finish();
    const bool called = tools_ && !tools_->calls().empty();
    if (text_open_) {
      out += text_delta(text);
    } else {
      pending_ += text;
      if (!blank(pending_) || (ev.final && !called && !pending_.empty())) {
        out += event("content_block_start", {{"type", "content_block_start"},
                                             {"index", index_},
                                             {"content_block", {{"type", "text"}, {"text", ""}}}});
        text_open_ = true;
        out += text_delta(pending_);
        pending_.clear();
      }
    }
    if (!ev.final) return out;
    if (text_open_) out += block_stop();
    if (called) {
      for (const ToolCall& c : tools_->calls()) {
        json block = tool_use_block(c);
        const std::string input = dump(block["input"]);
        block["input"] = json::object();
        out += event("content_block_start", {{"type", "content_block_start"},
                                             {"index", index_},
                                             {"content_block", std::move(block)}});
        out += event("content_block_delta",
                     {{"type", "content_block_delta"},
                      {"index", index_},
                      {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}});
        out += block_stop();
      }
    }
    out += event("message_delta",
                 {{"type", "message_delta"},
                  {"delta",
                   {{"stop_reason", called ? "tool_use" : stop_reason(ev.stop)},
                    {"stop_sequence", called ? json(nullptr) : stop_sequence(ev)}}},
                  {"usage", {{"input_tokens", ev.n_prompt}, {"output_tokens", ev.n_generated}}}});
    out += event("message_stop", {{"type", "message_stop"}});
    return out;
  }

 private:
  std::string text_delta(const std::string& text) const {
    if (text.empty()) return {};
    return event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }
  std::string block_stop() {
    return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }

  json message_;  // message_start's message: empty content, input usage
  std::unique_ptr<ToolCallParser> tools_;
  std::string pending_;  // whitespace held until text or a call decides it
  bool text_open_ = false;
  bool thinking_open_ = false;
  int32_t index_ = 0;  // the current content block
};

}  // namespace

void handle_messages(ServerContext& ctx, const std::string& body, http::Response& res) {
  CompletionRequest r;
  if (auto e = parse_request(ctx, body, /*generating=*/true, r)) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e, Dialect::kAnthropic);
  }
  SubmittedJob job;
  if (auto e = submit_completion(ctx, r, job)) return reply_error(res, *e, Dialect::kAnthropic);
  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  json message{{"id", random_id("msg_")},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model},
               {"content", json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", {{"input_tokens", job.n_prompt}, {"output_tokens", 0}}}};
  std::unique_ptr<ToolCallParser> tools;
  if (r.tools.active()) tools = std::make_unique<ToolCallParser>(job.format, true);
  if (r.stream) {
    return reply_stream(ctx, res, std::move(job.stream),
                        std::make_unique<AnthropicSse>(std::move(message), std::move(tools)));
  }
  std::string text, thinking;
  const JobEvent ev = collect_events(*job.stream, [&](const JobEvent& e) {
    text += e.text;
    thinking += e.reasoning;
  });
  if (!ev.error.empty()) return reply_error(res, event_error(ev), Dialect::kAnthropic);
  if (tools) text = tools->feed_all(text);
  const bool called = tools && !tools->calls().empty();
  json& content = message["content"];
  if (!thinking.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", thinking}, {"signature", kSignature}});
  }
  if (!text.empty() && !(called && blank(text))) {
    content.push_back({{"type", "text"}, {"text", text}});
  }
  if (called) {
    for (const ToolCall& c : tools->calls()) content.push_back(tool_use_block(c));
  }
  message["stop_reason"] = called ? "tool_use" : stop_reason(ev.stop);
  message["stop_sequence"] = called ? json(nullptr) : stop_sequence(ev);
  message["usage"] = {{"input_tokens", ev.n_prompt}, {"output_tokens", ev.n_generated}};
  reply_json(res, message);
}

void handle_count_tokens(ServerContext& ctx, const std::string& body, http::Response& res) {
  CompletionRequest r;
  std::vector<engine::TokenId> prompt;
  std::optional<ApiError> e = parse_request(ctx, body, /*generating=*/false, r);
  if (!e) e = prompt_tokens(ctx, r, tool_format(ctx.renderer.source()), prompt);
  if (e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e, Dialect::kAnthropic);
  }
  reply_json(res, {{"input_tokens", prompt.size()}});
}

}  // namespace minfer::server
