// Stage 17 (HTTP): OpenAI tool calling (server/tools.h).
#include "server/tools.h"

#include <fmt/format.h>

#include <random>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace minfer::server {
namespace {

using Opt = std::optional<ApiError>;

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string call_id() {
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                   std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

// Local $refs of a schema placed at JSON pointer `at` inside a larger document.
void rebase_refs(json& s, const std::string& at) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "$ref" && it.value().is_string()) {
        const std::string ref = it.value().get<std::string>();
        if (!ref.empty() && ref[0] == '#') it.value() = at + ref.substr(1);
      } else {
        rebase_refs(it.value(), at);
      }
    }
  } else if (s.is_array()) {
    for (json& e : s) rebase_refs(e, at);
  }
}

// {"name": const, KEY: parameters} as a schema placed at pointer `at`.
json call_schema(const ToolSpec& t, const char* key, const std::string& at) {
  json params = t.parameters;
  rebase_refs(params, at + "/properties/" + key);
  return json{{"type", "object"},
              {"properties", {{"name", {{"const", t.name}}}, {key, std::move(params)}}},
              {"required", json::array({"name", key})},
              {"additionalProperties", false}};
}

// One call of the allowed tools (every tool, or the named one), at pointer `at`.
json calls_schema(const ToolRequest& r, const char* key, const std::string& at) {
  std::vector<const ToolSpec*> allowed;
  for (const ToolSpec& t : r.tools) {
    if (r.choice != ToolChoice::kNamed || t.name == r.named) allowed.push_back(&t);
  }
  if (allowed.size() == 1) return call_schema(*allowed[0], key, at);
  json any = json::array();
  for (size_t i = 0; i < allowed.size(); ++i) {
    any.push_back(call_schema(*allowed[i], key, fmt::format("{}/anyOf/{}", at, i)));
  }
  return json{{"anyOf", std::move(any)}};
}

// The schema's GBNF with its start rule renamed to `name` (the converter writes the
// start rule first as "root ::= ..."; no other rule refers to it).
Result<std::string> schema_rule(const json& schema, const std::string& name) {
  MINFER_TRY(std::string g, grammar::json_schema_to_gbnf(schema.dump()));
  if (!g.starts_with("root ::= ")) return make_error("tool grammar: unexpected converter output");
  return name + g.substr(4);
}

// The generic format's answer schema.
json generic_schema(const ToolRequest& r) {
  json call;
  const char* key = r.parallel ? "tool_calls" : "tool_call";
  const std::string at = r.choice == ToolChoice::kAuto ? "#/anyOf/0" : "#";
  if (r.parallel) {
    call = json{{"type", "array"},
                {"items", calls_schema(r, "arguments", at + "/properties/tool_calls/items")},
                {"minItems", 1}};
  } else {
    call = calls_schema(r, "arguments", at + "/properties/tool_call");
  }
  json obj{{"type", "object"},
           {"properties", {{key, std::move(call)}}},
           {"required", json::array({key})},
           {"additionalProperties", false}};
  if (r.choice != ToolChoice::kAuto) return obj;
  json response{{"type", "object"},
                {"properties", {{"response", {{"type", "string"}}}}},
                {"required", json::array({"response"})},
                {"additionalProperties", false}};
  return json{{"anyOf", json::array({std::move(obj), std::move(response)})}};
}

// A history call's arguments as the templates index them: an object when the string
// parses as one.
json arguments_object(const json& fn) {
  const json* a = field(fn, "arguments");
  if (!a) return json::object();
  if (a->is_string()) {
    json parsed = json::parse(a->get<std::string>(), nullptr, false);
    if (!parsed.is_discarded()) return parsed;
  }
  return *a;
}

// {"name", "arguments"/"parameters"} → a call (arguments compact JSON of an object).
std::optional<ToolCall> call_from(const json& j) {
  if (!j.is_object()) return std::nullopt;
  const json* name = field(j, "name");
  if (!name || !name->is_string()) return std::nullopt;
  const json* args = field(j, "arguments");
  if (!args) args = field(j, "parameters");
  json a = args ? *args : json::object();
  if (a.is_string()) a = json::parse(a.get<std::string>(), nullptr, false);
  if (!a.is_object()) return std::nullopt;
  return ToolCall{.id = call_id(), .name = name->get<std::string>(), .arguments = dump(a)};
}

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

}  // namespace

