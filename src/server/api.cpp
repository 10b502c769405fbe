// Stage 17 (HTTP): OpenAI request validation. Field names and ranges follow the
// OpenAI API reference (chat/completions, completions) and llama.cpp's tools/server
// (top_k, min_p, typical_p, repeat_penalty, seed = -1 random, logit_bias by token id).
#include "server/api.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "grammar/json_schema.h"
#include "server/tools.h"

namespace minfer::server {
namespace {

using Opt = std::optional<ApiError>;

Opt number(const json& j, const char* key, double lo, double hi, float& out) {
  const json* v = field(j, key);
  if (!v) return {};
  if (!v->is_number()) return bad_request(fmt::format("'{}' must be a number", key));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x));
  }
  out = static_cast<float>(x);
  return {};
}

Opt integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t& out) {
  const json* v = field(j, key);
  if (!v) return {};
  if (!v->is_number_integer()) return bad_request(fmt::format("'{}' must be an integer", key));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return bad_request(fmt::format("'{}' must be in [{}, {}]", key, lo, hi));
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x));
  }
  out = x;
  return {};
}

Opt boolean(const json& j, const char* key, bool& out) {
  const json* v = field(j, key);
  if (!v) return {};
  if (!v->is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", key));
  out = v->get<bool>();
  return {};
}

// A message's content: a string, or an array of {"type":"text","text":...} parts.
Opt content_text(const json& c, size_t index, const std::string& role, std::string& out) {
  if (c.is_null()) {
    if (role == "assistant") return {};  // an assistant turn that only called tools
    return bad_request(fmt::format("messages[{}].content is required", index));
  }
  if (c.is_string()) {
    out = c.get<std::string>();
    return {};
  }
  if (!c.is_array()) {
    return bad_request(
        fmt::format("messages[{}].content must be a string or an array of text parts", index));
  }
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return bad_request(
          fmt::format("messages[{}].content[{}] must be an object with a 'type'", index, k));
    }
    if (part["type"] != "text") {
      return bad_request(
          fmt::format("messages[{}].content[{}]: only 'text' parts are supported, got '{}'", index,
                      k, part["type"].get<std::string>()));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return bad_request(fmt::format("messages[{}].content[{}].text must be a string", index, k));
    }
    out += part["text"].get<std::string>();
  }
  return {};
}

Opt parse_messages(const json& j, std::vector<chat::Message>& out, json& out_json,
                   bool& tool_history) {
  const json* m = field(j, "messages");
  if (!m) return bad_request("'messages' is required");
  if (!m->is_array()) return bad_request("'messages' must be an array");
  if (m->empty()) return bad_request("'messages' must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    if (!msg.is_object()) return bad_request(fmt::format("messages[{}] must be an object", i));
    if (!msg.contains("role") || !msg["role"].is_string()) {
      return bad_request(fmt::format("messages[{}].role must be a string", i));
    }
    std::string role = msg["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer") {
      return bad_request(fmt::format(
          "messages[{}].role '{}' is unknown (system, user, assistant, tool, developer)", i, role));
    }
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    chat::Message out_msg{.role = role, .content = {}};
    const json null_content;
    if (auto e = content_text(msg.contains("content") ? msg["content"] : null_content, i, role,
                              out_msg.content)) {
      return e;
    }
    // The template's view: content as text, plus the tool fields OpenAI defines.
    json mj{{"role", role}, {"content", out_msg.content}};
    if (role == "assistant" && field(msg, "tool_calls")) {
      if (auto e = check_history_tool_calls(msg["tool_calls"], i)) return e;
      if (!msg["tool_calls"].empty()) {
        mj["tool_calls"] = msg["tool_calls"];
        tool_history = true;
      }
    }
    if (role == "tool") {
      tool_history = true;
      for (const char* k : {"tool_call_id", "name"}) {
        if (const json* v = field(msg, k)) {
          if (!v->is_string())
            return bad_request(fmt::format("messages[{}].{} must be a string", i, k));
          mj[k] = *v;
        }
      }
    }
    out_json.push_back(std::move(mj));
    out.push_back(std::move(out_msg));
  }
  return {};
}

