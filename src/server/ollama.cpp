// Stage 17 (HTTP): Ollama's API — POST /api/chat, /api/generate, /api/show; GET
// /api/tags, /api/ps, /api/version. A chat or generate request is translated into the
// OpenAI body the rest of the server speaks (messages' tool_calls → OpenAI calls with
// string arguments, `tool_name` → `name`, `options` → the sampling fields, `format` →
// response_format, num_predict → max_tokens, num_ctx → the request's own smaller
// context, think → a thinking block in `thinking`), validated by the same parser and run on the
// same path (render → SequenceState → scheduler); the events come back as one JSON object or as
// NDJSON lines. Reference: Ollama's docs/api.md and the ollama Python client's _types.py (the
// fields it parses). Invariants: a field this server cannot honour (images, a custom template, a
// suffix, a generate `context`, mirostat, logprobs) is a 400 naming it; options Ollama itself would
// ignore (load-time knobs such as num_gpu) are ignored; sampling defaults are the server's (those
// of /v1), not Ollama's Modelfile defaults, so one request samples alike on every route; errors use
// Ollama's shape ({"error": "..."}), inside a stream as a last {"error": ...} line.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/dtype.h"
#include "gguf/json.h"
#include "server/routes.h"

namespace minfer::server {
namespace {

using Opt = std::optional<ApiError>;
using Clock = std::chrono::steady_clock;

// RFC 3339 UTC with nanoseconds, as Ollama writes created_at / modified_at.
std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  const auto secs = std::chrono::floor<std::chrono::seconds>(ns);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:09d}Z", fmt::gmtime(std::time_t{secs.count()}),
                     static_cast<int64_t>((ns - secs).count()));
}

std::string now_rfc3339() {
  return rfc3339(std::chrono::system_clock::now());
}

int64_t nanos(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

ApiError not_found(const std::string& name) {
  return ApiError{.status = 404,
                  .type = "not_found_error",
                  .message = fmt::format("model '{}' not found", name)};
}

// The one model, by its id with or without Ollama's default tag (":latest").
Opt check_model(const ServerContext& ctx, const json& j, const char* key, std::string& name) {
  const json* m = field(j, key);
  if (!m) return bad_request(fmt::format("'{}' is required", key));
  if (!m->is_string()) return bad_request(fmt::format("'{}' must be a string", key));
  name = m->get<std::string>();
  if (name.empty()) return bad_request(fmt::format("'{}' is required", key));
  const std::string base = name.ends_with(":latest")
                               ? name.substr(0, name.size() - std::string_view(":latest").size())
                               : name;
  if (!serves_model(ctx.options, name) && !serves_model(ctx.options, base)) return not_found(name);
  return {};
}

// Options with the same name and meaning as the OpenAI fields.
constexpr const char* kSameOptions[] = {"temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "typical_p",
                                        "seed",
                                        "repeat_penalty",
                                        "repeat_last_n",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "stop"};

// The `options` object → OpenAI sampling fields of `oa`.
// `n_ctx_out`: num_ctx when given (else left as it is).
Opt translate_options(const ServerContext& ctx, const json& o, json& oa, uint32_t& n_ctx_out) {
  if (!o.is_object()) return bad_request("'options' must be an object");
  for (const char* key : kSameOptions) {
    if (const json* v = field(o, key)) oa[key] = *v;
  }
  if (const json* v = field(o, "num_predict")) {
    // -1: until a stop or the context is full; -2: fill the context. A request here
    // always ends at its context, so both are the parser's -1.
    if (!v->is_number_integer() || v->get<int64_t>() < -2) {
      return bad_request(
          "options.num_predict must be an integer >= -2 (-1: unbounded, -2: "
          "fill the context)");
    }
    oa["max_tokens"] = std::max<int64_t>(v->get<int64_t>(), -1);
  }
  if (const json* v = field(o, "num_ctx")) {
    const uint32_t n_ctx = ctx.scheduler.options().n_ctx;
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return bad_request("options.num_ctx must be an integer >= 1");
    }
    // A slot holds --n-ctx positions; a request may keep to fewer, not use more.
    if (v->get<int64_t>() > static_cast<int64_t>(n_ctx)) {
      return bad_request(fmt::format(
          "options.num_ctx {} is larger than this server's context of {} positions (--n-ctx)",
          v->get<int64_t>(), n_ctx));
    }
    n_ctx_out = static_cast<uint32_t>(v->get<int64_t>());
  }
  if (const json* v = field(o, "mirostat")) {
    if (!v->is_number() || v->get<double>() != 0.0) {
      return bad_request("options.mirostat is not supported by this server (only 0)");
    }
  }
  return {};
}