std::string_view tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kGeneric:
      return "generic";
  }
  return "?";
}

ToolFormat tool_format(std::string_view src) {
  if (src.find("tools") == std::string_view::npos) return ToolFormat::kGeneric;
  if (src.find("<tool_call>") != std::string_view::npos) return ToolFormat::kHermes;
  if (src.find("<|start_header_id|>") != std::string_view::npos) return ToolFormat::kLlama3;
  return ToolFormat::kGeneric;
}

Opt parse_tools(const json& j, ToolRequest& out) {
  const json* tools = field(j, "tools");
  if (tools) {
    if (!tools->is_array()) return bad_request("'tools' must be an array");
    if (tools->size() > 128) return bad_request("'tools' has more than 128 entries");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      if (!t.is_object()) return bad_request(fmt::format("tools[{}] must be an object", i));
      const json* type = field(t, "type");
      if (!type || !type->is_string() || *type != "function") {
        return bad_request(fmt::format("tools[{}].type must be \"function\"", i));
      }
      const json* fn = field(t, "function");
      if (!fn || !fn->is_object()) {
        return bad_request(fmt::format("tools[{}].function must be an object", i));
      }
      const json* name = field(*fn, "name");
      if (!name || !name->is_string()) {
        return bad_request(fmt::format("tools[{}].function.name is required (a string)", i));
      }
      ToolSpec spec{.name = name->get<std::string>(), .parameters = json::object()};
      if (!valid_name(spec.name)) {
        return bad_request(
            fmt::format("tools[{}].function.name '{}' must be 1 to 64 of a-z, A-Z, 0-9, _, - and .",
                        i, spec.name));
      }
      for (const ToolSpec& other : out.tools) {
        if (other.name == spec.name) {
          return bad_request(
              fmt::format("tools[{}].function.name '{}' is given twice", i, spec.name));
        }
      }
      if (const json* p = field(*fn, "parameters")) {
        if (!p->is_object()) {
          return bad_request(
              fmt::format("tools[{}].function.parameters must be a JSON Schema object", i));
        }
        spec.parameters = *p;
      } else {
        spec.parameters = json{{"type", "object"}, {"properties", json::object()}};
      }
      if (auto g = grammar::json_schema_to_gbnf(spec.parameters.dump()); !g.ok()) {
        return bad_request(fmt::format("tools[{}].function.parameters: {}", i, g.error().message));
      }
      out.tools.push_back(std::move(spec));
    }
    out.tools_json = *tools;
  }
  if (const json* tc = field(j, "tool_choice")) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c == "auto") {
        out.choice = ToolChoice::kAuto;
      } else if (c == "none") {
        out.choice = ToolChoice::kNone;
      } else if (c == "required") {
        out.choice = ToolChoice::kRequired;
      } else {
        return bad_request(
            fmt::format("tool_choice '{}' is unknown (auto, none, required, or "
                        "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}})",
                        c));
      }
    } else if (tc->is_object()) {
      const json* fn = field(*tc, "function");
      const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      const json* type = field(*tc, "type");
      if (!type || *type != "function" || !name || !name->is_string()) {
        return bad_request(
            "tool_choice must be auto, none, required or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}");
      }
      out.choice = ToolChoice::kNamed;
      out.named = name->get<std::string>();
      bool found = false;
      for (const ToolSpec& t : out.tools) found = found || t.name == out.named;
      if (!found) {
        return bad_request(
            fmt::format("tool_choice names the function '{}', which is not in 'tools'", out.named));
      }
    } else {
      return bad_request("tool_choice must be a string or an object");
    }
    if ((out.choice == ToolChoice::kRequired) && out.tools.empty()) {
      return bad_request("tool_choice 'required' needs a non-empty 'tools'");
    }
  }
  if (const json* p = field(j, "parallel_tool_calls")) {
    if (!p->is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean");
    out.parallel = p->get<bool>();
  }
  return {};
}

