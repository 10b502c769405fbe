// Stage 17 (HTTP): the OpenAI request and error shapes — JSON in, validated
// generation parameters out. Runs on the HTTP threads, before a request takes a slot.
// Invariants: every malformed field is an ApiError with a 4xx status naming the field
// (never a 5xx, never a silent clamp); parsing touches neither the engine nor the KV.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/renderer.h"
#include "engine/sequence.h"

namespace minfer::server {

using json = nlohmann::ordered_json;

// An error in OpenAI's shape (llama.cpp's types): {"error":{"message","type","code"}}.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
};
ApiError bad_request(std::string message);
json error_body(const ApiError& e);

// A request member that is present and not null (JSON null reads as absent, as OpenAI's
// and Anthropic's servers treat it); nullptr otherwise.
const json* field(const json& j, const char* key);

// Which API's shapes a route speaks.
enum class Dialect : uint8_t { kOpenAI, kAnthropic, kOllama };
// Anthropic's routes (/v1/messages and below), Ollama's (/api/ and below).
Dialect dialect_for_path(const std::string& path);
// Anthropic's error shape: {"type":"error","error":{"type","message"}}, the type from
// the status (400 invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error,
// 503 overloaded_error, other 5xx api_error).
json anthropic_error_body(const ApiError& e);
// Ollama's error shape: {"error": "message"}.
json ollama_error_body(const ApiError& e);
// json::dump that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const json& j);

// Server defaults a request's sampling fields start from (llama-server's, which most
// OpenAI clients expect of a local server: temperature 0.8, top_k 40, top_p 0.95,
// min_p 0.05, no repeat penalty).
sample::SamplerConfig default_sampler();

enum class Endpoint : uint8_t { kChat, kCompletion };

// OpenAI tools (server/tools.h parses, renders and enforces them).
enum class ToolChoice : uint8_t { kAuto, kNone, kRequired, kNamed };
struct ToolSpec {
  std::string name;
  json parameters;  // a JSON Schema (an object schema; {"type":"object"} when none given)
};
struct ToolRequest {
  std::vector<ToolSpec> tools;
  json tools_json = nullptr;  // the request's `tools` as given (the template's variable)
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;      // kNamed: the function
  bool parallel = false;  // parallel_tool_calls (llama-server's default: false)
  bool active() const { return !tools.empty() && choice != ToolChoice::kNone; }
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                    // echoed back
  std::vector<chat::Message> messages;  // chat
  // chat: the messages as OpenAI JSON for the template (assistant tool_calls, tool
  // messages' tool_call_id kept); tool_history: some message has them.
  json messages_json = json::array();
  bool tool_history = false;
  ToolRequest tools;
  // chat: further template variables for this request (chat_template_kwargs, as
  // llama-server and vLLM take them, e.g. {"enable_thinking": false}), set over the
  // server's --chat-template-kwargs; the template's own variables (messages, tools,
  // add_generation_prompt, bos_token, eos_token) are not overridden.
  json chat_template_kwargs = json::object();
  std::optional<std::string> prompt;   // completions: text
  std::vector<int32_t> prompt_tokens;  // completions: token ids instead of text
  // Choices (separate sequences of the one prompt, choice i seeded seed + i); at most
  // the server's slots (the route checks: parsing knows no server).
  int32_t n = 1;
  bool echo = false;  // completions: the prompt text starts each choice's text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  // GBNF text the output must match (from `grammar`, `json_schema` or a json
  // response_format); empty: unconstrained.
  std::string grammar;
  engine::SequenceOptions seq;  // n_predict, stop, sampler, top_logprobs (n_ctx set later)
  // Positions the request may use when fewer than the server's (Ollama's num_ctx); 0:
  // the server's --n-ctx.
  uint32_t n_ctx = 0;
  // A thinking template's block: split from the content (reasoning_format deepseek) or
  // not (none); reasoning tokens at most (thinking_budget_tokens, reasoning_effort; 0: no
  // thinking). Absent: the server's --reasoning-format / --reasoning-budget.
  std::optional<bool> reasoning_split;
  std::optional<int32_t> reasoning_budget;
  // llama-server's speculative.n_max / n_min / p_min (flat keys): tokens drafted at
  // most per step (0: no speculation), the shortest draft run, a draft model's
  // probability floor. Absent: the server's --draft-max / --draft-min / --draft-p-min.
  std::optional<int32_t> spec_n_max;
  std::optional<int32_t> spec_n_min;
  std::optional<float> spec_p_min;
};

// The most tokens a request may draft per step (the bound of --draft-max too).
inline constexpr int32_t kMaxDraftTokens = 1024;

// reasoning_effort's budgets (OpenAI's names): none 0, minimal 64, low 256, medium 1024,
// high 4096 reasoning tokens. Error: another value.
std::optional<ApiError> effort_budget(const json& value, const char* field_name, int32_t& out);
// A reasoning budget field: an integer >= -1 (-1: no limit).
std::optional<ApiError> budget_field(const json& value, const char* field_name, int32_t& out);

// Parses and validates a /v1/chat/completions or /v1/completions body. `n_vocab`
// bounds logit_bias ids and prompt token ids.
std::optional<ApiError> parse_completion(const std::string& body, Endpoint endpoint,
                                         int32_t n_vocab, CompletionRequest& out);
// The same on a parsed body (a dialect translated into OpenAI's fields).
std::optional<ApiError> parse_completion_json(const json& body, Endpoint endpoint, int32_t n_vocab,
                                              CompletionRequest& out);

// Parses a JSON object body (bad JSON or a non-object → 400).
std::optional<ApiError> parse_object(const std::string& body, json& out);

}  // namespace minfer::server