Opt parse_stop(const json& j, std::vector<std::string>& out) {
  const json* s = field(j, "stop");
  if (!s) return {};
  constexpr size_t kMaxStops = 16;
  if (s->is_string()) {
    if (!s->get<std::string>().empty()) out.push_back(s->get<std::string>());
    return {};
  }
  if (!s->is_array()) return bad_request("'stop' must be a string or an array of strings");
  if (s->size() > kMaxStops) {
    return bad_request(fmt::format("'stop' has {} entries, at most {}", s->size(), kMaxStops));
  }
  for (const json& e : *s) {
    if (!e.is_string()) return bad_request("'stop' must be a string or an array of strings");
    if (!e.get<std::string>().empty()) out.push_back(e.get<std::string>());
  }
  return {};
}

Opt parse_logit_bias(const json& j, int32_t n_vocab, std::vector<sample::LogitBias>& out) {
  const json* b = field(j, "logit_bias");
  if (!b) return {};
  if (!b->is_object()) return bad_request("'logit_bias' must be an object {\"token id\": bias}");
  for (auto it = b->begin(); it != b->end(); ++it) {
    const std::string& key = it.key();
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (...) {
      used = 0;
    }
    if (used != key.size() || key.empty()) {
      return bad_request(fmt::format("logit_bias key '{}' is not a token id", key));
    }
    if (id < 0 || id >= n_vocab) {
      return bad_request(
          fmt::format("logit_bias token id {} is outside the vocabulary [0, {})", id, n_vocab));
    }
    if (!it.value().is_number()) {
      return bad_request(fmt::format("logit_bias[{}] must be a number", key));
    }
    const double v = it.value().get<double>();
    if (!(v >= -sample::kMaxLogitBias && v <= sample::kMaxLogitBias)) {
      return bad_request(fmt::format("logit_bias[{}] must be in [-100, 100], got {}", key, v));
    }
    out.push_back({.id = static_cast<int32_t>(id), .bias = static_cast<float>(v)});
  }
  return {};
}

Opt parse_prompt(const json& j, int32_t n_vocab, CompletionRequest& out) {
  const json* p = field(j, "prompt");
  if (!p) return bad_request("'prompt' is required");
  auto ids = [&](const json& arr) -> Opt {
    for (const json& t : arr) {
      if (!t.is_number_integer()) return bad_request("'prompt' token ids must be integers");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= n_vocab) {
        return bad_request(fmt::format("prompt token id {} is outside the vocabulary", id));
      }
      out.prompt_tokens.push_back(static_cast<int32_t>(id));
    }
    return {};
  };
  if (p->is_string()) {
    out.prompt = p->get<std::string>();
    return {};
  }
  if (!p->is_array()) {
    return bad_request("'prompt' must be a string, an array of token ids, or a one-element array");
  }
  if (p->empty()) return bad_request("'prompt' must not be empty");
  if ((*p)[0].is_number_integer()) return ids(*p);
  if (p->size() != 1) return bad_request("only one prompt per request is supported");
  if ((*p)[0].is_string()) {
    out.prompt = (*p)[0].get<std::string>();
    return {};
  }
  if ((*p)[0].is_array()) return ids((*p)[0]);
  return bad_request("'prompt' must be a string or token ids");
}

Opt schema_grammar(const json& schema, std::string& out) {
  if (!schema.is_object() && !schema.is_boolean()) {
    return bad_request("a JSON schema must be an object");
  }
  auto g = grammar::json_schema_to_gbnf(schema.dump());
  if (!g.ok()) return bad_request("unsupported JSON schema: " + g.error().message);
  out = std::move(*g);
  return {};
}