// `format`: "" (none), "json" (any JSON) or a JSON Schema object.
Opt translate_format(const json& j, json& oa) {
  const json* f = field(j, "format");
  if (!f) return {};
  if (f->is_string()) {
    const std::string s = f->get<std::string>();
    if (s.empty()) return {};
    if (s == "json") {
      oa["response_format"] = {{"type", "json_object"}};
      return {};
    }
    return bad_request(fmt::format("'format' '{}' is unknown (\"json\" or a JSON schema)", s));
  }
  if (!f->is_object()) return bad_request("'format' must be \"json\" or a JSON schema object");
  oa["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", *f}}}};
  return {};
}

Opt refuse_images(const json& j, const std::string& where) {
  const json* im = field(j, "images");
  if (!im) return {};
  if (!im->is_array()) return bad_request(where + "images must be an array");
  if (!im->empty()) {
    return bad_request(where + "images: images are not supported (the model reads text only)");
  }
  return {};
}

// What /api/chat and /api/generate share: model, stream (Ollama's default: true),
// format, options, keep_alive, think, logprobs.
Opt translate_common(const ServerContext& ctx, const json& j, std::string& model, json& oa,
                     uint32_t& n_ctx) {
  if (auto e = check_model(ctx, j, "model", model)) return e;
  oa["model"] = model;
  bool stream = true;
  if (const json* s = field(j, "stream")) {
    if (!s->is_boolean()) return bad_request("'stream' must be a boolean");
    stream = s->get<bool>();
  }
  oa["stream"] = stream;
  if (auto e = translate_format(j, oa)) return e;
  if (const json* o = field(j, "options")) {
    if (auto e = translate_options(ctx, *o, oa, n_ctx)) return e;
  }
  // One model stays loaded for the server's life: how long to keep it is moot.
  if (const json* k = field(j, "keep_alive")) {
    if (!k->is_number() && !k->is_string()) {
      return bad_request("'keep_alive' must be a duration (a number or a string like \"5m\")");
    }
  }
  // think: a thinking template's block in `thinking` (true; a level: its budget, as
  // reasoning_effort's), or no thinking at all (false: the block closed in the prompt).
  // Absent: the server's --reasoning-format and --reasoning-budget.
  if (const json* t = field(j, "think")) {
    if (t->is_boolean()) {
      oa["reasoning_format"] = "deepseek";
      if (!t->get<bool>()) oa["thinking_budget_tokens"] = 0;
    } else if (t->is_string() && (*t == "low" || *t == "medium" || *t == "high")) {
      oa["reasoning_format"] = "deepseek";
      oa["reasoning_effort"] = *t;
    } else {
      return bad_request(
          "'think' must be true, false or a level (\"low\", \"medium\", \"high\"), got " +
          dump(*t));
    }
  }
  if (const json* l = field(j, "logprobs")) {
    if (!l->is_boolean()) return bad_request("'logprobs' must be a boolean");
    if (l->get<bool>()) return bad_request("'logprobs' is not supported on /api (only false)");
  }
  return {};
}

// The translated body through the OpenAI parser. Its errors name a field as 'key'; one
// that came from `options` is named as the client wrote it ('options.top_k').
Opt parse_translated(const ServerContext& ctx, const json& j, const json& oa, Endpoint endpoint,
                     uint32_t n_ctx, CompletionRequest& r) {
  Opt e = parse_completion_json(oa, endpoint, ctx.tok.n_vocab(), r);
  r.n_ctx = n_ctx;
  const json* o = field(j, "options");
  if (!e || !o) return e;
  auto rename = [&](const std::string& from, const std::string& to) {
    const std::string quoted = "'" + from + "'";
    if (size_t pos = e->message.find(quoted); pos != std::string::npos) {
      e->message.replace(pos, quoted.size(), "'options." + to + "'");
    }
  };
  for (const char* key : kSameOptions) {
    if (field(*o, key)) rename(key, key);
  }
  if (field(*o, "num_predict")) rename("max_tokens", "num_predict");
  return e;
}

