// Stage 17 (HTTP): OpenAI's Responses API — POST /v1/responses, GET / DELETE
// /v1/responses/{id}, POST /v1/responses/{id}/cancel. A request is translated into the
// OpenAI chat request the rest of the server speaks (instructions → a system message,
// input items → messages, function_call / function_call_output items → assistant
// tool_calls / tool messages, flat function tools → nested ones, text.format →
// response_format, reasoning.effort → a reasoning budget), validated by the same parser and run on
// the same path (render → SequenceState → scheduler); the events come back as a `response` object
// or the Responses API's typed SSE events (a thinking template's block as a reasoning item).
// Reference: OpenAI's API reference (Responses, Streaming events). Finished responses are kept in
// memory (ResponseStore) for retrieval and previous_response_id. Invariants: an item, part, tool or
// mode this server cannot honour (images, files, hosted tools, background) is a 400 naming it,
// never ignored; errors use OpenAI's shape.
#include <fmt/format.h>

#include <chrono>
#include <map>

#include "server/routes.h"

namespace minfer::server {

// --- ResponseStore -------------------------------------------------------------------

void ResponseStore::put(const std::string& id, json response, json conversation) {
  if (max_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(id) == 0) order_.push_back(id);
  entries_[id] = Entry{.response = std::move(response), .conversation = std::move(conversation)};
  // Oldest first (erase() takes a deleted id out of the order too).
  while (entries_.size() > max_ && !order_.empty()) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.erase(id) == 0) return false;
  std::erase(order_, id);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

namespace {

using Opt = std::optional<ApiError>;

std::string type_of(const json& b) {
  const json* t = b.is_object() ? field(b, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : std::string();
}

ApiError not_found(const std::string& what) {
  return ApiError{.status = 404, .type = "invalid_request_error", .message = what};
}

// A message's content: a string or an array of input_text / output_text parts.
Opt content_text(const json& content, const std::string& where, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return {};
  }
  if (!content.is_array()) {
    return bad_request(where + " must be a string or an array of content parts");
  }
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string at = fmt::format("{}[{}]", where, k);
    const std::string type = type_of(content[k]);
    if (type == "input_text" || type == "output_text") {
      const json* t = field(content[k], "text");
      if (!t || !t->is_string()) return bad_request(at + ".text must be a string");
      out += t->get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      return bad_request(fmt::format(
          "{}: '{}' parts are not supported by this server (text models: input_text)", at, type));
    } else {
      return bad_request(
          fmt::format("{}: content part type '{}' is unknown (input_text, "
                      "output_text)",
                      at, type.empty() ? "(no type)" : type));
    }
  }
  return {};
}

// `input` → OpenAI chat messages appended to `out`. `names` maps call ids of earlier
// turns to their function names (tool messages carry them for the templates).
Opt translate_input(const json& input, std::map<std::string, std::string>& names, json& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return {};
  }
  if (!input.is_array()) return bad_request("'input' must be a string or an array of items");
  if (input.empty()) return bad_request("'input' must not be empty");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) return bad_request(where + " must be an object");
    const std::string type = type_of(item);
    if (type.empty() || type == "message") {
      const json* role_j = field(item, "role");
      if (!role_j || !role_j->is_string()) return bad_request(where + ".role must be a string");
      std::string role = role_j->get<std::string>();
      if (role == "developer") role = "system";  // OpenAI's newer name for the system role
      if (role != "user" && role != "assistant" && role != "system") {
        return bad_request(fmt::format(
            "{}.role '{}' is unknown (user, assistant, system, developer)", where, role));
      }
      const json* content = field(item, "content");
      if (!content) return bad_request(where + ".content is required");
      std::string text;
      if (auto e = content_text(*content, where + ".content", text)) return e;
      out.push_back({{"role", role}, {"content", text}});
    } else if (type == "function_call") {
      const json* call_id = field(item, "call_id");
      const json* name = field(item, "name");
      const json* args = field(item, "arguments");
      if (!call_id || !call_id->is_string())
        return bad_request(where + ".call_id must be a string");
      if (!name || !name->is_string()) return bad_request(where + ".name must be a string");
      if (!args || !args->is_string()) {
        return bad_request(where + ".arguments must be a string (JSON text)");
      }
      names[call_id->get<std::string>()] = name->get<std::string>();
      json call{{"id", *call_id},
                {"type", "function"},
                {"function", {{"name", *name}, {"arguments", *args}}}};
      // Calls of one turn (and the text before them) are one assistant message.
      if (!out.empty() && out.back().value("role", "") == "assistant") {
        json& last = out.back();
        if (!last.contains("tool_calls")) last["tool_calls"] = json::array();
        last["tool_calls"].push_back(std::move(call));
      } else {
        out.push_back(
            {{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}});
      }
    } else if (type == "function_call_output") {
      const json* call_id = field(item, "call_id");
      const json* output = field(item, "output");
      if (!call_id || !call_id->is_string())
        return bad_request(where + ".call_id must be a string");
      if (!output) return bad_request(where + ".output is required");
      std::string text;
      if (auto e = content_text(*output, where + ".output", text)) return e;
      json tm{{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}};
      if (auto it = names.find(call_id->get<std::string>()); it != names.end()) {
        tm["name"] = it->second;
      }
      out.push_back(std::move(tm));
    } else {
      return bad_request(fmt::format(
          "{}: item type '{}' is not supported (message, function_call, function_call_output)",
          where, type));
    }
  }
  return {};
}