// Output constraints: llama.cpp's `grammar` (GBNF) and `json_schema`, OpenAI's
// response_format (text | json_object | json_schema {schema}); one of them at most.
Opt parse_constraint(const json& j, std::string& out) {
  int n = 0;
  if (const json* g = field(j, "grammar")) {
    if (!g->is_string()) return bad_request("'grammar' must be a string (GBNF)");
    out = g->get<std::string>();
    n++;
  }
  if (const json* js = field(j, "json_schema")) {
    if (auto e = schema_grammar(*js, out)) return e;
    n++;
  }
  if (const json* rf = field(j, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      return bad_request("'response_format' must be an object with a 'type'");
    }
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      out = grammar::json_object_gbnf();
      n++;
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      const json* schema = js && js->is_object() ? field(*js, "schema") : nullptr;
      if (!schema) return bad_request("response_format json_schema needs json_schema.schema");
      if (auto e = schema_grammar(*schema, out)) return e;
      n++;
    } else if (type != "text") {
      return bad_request(fmt::format(
          "response_format type '{}' is unknown (text, json_object, json_schema)", type));
    }
  }
  if (n > 1) return bad_request("give one of 'grammar', 'json_schema' and a JSON response_format");
  return {};
}

}  // namespace

ApiError bad_request(std::string message) {
  return ApiError{.status = 400, .type = "invalid_request_error", .message = std::move(message)};
}

json error_body(const ApiError& e) {
  return json{{"error", {{"message", e.message}, {"type", e.type}, {"code", e.status}}}};
}

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

Dialect dialect_for_path(const std::string& path) {
  if (path == "/v1/messages" || path.starts_with("/v1/messages/")) return Dialect::kAnthropic;
  if (path.starts_with("/api/")) return Dialect::kOllama;
  return Dialect::kOpenAI;
}

json ollama_error_body(const ApiError& e) {
  return json{{"error", e.message}};
}