Opt check_history_tool_calls(const json& calls, size_t index) {
  if (!calls.is_array()) {
    return bad_request(fmt::format("messages[{}].tool_calls must be an array", index));
  }
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string()) {
      return bad_request(
          fmt::format("messages[{}].tool_calls[{}].function.name must be a string", index, k));
    }
    const json* args = field(*fn, "arguments");
    if (args && !args->is_string() && !args->is_object()) {
      return bad_request(fmt::format(
          "messages[{}].tool_calls[{}].function.arguments must be a JSON string", index, k));
    }
  }
  return {};
}

Result<std::string> render_tool_prompt(const chat::ChatRenderer& renderer, const json& messages,
                                       const ToolRequest& tools, ToolFormat format,
                                       const json& vars) {
  json msgs = json::array();
  for (const json& m : messages) {
    json c = m;
    if (!c.contains("content") || c["content"].is_null()) c["content"] = "";
    if (c.contains("tool_calls")) {
      if (format == ToolFormat::kGeneric) {
        // What the model would have answered in the generic format.
        json calls = json::array();
        for (const json& tc : c["tool_calls"]) {
          calls.push_back(
              {{"name", tc["function"]["name"]}, {"arguments", arguments_object(tc["function"])}});
        }
        const json answer = calls.size() == 1 ? json{{"tool_call", calls[0]}}
                                              : json{{"tool_calls", std::move(calls)}};
        c["content"] = dump(answer);
        c.erase("tool_calls");
      } else {
        for (json& tc : c["tool_calls"]) {
          tc["function"]["arguments"] = arguments_object(tc["function"]);
          if (!tc.contains("type")) tc["type"] = "function";
        }
      }
    }
    msgs.push_back(std::move(c));
  }
  if (format == ToolFormat::kGeneric) {
    if (tools.active()) {
      std::string text;
      if (tools.choice == ToolChoice::kAuto) {
        text =
            "You can call tools. Answer in JSON only: {\"tool_call\": {\"name\": <function name>, "
            "\"arguments\": <arguments object>}} to call a tool, or {\"response\": <your reply>} "
            "to answer directly.";
      } else {
        text =
            "Call a tool. Answer in JSON only: {\"tool_call\": {\"name\": <function name>, "
            "\"arguments\": <arguments object>}}.";
      }
      if (tools.parallel) {
        text += " Several calls: {\"tool_calls\": [<call>, ...]}.";
      }
      json fns = json::array();
      for (const ToolSpec& t : tools.tools) {
        if (tools.choice == ToolChoice::kNamed && t.name != tools.named) continue;
        fns.push_back(t.name);
      }
      text += "\nThe tools (function definitions with JSON Schemas of their arguments):\n" +
              dump(tools.tools_json);
      if (tools.choice == ToolChoice::kNamed) text += "\nCall the function " + tools.named + ".";
      if (!msgs.empty() && msgs[0]["role"] == "system") {
        msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + text;
      } else {
        msgs.insert(msgs.begin(), json{{"role", "system"}, {"content", text}});
      }
    }
    return renderer.render_json(msgs, nullptr, true, vars);
  }
  return renderer.render_json(msgs, tools.active() ? tools.tools_json : json(nullptr), true, vars);
}

Result<std::string> tool_grammar(const ToolRequest& r, ToolFormat format) {
  if (!r.active()) return std::string();
  if (format == ToolFormat::kGeneric) return schema_rule(generic_schema(r), "root");
  if (r.choice == ToolChoice::kAuto) return std::string();
  const char* key = format == ToolFormat::kLlama3 ? "parameters" : "arguments";
  MINFER_TRY(std::string call, schema_rule(calls_schema(r, key, "#"), "tool-call-json"));
  // Llama 3.x templates take one call per assistant turn: parallel_tool_calls is not
  // used there.
  if (format == ToolFormat::kLlama3) return "root ::= tool-call-json\n" + call;
  std::string root =
      "tool-call ::= \"<tool_call>\" \"\\n\"? tool-call-json \"\\n\"? \"</tool_call>\"\n";
  root =
      (r.parallel ? "root ::= tool-call (\"\\n\"? tool-call)*\n" : "root ::= tool-call\n") + root;
  return root + call;
}