// One Ollama chat message → one OpenAI message.
Opt translate_message(const json& msg, size_t i, json& out) {
  if (!msg.is_object()) return bad_request(fmt::format("messages[{}] must be an object", i));
  const std::string where = fmt::format("messages[{}].", i);
  const json* role = field(msg, "role");
  if (!role || !role->is_string()) return bad_request(where + "role must be a string");
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
    return bad_request(
        fmt::format("{}role '{}' is unknown (system, user, assistant, tool)", where, r));
  }
  if (auto e = refuse_images(msg, where)) return e;
  json m{{"role", r}, {"content", ""}};
  if (const json* c = field(msg, "content")) {
    if (!c->is_string()) return bad_request(where + "content must be a string");
    m["content"] = *c;
  }
  if (const json* calls = field(msg, "tool_calls")) {
    if (r != "assistant") return bad_request(where + "tool_calls belong in assistant messages");
    if (!calls->is_array()) return bad_request(where + "tool_calls must be an array");
    json oa_calls = json::array();
    for (size_t k = 0; k < calls->size(); ++k) {
      const json& c = (*calls)[k];
      const std::string cw = fmt::format("{}tool_calls[{}].function", where, k);
      const json* fn = c.is_object() ? field(c, "function") : nullptr;
      if (!fn || !fn->is_object()) return bad_request(cw + " must be an object");
      const json* name = field(*fn, "name");
      if (!name || !name->is_string()) return bad_request(cw + ".name must be a string");
      const json* args = field(*fn, "arguments");
      if (args && !args->is_object()) return bad_request(cw + ".arguments must be an object");
      oa_calls.push_back(
          {{"type", "function"},
           {"function", {{"name", *name}, {"arguments", dump(args ? *args : json::object())}}}});
    }
    if (!oa_calls.empty()) m["tool_calls"] = std::move(oa_calls);
  }
  if (const json* tn = field(msg, "tool_name")) {
    if (r != "tool") return bad_request(where + "tool_name belongs in tool messages");
    if (!tn->is_string()) return bad_request(where + "tool_name must be a string");
    m["name"] = *tn;
  }
  // `thinking` of an earlier assistant turn: the templates here have no place for it.
  out.push_back(std::move(m));
  return {};
}

// How a translated request is answered.
struct OllamaRequest {
  std::string model;  // as the client named it (echoed back)
  bool chat = true;   // /api/chat: `message`; /api/generate: `response`
  bool load = false;  // no prompt: Ollama's "load the model" call
  CompletionRequest r;
};

Opt parse_chat(ServerContext& ctx, const std::string& body, OllamaRequest& out) {
  json j;
  if (auto e = parse_object(body, j)) return e;
  json oa = json::object();
  uint32_t n_ctx = 0;
  if (auto e = translate_common(ctx, j, out.model, oa, n_ctx)) return e;
  json messages = json::array();
  if (const json* msgs = field(j, "messages")) {
    if (!msgs->is_array()) return bad_request("'messages' must be an array");
    for (size_t i = 0; i < msgs->size(); ++i) {
      if (auto e = translate_message((*msgs)[i], i, messages)) return e;
    }
  }
  if (const json* t = field(j, "tools")) oa["tools"] = *t;
  if (messages.empty()) {
    out.load = true;
    return {};
  }
  oa["messages"] = std::move(messages);
  return parse_translated(ctx, j, oa, Endpoint::kChat, n_ctx, out.r);
}