json anthropic_error_body(const ApiError& e) {
  const char* type = "api_error";
  switch (e.status) {
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    default:
      if (e.status < 500) type = "invalid_request_error";
  }
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

sample::SamplerConfig default_sampler() {
  return sample::SamplerConfig{};  // the one table of defaults (llama.cpp's), as the CLI's
}

std::optional<ApiError> parse_object(const std::string& body, json& out) {
  out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return bad_request("the body is not valid JSON");
  if (!out.is_object()) return bad_request("the body must be a JSON object");
  return {};
}

std::optional<ApiError> budget_field(const json& value, const char* field_name, int32_t& out) {
  constexpr int64_t kMaxBudget = int64_t{1} << 30;
  if (!value.is_number_integer()) {
    return bad_request(fmt::format("'{}' must be an integer (-1: no limit)", field_name));
  }
  const bool too_big = value.is_number_unsigned() && value.get<uint64_t>() > kMaxBudget;
  const int64_t x = too_big ? kMaxBudget + 1 : value.get<int64_t>();
  if (x < -1 || x > kMaxBudget) {
    return bad_request(fmt::format("'{}' must be -1 (no limit) or in [0, {}], got {}", field_name,
                                   kMaxBudget, value.dump()));
  }
  out = static_cast<int32_t>(x);
  return {};
}

std::optional<ApiError> effort_budget(const json& value, const char* field_name, int32_t& out) {
  static constexpr std::pair<const char*, int32_t> kEfforts[] = {
      {"none", 0}, {"minimal", 64}, {"low", 256}, {"medium", 1024}, {"high", 4096}};
  if (value.is_string()) {
    for (const auto& [name, budget] : kEfforts) {
      if (value.get<std::string>() == name) {
        out = budget;
        return {};
      }
    }
  }
  return bad_request(fmt::format(
      "'{}' must be one of \"none\", \"minimal\", \"low\", \"medium\", \"high\", got {}",
      field_name, dump(value)));
}

std::optional<ApiError> parse_completion(const std::string& body, Endpoint endpoint,
                                         int32_t n_vocab, CompletionRequest& out) {
  json j;
  if (auto e = parse_object(body, j)) return e;
  return parse_completion_json(j, endpoint, n_vocab, out);
}

std::optional<ApiError> parse_completion_json(const json& j, Endpoint endpoint, int32_t n_vocab,
                                              CompletionRequest& out) {
  if (!j.is_object()) return bad_request("the body must be a JSON object");
  out.endpoint = endpoint;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) return bad_request("'model' must be a string");
    out.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = parse_messages(j, out.messages, out.messages_json, out.tool_history)) return e;
    if (auto e = parse_tools(j, out.tools)) return e;
    if (const json* k = field(j, "chat_template_kwargs")) {
      if (!k->is_object()) return bad_request("'chat_template_kwargs' must be an object");
      out.chat_template_kwargs = *k;
    }
  } else {
    if (auto e = parse_prompt(j, n_vocab, out)) return e;
    if (field(j, "chat_template_kwargs") != nullptr) {
      return bad_request("'chat_template_kwargs' applies to chat messages only");
    }
  }
  if (auto e = boolean(j, "stream", out.stream)) return e;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) return bad_request("'stream_options' must be an object");
    if (auto e = boolean(*so, "include_usage", out.include_usage)) return e;
  }
  int64_t n = 1;
  if (auto e = integer(j, "n", 1, 128, n)) return e;
  out.n = static_cast<int32_t>(n);
  if (auto e = parse_constraint(j, out.grammar)) return e;

  engine::SequenceOptions& seq = out.seq;
  seq.sampler = default_sampler();
  sample::SamplerConfig& s = seq.sampler;
  constexpr int64_t kMaxTokens = int64_t{1} << 30;
  int64_t max_tokens = -1;
  if (auto e = integer(j, "max_tokens", -1, kMaxTokens, max_tokens)) return e;
  if (endpoint == Endpoint::kChat) {
    if (auto e = integer(j, "max_completion_tokens", -1, kMaxTokens, max_tokens)) return e;
  }
  seq.n_predict = static_cast<int32_t>(max_tokens);
  // llama.cpp's extension: end-of-generation tokens are never sampled.
  if (auto e = boolean(j, "ignore_eos", seq.ignore_eos)) return e;
  if (auto e = number(j, "temperature", 0.0, 2.0, s.temp)) return e;
  if (auto e = number(j, "top_p", 0.0, 1.0, s.top_p)) return e;
  int64_t top_k = s.top_k;
  if (auto e = integer(j, "top_k", 0, n_vocab, top_k)) return e;
  s.top_k = static_cast<int32_t>(top_k);
  if (auto e = number(j, "min_p", 0.0, 1.0, s.min_p)) return e;
  if (auto e = number(j, "typical_p", 0.0, 1.0, s.typical_p)) return e;
  if (auto e = number(j, "repeat_penalty", 1e-6, 10.0, s.repeat_penalty)) return e;
  int64_t last_n = s.repeat_last_n;
  if (auto e = integer(j, "repeat_last_n", 0, 1 << 16, last_n)) return e;
  s.repeat_last_n = static_cast<int32_t>(last_n);
  if (auto e = number(j, "presence_penalty", -2.0, 2.0, s.presence_penalty)) return e;
  if (auto e = number(j, "frequency_penalty", -2.0, 2.0, s.frequency_penalty)) return e;
  if (const json* sd = field(j, "seed")) {
    if (!sd->is_number_integer()) return bad_request("'seed' must be an integer");
    if (sd->is_number_unsigned()) {
      s.seed = sd->get<uint64_t>();
    } else if (sd->get<int64_t>() >= 0) {
      s.seed = static_cast<uint64_t>(sd->get<int64_t>());
    } else {
      s.seed = std::random_device{}();  // llama.cpp: -1 means a random seed
    }
  } else {
    s.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  if (auto e = parse_stop(j, seq.stop)) return e;
  if (auto e = parse_logit_bias(j, n_vocab, s.logit_bias)) return e;

  // logprobs: a boolean plus top_logprobs (chat), an integer count (completions).
  constexpr int64_t kMaxTopLogprobs = 20;
  if (endpoint == Endpoint::kChat) {
    if (auto e = boolean(j, "logprobs", out.logprobs)) return e;
    int64_t top = -1;
    if (auto e = integer(j, "top_logprobs", 0, kMaxTopLogprobs, top)) return e;
    if (top >= 0 && !out.logprobs) return bad_request("'top_logprobs' needs 'logprobs': true");
    if (out.logprobs) seq.top_logprobs = static_cast<int32_t>(std::max<int64_t>(top, 0));
  } else {
    int64_t top = -1;
    if (auto e = integer(j, "logprobs", 0, kMaxTopLogprobs, top)) return e;
    out.logprobs = top >= 0;
    if (out.logprobs) seq.top_logprobs = static_cast<int32_t>(top);
    if (auto e = boolean(j, "echo", out.echo)) return e;
    // OpenAI and llama-server give the echoed prompt's tokens logprobs too; that needs
    // the prompt's logits, which the prefill does not keep.
    if (out.echo && out.logprobs) {
      return bad_request("'echo' with 'logprobs' is not supported (prompt token logprobs)");
    }
  }
  if (auto st = s.validate_for_vocab(n_vocab); !st.ok()) return bad_request(st.error().message);

  // Reasoning (llama-server's reasoning_format and thinking_budget_tokens; OpenAI's
  // reasoning_effort): a thinking template's block split out, and its length bounded.
  if (const json* rf = field(j, "reasoning_format")) {
    out.reasoning_split =
        engine::reasoning_split_for(rf->is_string() ? rf->get<std::string>() : "");
    if (!out.reasoning_split) {
      return bad_request(fmt::format(
          "'reasoning_format' must be \"none\", \"deepseek\" or \"auto\", got {}", dump(*rf)));
    }
  }
  if (const json* re = field(j, "reasoning_effort")) {
    int32_t budget = -1;
    if (auto e = effort_budget(*re, "reasoning_effort", budget)) return e;
    out.reasoning_budget = budget;
  }
  if (const json* tb = field(j, "thinking_budget_tokens")) {
    int32_t budget = -1;
    if (auto e = budget_field(*tb, "thinking_budget_tokens", budget)) return e;
    out.reasoning_budget = budget;
  }
  // Speculative decoding (llama-server's flat keys; docs/USAGE.md "Speculative decoding
  // in the server"). Out of range is an error here, where llama-server clamps.
  if (field(j, "speculative.n_max") != nullptr) {
    int64_t v = 0;
    if (auto e = integer(j, "speculative.n_max", 0, kMaxDraftTokens, v)) return e;
    out.spec_n_max = static_cast<int32_t>(v);
  }
  if (field(j, "speculative.n_min") != nullptr) {
    int64_t v = 0;
    if (auto e = integer(j, "speculative.n_min", 0, kMaxDraftTokens, v)) return e;
    out.spec_n_min = static_cast<int32_t>(v);
  }
  if (field(j, "speculative.p_min") != nullptr) {
    float v = 0.0f;
    if (auto e = number(j, "speculative.p_min", 0.0, 1.0, v)) return e;
    out.spec_p_min = v;
  }
  if (out.spec_n_max && out.spec_n_min && *out.spec_n_max > 0 &&
      *out.spec_n_min > *out.spec_n_max) {
    return bad_request(fmt::format(
        "'speculative.n_min' ({}) is above 'speculative.n_max' ({}): no draft would be run",
        *out.spec_n_min, *out.spec_n_max));
  }
  if (field(j, "speculative") != nullptr) {
    return bad_request(
        "'speculative' is not an object here: give 'speculative.n_max', 'speculative.n_min' and "
        "'speculative.p_min' as keys of the body (llama-server's names)");
  }
  return {};
}

}  // namespace minfer::server