// tools [{type: function, name, description, parameters, strict}] → OpenAI's nested ones.
Opt translate_tools(const json& tools, json& out) {
  if (!tools.is_array()) return bad_request("'tools' must be an array");
  out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object()) return bad_request(fmt::format("tools[{}] must be an object", i));
    const std::string type = type_of(t);
    if (type != "function") {
      return bad_request(
          fmt::format("tools[{}]: '{}' tools are not supported by this server (only 'function')", i,
                      type.empty() ? "(no type)" : type));
    }
    const json* name = field(t, "name");
    if (!name || !name->is_string()) {
      return bad_request(fmt::format("tools[{}].name must be a string", i));
    }
    json fn{{"name", *name}};
    if (const json* p = field(t, "parameters")) {
      if (!p->is_object()) {
        return bad_request(fmt::format("tools[{}].parameters must be a JSON Schema object", i));
      }
      fn["parameters"] = *p;
    }
    if (const json* d = field(t, "description")) {
      if (!d->is_string()) {
        return bad_request(fmt::format("tools[{}].description must be a string", i));
      }
      fn["description"] = *d;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return {};
}

// tool_choice: "auto" | "none" | "required" | {type: function, name}.
Opt translate_tool_choice(const json& tc, json& oa) {
  if (tc.is_string()) {
    oa["tool_choice"] = tc;  // the chat parser names the unknown ones
    return {};
  }
  if (!tc.is_object()) return bad_request("'tool_choice' must be a string or an object");
  const std::string type = type_of(tc);
  if (type != "function") {
    return bad_request(
        fmt::format("tool_choice type '{}' is not supported ('auto', 'none', 'required' or "
                    "{{\"type\": \"function\", \"name\"}})",
                    type.empty() ? "(no type)" : type));
  }
  const json* name = field(tc, "name");
  if (!name || !name->is_string()) return bad_request("tool_choice 'function' needs 'name'");
  oa["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  return {};
}

// text.format: {type: text} | {type: json_object} | {type: json_schema, name, schema, strict}.
Opt translate_text(const json& text, json& oa) {
  if (!text.is_object()) return bad_request("'text' must be an object");
  const json* format = field(text, "format");
  if (!format) return {};
  if (!format->is_object()) return bad_request("text.format must be an object with a 'type'");
  const std::string type = type_of(*format);
  if (type == "text") return {};
  if (type == "json_object") {
    oa["response_format"] = {{"type", "json_object"}};
    return {};
  }
  if (type == "json_schema") {
    const json* schema = field(*format, "schema");
    if (!schema || !schema->is_object()) {
      return bad_request("text.format json_schema needs 'schema' (a JSON Schema object)");
    }
    oa["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", *schema}}}};
    return {};
  }
  return bad_request(
      fmt::format("text.format type '{}' is unknown (text, json_object, json_schema)",
                  type.empty() ? "(no type)" : type));
}