Opt parse_generate(ServerContext& ctx, const std::string& body, OllamaRequest& out) {
  out.chat = false;
  json j;
  if (auto e = parse_object(body, j)) return e;
  json oa = json::object();
  uint32_t n_ctx = 0;
  if (auto e = translate_common(ctx, j, out.model, oa, n_ctx)) return e;
  auto string_field = [&](const char* key, std::string& s) -> Opt {
    const json* v = field(j, key);
    if (!v) return {};
    if (!v->is_string()) return bad_request(fmt::format("'{}' must be a string", key));
    s = v->get<std::string>();
    return {};
  };
  std::string prompt, system, tmpl, suffix;
  for (auto [key, s] : {std::pair{"prompt", &prompt}, std::pair{"system", &system},
                        std::pair{"template", &tmpl}, std::pair{"suffix", &suffix}}) {
    if (auto e = string_field(key, *s)) return e;
  }
  if (!tmpl.empty()) {
    return bad_request(
        "'template': a request's own prompt template is not supported (the model's chat "
        "template is used; 'raw': true sends the prompt as it is)");
  }
  if (!suffix.empty()) {
    return bad_request("'suffix' (fill-in-the-middle) is not supported by this server");
  }
  if (const json* c = field(j, "context")) {
    if (!c->is_array()) return bad_request("'context' must be an array of token ids");
    if (!c->empty()) {
      return bad_request(
          "'context' (the token state of an earlier reply) is not supported; send the "
          "conversation to /api/chat instead");
    }
  }
  if (auto e = refuse_images(j, "")) return e;
  bool raw = false;
  if (const json* r = field(j, "raw")) {
    if (!r->is_boolean()) return bad_request("'raw' must be a boolean");
    raw = r->get<bool>();
  }
  if (prompt.empty()) {
    out.load = true;
    return {};
  }
  if (raw) {
    if (!system.empty()) return bad_request("'system' has no place in a raw prompt");
    oa["prompt"] = prompt;
    return parse_translated(ctx, j, oa, Endpoint::kCompletion, n_ctx, out.r);
  }
  json messages = json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  oa["messages"] = std::move(messages);
  return parse_translated(ctx, j, oa, Endpoint::kChat, n_ctx, out.r);
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json args = json::parse(calls[i].arguments, nullptr, /*allow_exceptions=*/false);
    out.push_back({{"function",
                    {{"index", i},
                     {"name", calls[i].name},
                     {"arguments", args.is_object() ? std::move(args) : json::object()}}}});
  }
  return out;
}

// When the route saw the request begin, the job taken, the first token and the end:
// Ollama's durations, in nanoseconds, as the HTTP thread sees the events (prompt
// evaluation includes the wait for a slot; the model was loaded at start: load 0).
struct Timing {
  Clock::time_point t0, submitted, first, end;
  bool has_first = false;
  void event(const JobEvent& ev) {
    const auto now = Clock::now();
    if (!has_first &&
        (ev.n_generated > 0 || !ev.text.empty() || !ev.reasoning.empty() || ev.final)) {
      has_first = true;
      first = now;
    }
    if (ev.final) end = now;
  }
};

// The final object's fields after `done`.
void add_final(json& j, const JobEvent& ev, const Timing& t, const char* reason) {
  j["done_reason"] = reason;
  j["total_duration"] = nanos(t.end - t.t0);
  j["load_duration"] = 0;
  j["prompt_eval_count"] = ev.n_prompt;
  j["prompt_eval_duration"] = nanos(t.first - t.submitted);
  j["eval_count"] = ev.n_generated;
  j["eval_duration"] = nanos(t.end - t.first);
}

json base_object(const std::string& model, bool chat, std::string text,
                 const std::string& thinking = {}) {
  json j{{"model", model}, {"created_at", now_rfc3339()}};
  if (chat) {
    j["message"] = {{"role", "assistant"}, {"content", std::move(text)}};
    if (!thinking.empty()) j["message"]["thinking"] = thinking;
  } else {
    j["response"] = std::move(text);
    if (!thinking.empty()) j["thinking"] = thinking;
  }
  return j;
}

ApiError event_error(const JobEvent& ev) {
  return ApiError{.status = ev.error_status, .type = "server_error", .message = ev.error};
}

// Ollama's stream: one JSON object a line, `done: false` with each piece of text, then
// `done: true` with the reason, counts and durations (and a chat's tool calls).
class OllamaLines final : public SseWriter {
 public:
  OllamaLines(const OllamaRequest& q, Timing timing, std::unique_ptr<ToolCallParser> tools)
      : model_(q.model), chat_(q.chat), timing_(timing), tools_(std::move(tools)) {}

