// Stage 17 (HTTP): OpenAI tool calling — `tools` + `tool_choice` validated (each
// function's parameters compiled as a JSON Schema), the prompt rendered through the
// model's chat template with `tools`, `required` / a named function enforced by a grammar
// built from the parameter schemas, and the model's output parsed back into
// `tool_calls` (whole or streamed).
// Formats, read from the template source:
//   hermes  — the template writes <tool_call> (Qwen2.5, Hermes 2 Pro, ...): the model
//             answers <tool_call>{"name": ..., "arguments": {...}}</tool_call>, text
//             before a call is content;
//   llama3  — a Llama 3.x template (<|start_header_id|> and `tools`): the reply is one
//             JSON object {"name": ..., "parameters": {...}} (<|python_tag|> allowed
//             before it);
//   generic — any other template (no `tools` support, or a format not read here), as
//             llama-server's generic handler does: the tools and the answer format go
//             into the system message and the reply is JSON, {"tool_call": {"name",
//             "arguments"}} or, with tool_choice auto, {"response": "..."}; the grammar
//             holds it to that shape in every mode.
// tool_choice auto (hermes, llama3): the output is not constrained; a call is parsed when
// the model writes one. none: the tools are not rendered and nothing is parsed.
// Invariants: a bad `tools` / `tool_choice` is an ApiError before a slot is taken; a
// parsed call's arguments are the JSON text of an object; text that does not parse as a
// call is returned as content, never dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/renderer.h"
#include "core/result.h"
#include "server/api.h"

namespace minfer::server {

enum class ToolFormat : uint8_t { kHermes, kLlama3, kGeneric };
std::string_view tool_format_name(ToolFormat f);
ToolFormat tool_format(std::string_view template_source);

// `tools`, `tool_choice`, `parallel_tool_calls` of a chat request body.
std::optional<ApiError> parse_tools(const json& body, ToolRequest& out);

// The assistant message's calls in the request history ({id, type, function {name,
// arguments}}), checked; `arguments` stays a string here.
std::optional<ApiError> check_history_tool_calls(const json& calls, size_t index);

// Renders the messages (OpenAI JSON) with the tools through the template: the
// arguments of history calls become objects (what tool templates index into); for
// the generic format, the tool list and answer format go into the system message and
// history calls become the JSON the model would have written.
// `vars`: the request's chat_template_kwargs.
Result<std::string> render_tool_prompt(const chat::ChatRenderer& renderer, const json& messages,
                                       const ToolRequest& tools, ToolFormat format,
                                       const json& vars = json::object());

// GBNF the output must match, or "" (auto on hermes / llama3: unconstrained).
Result<std::string> tool_grammar(const ToolRequest& tools, ToolFormat format);

struct ToolCall {
  std::string id;  // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // JSON text of an object
};

// Splits the generated text into content and tool calls as it streams in. feed()
// returns the content that is safe to send now (text that may begin a call is held);
// finish() returns the rest of the content, and the calls are in calls().
class ToolCallParser {
 public:
  ToolCallParser(ToolFormat format, bool active) : format_(format), active_(active) {}
  std::string feed(std::string_view text);
  std::string finish();
  // A whole output at once (a reply that is not streamed): feed() then finish().
  std::string feed_all(std::string_view text) {
    std::string out = feed(text);
    out += finish();
    return out;
  }
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  std::string feed_hermes();
  ToolFormat format_;
  bool active_;
  std::string buf_;  // held text
  enum class Mode : uint8_t { kUndecided, kText, kJson } mode_ = Mode::kUndecided;
  std::vector<ToolCall> calls_;
};

}  // namespace minfer::server