std::string ToolCallParser::feed_hermes() {
  std::string out;
  for (;;) {
    if (mode_ != Mode::kJson) {  // kJson here: inside <tool_call> ... </tool_call>
      const size_t open = buf_.find(kOpen);
      if (open != std::string::npos) {
        out += buf_.substr(0, open);
        buf_.erase(0, open + kOpen.size());
        mode_ = Mode::kJson;
        continue;
      }
      // Hold the longest tail that may begin "<tool_call>".
      size_t hold = 0;
      for (size_t k = std::min(buf_.size(), kOpen.size() - 1); k > 0; --k) {
        if (kOpen.starts_with(std::string_view(buf_).substr(buf_.size() - k))) {
          hold = k;
          break;
        }
      }
      out += buf_.substr(0, buf_.size() - hold);
      buf_.erase(0, buf_.size() - hold);
      return out;
    }
    const size_t close = buf_.find(kClose);
    if (close == std::string::npos) return out;
    const std::string body = buf_.substr(0, close);
    buf_.erase(0, close + kClose.size());
    mode_ = Mode::kText;
    if (auto c = call_from(json::parse(trim(body), nullptr, false))) {
      calls_.push_back(std::move(*c));
    } else {
      out += std::string(kOpen) + body + std::string(kClose);  // not a call: text
    }
  }
}

std::string ToolCallParser::feed(std::string_view text) {
  if (!active_) return std::string(text);
  buf_.append(text);
  if (format_ == ToolFormat::kHermes) return feed_hermes();
  if (mode_ == Mode::kUndecided) {
    const std::string_view t = trim(buf_);
    if (t.empty()) return {};
    // Text that may still become <|python_tag|> waits for more.
    if (format_ != ToolFormat::kGeneric && t.size() < kPythonTag.size() &&
        kPythonTag.starts_with(t)) {
      return {};
    }
    const bool json_start =
        t[0] == '{' || format_ == ToolFormat::kGeneric || t.starts_with(kPythonTag);
    mode_ = json_start ? Mode::kJson : Mode::kText;
  }
  if (mode_ == Mode::kJson) return {};  // decided at the end
  std::string out = std::move(buf_);
  buf_.clear();
  return out;
}

std::string ToolCallParser::finish() {
  if (!active_) return {};
  std::string rest = std::move(buf_);
  buf_.clear();
  if (format_ == ToolFormat::kHermes) {
    if (mode_ != Mode::kJson) return rest;
    // An unclosed <tool_call>: a complete call without its closing tag still counts.
    if (auto c = call_from(json::parse(trim(rest), nullptr, false))) {
      calls_.push_back(std::move(*c));
      return {};
    }
    return std::string(kOpen) + rest;
  }
  if (mode_ != Mode::kJson) return rest;
  std::string_view t = trim(rest);
  if (t.starts_with(kPythonTag)) t = trim(t.substr(kPythonTag.size()));
  const json j = json::parse(t, nullptr, false);
  if (j.is_discarded()) return rest;
  if (format_ == ToolFormat::kGeneric) {
    if (const json* resp = j.is_object() ? field(j, "response") : nullptr) {
      return resp->is_string() ? resp->get<std::string>() : dump(*resp);
    }
    std::vector<ToolCall> found;
    if (const json* one = j.is_object() ? field(j, "tool_call") : nullptr) {
      if (auto c = call_from(*one)) found.push_back(std::move(*c));
    } else if (const json* many = j.is_object() ? field(j, "tool_calls") : nullptr) {
      if (many->is_array()) {
        for (const json& e : *many) {
          if (auto c = call_from(e)) found.push_back(std::move(*c));
        }
      }
    }
    if (found.empty()) return rest;
    calls_ = std::move(found);
    return {};
  }
  if (auto c = call_from(j)) {
    calls_.push_back(std::move(*c));
    return {};
  }
  return rest;
}

}  // namespace minfer::server