// What a request carries besides the chat request: echoed in the response object and
// used to store it.
struct ResponsesRequest {
  CompletionRequest chat;
  json echo = json::object();         // request fields the response object repeats
  json conversation = json::array();  // earlier turns + this input (no instructions)
  bool store = true;
  bool summary = false;  // reasoning.summary asked for: the reasoning item's summary filled
};

Opt translate_request(ServerContext& ctx, const json& j, ResponsesRequest& r) {
  json oa = json::object();
  json& echo = r.echo;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) return bad_request("'model' must be a string");
    oa["model"] = *m;
  }
  if (const json* b = field(j, "background")) {
    if (!b->is_boolean()) return bad_request("'background' must be a boolean");
    if (b->get<bool>()) {
      return bad_request(
          "'background': true is not supported by this server (responses run "
          "while the request waits, or stream)");
    }
  }
  if (const json* s = field(j, "store")) {
    if (!s->is_boolean()) return bad_request("'store' must be a boolean");
    r.store = s->get<bool>();
  }
  if (const json* md = field(j, "metadata")) {
    if (!md->is_object()) return bad_request("'metadata' must be an object of strings");
    for (const auto& [k, v] : md->items()) {
      if (!v.is_string()) return bad_request(fmt::format("metadata['{}'] must be a string", k));
    }
    echo["metadata"] = *md;
  }
  // A thinking template's block becomes a reasoning item (always split: the item is
  // how this API shows it); reasoning.effort is its budget (reasoning_effort's levels).
  oa["reasoning_format"] = "deepseek";
  if (const json* rs = field(j, "reasoning")) {
    if (!rs->is_object()) return bad_request("'reasoning' must be an object");
    if (const json* eff = field(*rs, "effort")) {
      int32_t budget = -1;
      if (auto e = effort_budget(*eff, "reasoning.effort", budget)) return e;
      oa["thinking_budget_tokens"] = budget;
    }
    if (const json* sm = field(*rs, "summary")) {
      if (!sm->is_string() || (*sm != "auto" && *sm != "concise" && *sm != "detailed")) {
        return bad_request("'reasoning.summary' must be \"auto\", \"concise\" or \"detailed\"");
      }
      r.summary = true;
    }
    echo["reasoning"] = json{{"effort", rs->value("effort", json(nullptr))},
                             {"summary", rs->value("summary", json(nullptr))}};
  }
  if (const json* mt = field(j, "max_output_tokens")) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) {
      return bad_request("'max_output_tokens' must be an integer >= 1");
    }
    oa["max_tokens"] = *mt;
    echo["max_output_tokens"] = *mt;
  }
  // OpenAI's sampling fields, and the chat route's extensions a local client may send.
  for (const char* key : {"temperature", "top_p", "top_k", "min_p", "seed", "logit_bias", "stream",
                          "parallel_tool_calls"}) {
    if (const json* v = field(j, key)) oa[key] = *v;
  }
  std::map<std::string, std::string> names;
  if (const json* prev = field(j, "previous_response_id")) {
    if (!prev->is_string()) return bad_request("'previous_response_id' must be a string");
    auto entry = ctx.responses->get(prev->get<std::string>());
    if (!entry) {
      return not_found(
          fmt::format("Previous response with id '{}' not found.", prev->get<std::string>()));
    }
    r.conversation = std::move(entry->conversation);
    for (const json& m : r.conversation) {
      for (const json& c : m.value("tool_calls", json::array())) {
        names[c.value("id", "")] = c["function"].value("name", "");
      }
    }
    echo["previous_response_id"] = *prev;
  }
  const json* input = field(j, "input");
  if (!input) return bad_request("'input' is required");
  if (auto e = translate_input(*input, names, r.conversation)) return e;
  json messages = json::array();
  if (const json* ins = field(j, "instructions")) {
    if (!ins->is_string()) return bad_request("'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", *ins}});
    echo["instructions"] = *ins;
  }
  for (const json& m : r.conversation) messages.push_back(m);
  if (!messages.empty() && messages.back().value("role", "") == "assistant") {
    return bad_request("input: a final assistant message (a prefill to continue) is not supported");
  }
  oa["messages"] = std::move(messages);
  if (const json* t = field(j, "tools")) {
    json tools;
    if (auto e = translate_tools(*t, tools)) return e;
    oa["tools"] = std::move(tools);
    echo["tools"] = *t;
  }
  if (const json* tc = field(j, "tool_choice")) {
    if (auto e = translate_tool_choice(*tc, oa)) return e;
    echo["tool_choice"] = *tc;
  }
  if (const json* tx = field(j, "text")) {
    if (auto e = translate_text(*tx, oa)) return e;
    echo["text"] = *tx;
  }
  return parse_completion_json(oa, Endpoint::kChat, ctx.tok.n_vocab(), r.chat);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The response object without output (status in_progress), the request's fields echoed.