  std::string head() override { return {}; }

  std::string frames(const JobEvent& ev) override {
    if (!ev.error.empty()) return dump(ollama_error_body(event_error(ev))) + "\n";
    timing_.event(ev);
    std::string text = tools_ ? tools_->feed(ev.text) : ev.text;
    if (tools_ && ev.final) text += tools_->finish();
    const bool called = tools_ && !tools_->calls().empty();
    if (called && blank(text)) text.clear();
    if (!ev.final) {
      if (text.empty() && ev.reasoning.empty()) return {};
      json j = base_object(model_, chat_, std::move(text), ev.reasoning);
      j["done"] = false;
      return dump(j) + "\n";
    }
    json j = base_object(model_, chat_, std::move(text), ev.reasoning);
    if (called) j["message"]["tool_calls"] = tool_calls_json(tools_->calls());
    j["done"] = true;
    add_final(j, ev, timing_, finish_reason(ev.stop));
    return dump(j) + "\n";
  }

 private:
  std::string model_;
  bool chat_;
  Timing timing_;
  std::unique_ptr<ToolCallParser> tools_;
};

void handle_generating(ServerContext& ctx, const std::string& body, bool chat,
                       http::Response& res) {
  Timing timing{.t0 = request_log().t0};
  if (timing.t0 == Clock::time_point{}) timing.t0 = Clock::now();
  OllamaRequest q;
  Opt e = chat ? parse_chat(ctx, body, q) : parse_generate(ctx, body, q);
  if (e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e, Dialect::kOllama);
  }
  if (q.load) {
    // Nothing to generate: the model is loaded (it always is), as Ollama answers.
    json j = base_object(q.model, q.chat, "");
    j["done_reason"] = "load";
    j["done"] = true;
    return reply_json(res, j);
  }
  SubmittedJob job;
  if (auto se = submit_completion(ctx, q.r, job)) return reply_error(res, *se, Dialect::kOllama);
  timing.submitted = Clock::now();
  std::unique_ptr<ToolCallParser> tools;
  if (q.r.tools.active()) tools = std::make_unique<ToolCallParser>(job.format, true);
  if (q.r.stream) {
    return reply_stream(ctx, res, std::move(job.stream),
                        std::make_unique<OllamaLines>(q, timing, std::move(tools)),
                        "application/x-ndjson");
  }
  std::string text, thinking;
  const JobEvent ev = collect_events(*job.stream, [&](const JobEvent& piece) {
    timing.event(piece);
    text += piece.text;
    thinking += piece.reasoning;
  });
  if (!ev.error.empty()) return reply_error(res, event_error(ev), Dialect::kOllama);
  if (tools) {
    std::string content = tools->feed(text);
    content += tools->finish();
    text = std::move(content);
  }
  const bool called = tools && !tools->calls().empty();
  if (called && blank(text)) text.clear();
  json j = base_object(q.model, q.chat, std::move(text), thinking);
  if (called) j["message"]["tool_calls"] = tool_calls_json(tools->calls());
  j["done"] = true;
  add_final(j, ev, timing, finish_reason(ev.stop));
  reply_json(res, j);
}

// --- The model routes -----------------------------------------------------------------

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "135M", "1.2B", as Ollama labels parameter counts.
std::string parameter_size(uint64_t n) {
  const double x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.1f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.0f}M", x / 1e6);
  return fmt::format("{:.0f}K", x / 1e3);
}

// The digest: XXH3-64 of the primary file's header (metadata and tensor table, up to
// the tensor data) and of the total size, as 16 hex digits. Ollama's is the sha256 of
// the file, which would read gigabytes at start; this one names the same file as long
// as its header and size do not change.
std::string header_digest(const gguf::Model& file, uint64_t size) {
  const gguf::File& f = file.primary();
  std::ifstream in(f.name(), std::ios::binary);
  std::string header(f.data_offset(), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) {
    header.clear();  // an unreadable file (gone since load): the size alone
  }
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, header.data(), header.size());
  XXH3_64bits_update(st, &size, sizeof(size));
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}", h);
}

}  // namespace