json response_base(const std::string& id, const std::string& model, const ResponsesRequest& r) {
  const json& e = r.echo;
  const auto& s = r.chat.seq.sampler;
  return json{{"id", id},
              {"object", "response"},
              {"created_at", unix_now()},
              {"status", "in_progress"},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", e.value("instructions", json(nullptr))},
              {"max_output_tokens", e.value("max_output_tokens", json(nullptr))},
              {"metadata", e.value("metadata", json::object())},
              {"model", model},
              {"output", json::array()},
              {"parallel_tool_calls", r.chat.tools.parallel},
              {"previous_response_id", e.value("previous_response_id", json(nullptr))},
              {"reasoning", e.value("reasoning", json{{"effort", nullptr}, {"summary", nullptr}})},
              {"store", r.store},
              {"temperature", s.temp},
              {"text", e.value("text", json{{"format", {{"type", "text"}}}})},
              {"tool_choice", e.value("tool_choice", json("auto"))},
              {"tools", e.value("tools", json::array())},
              {"top_p", s.top_p},
              {"truncation", "disabled"},
              {"usage", nullptr}};
}

json message_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (std::string(status) == "completed") {
    content.push_back({{"type", "output_text"},
                       {"text", text},
                       {"annotations", json::array()},
                       {"logprobs", json::array()}});
  }
  return json{{"type", "message"},
              {"id", id},
              {"status", status},
              {"role", "assistant"},
              {"content", std::move(content)}};
}

// The thinking block's text as a reasoning item: its `content` (reasoning_text); the
// `summary` holds the same text when one was asked for (reasoning.summary: the server
// does not summarize).
json reasoning_item(const std::string& id, const std::string& text, bool summary,
                    const char* status) {
  json content = json::array();
  json sum = json::array();
  if (std::string(status) == "completed") {
    content.push_back({{"type", "reasoning_text"}, {"text", text}});
    if (summary) sum.push_back({{"type", "summary_text"}, {"text", text}});
  }
  return json{{"type", "reasoning"},
              {"id", id},
              {"summary", std::move(sum)},
              {"content", std::move(content)},
              {"status", status}};
}

json call_item(const ToolCall& c, const std::string& id, const char* status) {
  return json{{"type", "function_call"},
              {"id", id},
              {"call_id", c.id},
              {"name", c.name},
              {"arguments", std::string(status) == "completed" ? c.arguments : std::string()},
              {"status", status}};
}