std::shared_ptr<const ModelCard> build_model_card(const engine::Context& engine) {
  const gguf::Model& file = engine.file();
  auto card = std::make_shared<ModelCard>();
  ModelCard& c = *card;
  c.path = file.primary().name();
  for (const auto& f : file.files()) c.size += f->file_size();
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(c.path, ec);
  c.modified_at = ec ? now_rfc3339()
                     : rfc3339(std::chrono::time_point_cast<std::chrono::system_clock::duration>(
                           std::chrono::file_clock::to_sys(mtime)));
  c.digest = header_digest(file, c.size);
  std::map<std::string, uint64_t> bytes_by_type;
  for (const auto& t : file.tensors()) {
    c.n_params += t.n_elements;
    bytes_by_type[upper(dtype_name(t.type))] += t.n_bytes;
  }
  // The quantization: the type holding most of the weight bytes.
  std::string quant;
  uint64_t most = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > most) {
      most = bytes;
      quant = type;
    }
  }
  auto arch = file.get_string("general.architecture");
  const std::string family = arch.ok() ? *arch : std::string();
  c.details = {{"parent_model", ""},
               {"format", "gguf"},
               {"family", family},
               {"families", json::array({family})},
               {"parameter_size", parameter_size(c.n_params)},
               {"quantization_level", quant}};
  return card;
}

namespace {

const ModelCard& card(const ServerContext& ctx) {
  return *ctx.model_card;
}

json model_entry(const ServerContext& ctx) {
  const ModelCard& c = card(ctx);
  return json{{"name", ctx.options.model_id}, {"model", ctx.options.model_id},
              {"modified_at", c.modified_at}, {"size", c.size},
              {"digest", c.digest},           {"details", c.details}};
}

// The sampling defaults a request starts from, in Modelfile PARAMETER lines.
std::string parameters_text(const ServerContext& ctx) {
  const sample::SamplerConfig s = default_sampler();
  return fmt::format(
      "num_ctx {}\ntemperature {}\ntop_k {}\ntop_p {}\nmin_p {}\nrepeat_penalty {}\n"
      "repeat_last_n {}",
      ctx.scheduler.options().n_ctx, s.temp, s.top_k, s.top_p, s.min_p, s.repeat_penalty,
      s.repeat_last_n);
}

}  // namespace

void handle_ollama_chat(ServerContext& ctx, const std::string& body, http::Response& res) {
  handle_generating(ctx, body, /*chat=*/true, res);
}

void handle_ollama_generate(ServerContext& ctx, const std::string& body, http::Response& res) {
  handle_generating(ctx, body, /*chat=*/false, res);
}

void handle_ollama_tags(ServerContext& ctx, http::Response& res) {
  reply_json(res, {{"models", json::array({model_entry(ctx)})}});
}

void handle_ollama_ps(ServerContext& ctx, http::Response& res) {
  // Loaded for the server's life: no expires_at; the weights are in host memory.
  json m = model_entry(ctx);
  m["size_vram"] = 0;
  m["context_length"] = ctx.scheduler.options().n_ctx;
  reply_json(res, {{"models", json::array({std::move(m)})}});
}

void handle_ollama_version(ServerContext& ctx, http::Response& res) {
  reply_json(res, {{"version", ctx.options.version}});
}

void handle_ollama_show(ServerContext& ctx, const std::string& body, http::Response& res) {
  json j;
  std::string name;
  Opt e = parse_object(body, j);
  // `model`; older clients send `name`.
  if (!e) e = check_model(ctx, j, field(j, "model") || !field(j, "name") ? "model" : "name", name);
  if (e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e, Dialect::kOllama);
  }
  bool verbose = false;
  if (const json* v = field(j, "verbose")) {
    if (!v->is_boolean()) {
      ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
      return reply_error(res, bad_request("'verbose' must be a boolean"), Dialect::kOllama);
    }
    verbose = v->get<bool>();
  }
  const ModelCard& c = card(ctx);
  // GGUF metadata; long arrays (the vocabulary, merges) are null, as Ollama sends them
  // unless asked for verbose output.
  constexpr size_t kMaxArray = 64;
  json info = json::object();
  for (const auto& kv : ctx.engine.file().metadata()) {
    if (!verbose && kv.value.type == gguf::ValueType::kArray && kv.value.array.size() > kMaxArray) {
      info[kv.key] = nullptr;
    } else {
      info[kv.key] = gguf::value_to_json<json>(kv.value);
    }
  }
  info["general.parameter_count"] = c.n_params;
  const std::string tmpl(ctx.renderer.source());
  const std::string params = parameters_text(ctx);
  std::string modelfile = fmt::format(
      "# The model minfer serves. TEMPLATE is the model's Jinja chat template (not a Go\n"
      "# template); the PARAMETER lines are the server's sampling defaults.\nFROM {}\n"
      "TEMPLATE \"\"\"{}\"\"\"\n",
      c.path, tmpl);
  for (size_t pos = 0; pos < params.size();) {
    size_t end = params.find('\n', pos);
    if (end == std::string::npos) end = params.size();
    modelfile += "PARAMETER " + params.substr(pos, end - pos) + "\n";
    pos = end + 1;
  }
  reply_json(res, {{"modelfile", modelfile},
                   {"parameters", params},
                   {"template", tmpl},
                   {"details", c.details},
                   {"model_info", std::move(info)},
                   {"capabilities", json::array({"completion", "tools"})},
                   {"modified_at", c.modified_at}});
}

void handle_ollama_embed(ServerContext& ctx, const std::string& body, http::Response& res,
                         bool legacy) {
  const auto t0 = Clock::now();
  json j;
  std::string name;
  Opt e = not_an_embedding_model(ctx);
  if (!e) e = a_cross_encoder(ctx);
  if (!e) e = parse_object(body, j);
  if (!e) e = check_model(ctx, j, "model", name);
  bool truncate = true;  // Ollama's default: an input past the context is cut to it
  if (!e) {
    if (const json* t = field(j, "truncate"); t != nullptr && !t->is_null()) {
      if (!t->is_boolean()) {
        e = bad_request("'truncate' must be a boolean");
      } else {
        truncate = t->get<bool>();
      }
    }
  }
  if (!e) {
    if (const json* d = field(j, "dimensions"); d != nullptr && !d->is_null()) {
      const auto dim = static_cast<int64_t>(ctx.engine.hparams().n_embd);
      if (!d->is_number_integer() || d->get<int64_t>() != dim) {
        e = bad_request(fmt::format(
            "'dimensions': this model's embeddings have {} dimensions and cannot be shortened",
            dim));
      }
    }
  }
  std::vector<std::vector<engine::TokenId>> inputs;
  if (!e) {
    // /api/embeddings: one `prompt` string; /api/embed: `input`, a string or strings.
    const char* key = legacy ? "prompt" : "input";
    const json* input = field(j, key);
    if (input != nullptr && !input->is_string() &&
        !(input->is_array() && !legacy &&
          std::all_of(input->begin(), input->end(), [](const json& x) { return x.is_string(); }))) {
      e = bad_request(legacy ? "'prompt' must be a string"
                             : "'input' must be a string or an array of strings");
    } else {
      e = embed_inputs(ctx, input, key, truncate, inputs);
    }
  }
  if (e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    return reply_error(res, *e, Dialect::kOllama);
  }
  engine::Embeddings emb;
  // /api/embed returns unit vectors; the older /api/embeddings the pooled vector as is.
  const engine::EmbedOptions options{.pooling = ctx.options.pooling, .normalize = legacy ? -1 : 2};
  if (engine::resolve_pooling(ctx.engine, options.pooling) == engine::Pooling::kNone) {
    return reply_error(res, bad_request("pooling 'none' gives a vector per token: use /embeddings"),
                       Dialect::kOllama);
  }
  if (Opt err = run_embeddings(ctx, std::move(inputs), options, emb)) {
    return reply_error(res, *err, Dialect::kOllama);
  }
  if (legacy) return reply_json(res, {{"embedding", emb.vectors.at(0)}});
  int32_t tokens = 0;
  for (int32_t t : emb.n_tokens) tokens += t;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  reply_json(res, {{"model", name},
                   {"embeddings", emb.vectors},
                   {"total_duration", ns},
                   {"load_duration", 0},
                   {"prompt_eval_count", tokens}});
}

}  // namespace minfer::server