bool incomplete(engine::SeqStop stop) {
  return stop == engine::SeqStop::kNPredict || stop == engine::SeqStop::kContext;
}

// The finished response: status, output items, usage; the assistant turn is appended
// to the conversation and, with `store`, both are kept.
class Finisher {
 public:
  Finisher(ServerContext& ctx, json base, ResponsesRequest& r)
      : ctx_(ctx),
        response_(std::move(base)),
        conversation_(std::move(r.conversation)),
        store_(r.store),
        summary_(r.summary) {}

  const std::string& message_id() const { return message_id_; }
  const std::string& reasoning_id() const { return reasoning_id_; }
  bool summary() const { return summary_; }
  std::string call_item_id(size_t i) {
    while (call_ids_.size() <= i) call_ids_.push_back(random_id("fc_"));
    return call_ids_[i];
  }
  json& response() { return response_; }

  // `text`: the content (tool calls taken out); `calls`: the parsed calls.
  // `reasoning`: the thinking block's text (an item before the message when not empty).
  const json& finish(const JobEvent& ev, const std::string& text,
                     const std::vector<ToolCall>& calls, bool with_message,
                     const std::string& reasoning) {
    const bool cut = calls.empty() && incomplete(ev.stop);
    json output = json::array();
    if (!reasoning.empty()) {
      output.push_back(reasoning_item(reasoning_id_, reasoning, summary_, "completed"));
    }
    if (with_message) {
      output.push_back(message_item(message_id_, text, "completed"));
      if (cut) output.back()["status"] = "incomplete";  // as OpenAI marks a cut message
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      output.push_back(call_item(calls[i], call_item_id(i), "completed"));
    }
    response_["status"] = cut ? "incomplete" : "completed";
    response_["incomplete_details"] = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
    response_["output"] = std::move(output);
    response_["usage"] = {{"input_tokens", ev.n_prompt},
                          {"input_tokens_details", {{"cached_tokens", ev.n_reused}}},
                          {"output_tokens", ev.n_generated},
                          {"output_tokens_details", {{"reasoning_tokens", ev.n_reasoning}}},
                          {"total_tokens", ev.n_prompt + ev.n_generated}};
    json turn{{"role", "assistant"}, {"content", with_message ? text : std::string()}};
    if (!calls.empty()) {
      turn["tool_calls"] = json::array();
      for (const ToolCall& c : calls) {
        turn["tool_calls"].push_back(
            {{"id", c.id},
             {"type", "function"},
             {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      }
    }
    conversation_.push_back(std::move(turn));
    if (store_) ctx_.responses->put(response_["id"].get<std::string>(), response_, conversation_);
    return response_;
  }

 private:
  ServerContext& ctx_;
  json response_;
  json conversation_;
  bool store_;
  bool summary_;
  std::string message_id_ = random_id("msg_");
  std::string reasoning_id_ = random_id("rs_");
  std::vector<std::string> call_ids_;
};

ApiError event_error(const JobEvent& ev) {
  return ApiError{.status = ev.error_status, .type = "server_error", .message = ev.error};
}

// The Responses API's stream: response.created, response.in_progress; a message item
// (output_item.added, content_part.added, output_text.delta..., output_text.done,
// content_part.done, output_item.done) opened with the first text that is not only
// whitespace; function_call items at the end (their arguments in one delta, known once
// the call is parsed); response.completed or response.incomplete. Every event carries
// its sequence_number. A failed job ends with `error` and response.failed.
class ResponsesSse final : public SseWriter {
 public:
  ResponsesSse(std::unique_ptr<Finisher> fin, std::unique_ptr<ToolCallParser> tools)
      : fin_(std::move(fin)), tools_(std::move(tools)) {}

  std::string head() override {
    const json& r = fin_->response();
    std::string out = event("response.created", {{"response", r}});
    out += event("response.in_progress", {{"response", r}});
    return out;
  }

  std::string frames(const JobEvent& ev) override {
    if (!ev.error.empty()) {
      json& r = fin_->response();
      r["status"] = "failed";
      r["error"] = {{"code", "server_error"}, {"message", ev.error}};
      std::string out =
          event("error", {{"code", "server_error"}, {"message", ev.error}, {"param", nullptr}});
      out += event("response.failed", {{"response", r}});
      return out;
    }
    std::string out;
    // The reasoning item first (output_index 0): opened by the first reasoning, done
    // when the answer starts or the response ends.
    if (!ev.reasoning.empty()) {
      if (!reasoning_open_) {
        out += event("response.output_item.added",
                     {{"output_index", 0},
                      {"item", reasoning_item(fin_->reasoning_id(), "", false, "in_progress")}});
        reasoning_open_ = true;
        msg_index_ = 1;
      }
      reasoning_ += ev.reasoning;
      out += event("response.reasoning_text.delta", {{"item_id", fin_->reasoning_id()},
                                                     {"output_index", 0},
                                                     {"content_index", 0},
                                                     {"delta", ev.reasoning}});
    }
    if (reasoning_open_ && (!ev.text.empty() || ev.final)) {
      out += event("response.reasoning_text.done", {{"item_id", fin_->reasoning_id()},
                                                    {"output_index", 0},
                                                    {"content_index", 0},
                                                    {"text", reasoning_}});
      out += event("response.output_item.done",
                   {{"output_index", 0},
                    {"item", reasoning_item(fin_->reasoning_id(), reasoning_, fin_->summary(),
                                            "completed")}});
      reasoning_open_ = false;
    }
    std::string text = tools_ ? tools_->feed(ev.text) : ev.text;
    if (tools_ && ev.final) text += tools_->finish();
    const std::vector<ToolCall> none;
    const std::vector<ToolCall>& calls = tools_ ? tools_->calls() : none;
    if (open_) {
      out += text_delta(text);
    } else {
      pending_ += text;
      if (!blank(pending_) || (ev.final && calls.empty())) {
        out += event("response.output_item.added",
                     {{"output_index", msg_index_},
                      {"item", message_item(fin_->message_id(), "", "in_progress")}});
        out += event(
            "response.content_part.added",
            {{"item_id", fin_->message_id()},
             {"output_index", msg_index_},
             {"content_index", 0},
             {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
        open_ = true;
        out += text_delta(pending_);
        pending_.clear();
      }
    }
    if (!ev.final) return out;
    const std::string& id = fin_->message_id();
    if (open_) {
      out += event("response.output_text.done", {{"item_id", id},
                                                 {"output_index", msg_index_},
                                                 {"content_index", 0},
                                                 {"text", text_},
                                                 {"logprobs", json::array()}});
      out += event(
          "response.content_part.done",
          {{"item_id", id},
           {"output_index", msg_index_},
           {"content_index", 0},
           {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}}}});
      json item = message_item(id, text_, "completed");
      if (calls.empty() && incomplete(ev.stop)) item["status"] = "incomplete";
      out += event("response.output_item.done",
                   {{"output_index", msg_index_}, {"item", std::move(item)}});
    }
    const int base = msg_index_ + (open_ ? 1 : 0);
    for (size_t i = 0; i < calls.size(); ++i) {
      const int index = base + static_cast<int>(i);
      const std::string item_id = fin_->call_item_id(i);
      out +=
          event("response.output_item.added",
                {{"output_index", index}, {"item", call_item(calls[i], item_id, "in_progress")}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", item_id}, {"output_index", index}, {"delta", calls[i].arguments}});
      out += event("response.function_call_arguments.done", {{"item_id", item_id},
                                                             {"output_index", index},
                                                             {"name", calls[i].name},
                                                             {"arguments", calls[i].arguments}});
      out += event("response.output_item.done",
                   {{"output_index", index}, {"item", call_item(calls[i], item_id, "completed")}});
    }
    const json& r = fin_->finish(ev, text_, calls, open_, reasoning_);
    out += event(r["status"] == "incomplete" ? "response.incomplete" : "response.completed",
                 {{"response", r}});
    return out;
  }

 private:
  std::string event(const char* name, json data) {
    json ordered{{"type", name}, {"sequence_number", seq_++}};
    for (auto& [k, v] : data.items()) ordered[k] = std::move(v);
    return fmt::format("event: {}\ndata: {}\n\n", name, dump(ordered));
  }
  std::string text_delta(const std::string& text) {
    if (text.empty()) return {};
    text_ += text;
    return event("response.output_text.delta", {{"item_id", fin_->message_id()},
                                                {"output_index", msg_index_},
                                                {"content_index", 0},
                                                {"delta", text},
                                                {"logprobs", json::array()}});
  }

  std::unique_ptr<Finisher> fin_;
  std::unique_ptr<ToolCallParser> tools_;
  std::string pending_;    // whitespace held until text or a call decides it
  std::string text_;       // the message's text so far
  bool open_ = false;      // the message item is open
  std::string reasoning_;  // the reasoning item's text so far
  bool reasoning_open_ = false;
  int msg_index_ = 0;  // the message item's output_index (1 after a reasoning item)
  int64_t seq_ = 0;
};

void reject(ServerContext& ctx, http::Response& res, const ApiError& e) {
  ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
  reply_error(res, e);
}

}  // namespace

void handle_responses(ServerContext& ctx, const std::string& body, http::Response& res) {
  json j;
  ResponsesRequest r;
  if (auto e = parse_object(body, j)) return reject(ctx, res, *e);
  if (auto e = translate_request(ctx, j, r)) return reject(ctx, res, *e);
  SubmittedJob job;
  if (auto e = submit_completion(ctx, r.chat, job)) return reply_error(res, *e);
  const std::string model = r.chat.model.empty() ? ctx.options.model_id : r.chat.model;
  auto fin = std::make_unique<Finisher>(ctx, response_base(random_id("resp_"), model, r), r);
  std::unique_ptr<ToolCallParser> tools;
  if (r.chat.tools.active()) tools = std::make_unique<ToolCallParser>(job.format, true);
  if (r.chat.stream) {
    return reply_stream(ctx, res, std::move(job.stream),
                        std::make_unique<ResponsesSse>(std::move(fin), std::move(tools)));
  }
  std::string text, reasoning;
  const JobEvent ev = collect_events(*job.stream, [&](const JobEvent& e) {
    text += e.text;
    reasoning += e.reasoning;
  });
  if (!ev.error.empty()) return reply_error(res, event_error(ev));
  std::vector<ToolCall> calls;
  if (tools) {
    text = tools->feed_all(text);
    calls = tools->calls();
  }
  const bool with_message = calls.empty() || !blank(text);
  reply_json(res, fin->finish(ev, text, calls, with_message, reasoning));
}

void handle_response_get(ServerContext& ctx, const std::string& id, http::Response& res) {
  auto entry = ctx.responses->get(id);
  if (!entry)
    return reply_error(res, not_found(fmt::format("Response with id '{}' not found.", id)));
  reply_json(res, entry->response);
}

void handle_response_delete(ServerContext& ctx, const std::string& id, http::Response& res) {
  if (!ctx.responses->erase(id)) {
    return reply_error(res, not_found(fmt::format("Response with id '{}' not found.", id)));
  }
  reply_json(res, {{"id", id}, {"object", "response"}, {"deleted", true}});
}

void handle_response_cancel(ServerContext& ctx, const std::string& id, http::Response& res) {
  // OpenAI cancels only background responses; every response here has finished by the
  // time it can be named (it is stored at its end).
  if (!ctx.responses->get(id)) {
    return reply_error(res, not_found(fmt::format("Response with id '{}' not found.", id)));
  }
  reply_error(res, bad_request("Only responses created with background=true can be cancelled; "
                               "this server runs none in the background."));
}

}  // namespace minfer::server
