// Stage 17 (HTTP): the routes routers and llama-server's clients call about the model,
// the tokenizer, the server and its slots — none of them generates.
// Invariants: tokenizing and rendering run on the HTTP thread (the tokenizer and the
// template are immutable); what reads or changes a slot's KV cells is a SlotCommand the
// inference thread runs between steps; every malformed body is a 4xx naming the field.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "server/routes.h"

namespace minfer::server {
namespace {

// The fields of each /tokenize shape: llama-server's and vLLM's (TokenizeCompletionRequest
// and TokenizeChatRequest in vllm/entrypoints/openai/protocol.py). "model" is in neither
// list: both may carry it.
constexpr const char* kLlamaTokenizeKeys[] = {"content", "add_special", "parse_special",
                                              "with_pieces"};
constexpr const char* kVllmTokenizeKeys[] = {"prompt",
                                             "messages",
                                             "add_special_tokens",
                                             "return_token_strs",
                                             "add_generation_prompt",
                                             "continue_final_message",
                                             "chat_template_kwargs",
                                             "tools"};

// "'a', 'b'": the keys of `keys` that `j` has.
template <size_t N>
std::string present(const json& j, const char* const (&keys)[N]) {
  std::string out;
  for (const char* k : keys) {
    if (!j.contains(k)) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("'{}'", k);
  }
  return out;
}

std::optional<ApiError> optional_bool(const json& j, const char* key, bool& out) {
  const json* v = field(j, key);
  if (v == nullptr) return {};
  if (!v->is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", key));
  out = v->get<bool>();
  return {};
}

std::optional<ApiError> optional_model(const json& j) {
  const json* m = field(j, "model");
  if (m != nullptr && !m->is_string()) return bad_request("'model' must be a string");
  return {};
}

// llama-server's shape: {"content", "add_special" (false), "parse_special" (true),
// "with_pieces"} → {"tokens": [ids] or [{"id", "piece"}]}.
void tokenize_llama(ServerContext& ctx, const json& j, http::Response& res) {
  if (!j["content"].is_string()) return reply_error(res, bad_request("'content' must be a string"));
  tokenizer::EncodeOptions opts{.add_special = false, .parse_special = true};
  bool with_pieces = false;
  for (auto [key, out] :
       {std::pair{"add_special", &opts.add_special},
        std::pair{"parse_special", &opts.parse_special}, std::pair{"with_pieces", &with_pieces}}) {
    if (auto e = optional_bool(j, key, *out)) return reply_error(res, *e);
  }
  auto ids = ctx.tok.encode(j["content"].get<std::string>(), opts);
  if (!ids.ok()) return reply_error(res, bad_request(ids.error().message));
  json tokens = json::array();
  for (tokenizer::TokenId id : *ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", ctx.tok.token_to_bytes(id, /*special=*/true)}});
    } else {
      tokens.push_back(id);
    }
  }
  reply_json(res, {{"tokens", std::move(tokens)}});
}

// The text of a chat prompt that ends inside the final message (vLLM's
// continue_final_message): rendered without a generation prompt, then cut after the
// last occurrence of that message's content, dropping the template's end-of-turn.
std::optional<ApiError> continue_final(const json& messages, std::string& text) {
  const json& last = messages.back();
  const json* content = field(last, "content");
  if (content == nullptr || !content->is_string() || content->get<std::string>().empty()) {
    return bad_request(
        "'continue_final_message' needs a final message with non-empty string content");
  }
  const std::string& c = content->get_ref<const std::string&>();
  const size_t at = text.rfind(c);
  if (at == std::string::npos) {
    return bad_request(
        "'continue_final_message': the chat template does not render the final message's "
        "content verbatim");
  }
  text.resize(at + c.size());
  return {};
}

// vLLM's shapes: {"prompt", "add_special_tokens" (true)} or {"messages",
// "add_generation_prompt" (true), "continue_final_message" (false), "tools",
// "add_special_tokens"} → {"count", "max_model_len", "tokens", "token_strs"?}.
void tokenize_vllm(ServerContext& ctx, const json& j, http::Response& res) {
  if (j.contains("prompt") && j.contains("messages")) {
    return reply_error(res, bad_request("give 'prompt' or 'messages', not both"));
  }
  if (!j.contains("prompt") && !j.contains("messages")) {
    return reply_error(res, bad_request(fmt::format("{} need 'prompt' (text) or 'messages' (chat)",
                                                    present(j, kVllmTokenizeKeys))));
  }
  if (auto e = optional_model(j)) return reply_error(res, *e);
  bool token_strs = false;
  if (auto e = optional_bool(j, "return_token_strs", token_strs)) return reply_error(res, *e);
  std::optional<bool> add_special;
  if (const json* v = field(j, "add_special_tokens")) {
    if (!v->is_boolean())
      return reply_error(res, bad_request("'add_special_tokens' must be a boolean"));
    add_special = v->get<bool>();
  }
  std::vector<tokenizer::TokenId> ids;
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return reply_error(res, bad_request("'prompt' must be a string"));
    for (const char* chat_only :
         {"add_generation_prompt", "continue_final_message", "chat_template_kwargs", "tools"}) {
      if (j.contains(chat_only)) {
        return reply_error(
            res, bad_request(fmt::format("'{}' applies to 'messages', not 'prompt'", chat_only)));
      }
    }
    auto r = ctx.tok.encode(j["prompt"].get<std::string>(),
                            {.add_special = add_special.value_or(true), .parse_special = true});
    if (!r.ok()) return reply_error(res, bad_request(r.error().message));
    ids = std::move(*r);
  } else {
    bool add_generation = true, continue_final_message = false;
    if (auto e = optional_bool(j, "add_generation_prompt", add_generation)) {
      return reply_error(res, *e);
    }
    if (auto e = optional_bool(j, "continue_final_message", continue_final_message)) {
      return reply_error(res, *e);
    }
    if (add_generation && continue_final_message) {
      return reply_error(res, bad_request("'continue_final_message' needs "
                                          "'add_generation_prompt': false"));
    }
    // The messages, tools and template variables as /v1/chat/completions parses them.
    json chat{{"messages", j["messages"]}};
    if (j.contains("tools")) chat["tools"] = j["tools"];
    if (j.contains("chat_template_kwargs"))
      chat["chat_template_kwargs"] = j["chat_template_kwargs"];
    CompletionRequest r;
    if (auto e = parse_completion_json(chat, Endpoint::kChat, ctx.tok.n_vocab(), r)) {
      return reply_error(res, *e);
    }
    std::string text;
    if (add_generation) {
      if (auto e = render_chat_prompt(ctx, r, tool_format(ctx.renderer.source()), text)) {
        return reply_error(res, *e);
      }
    } else {
      auto rendered = ctx.renderer.render_json(
          r.messages_json, r.tools.tools.empty() ? json(nullptr) : r.tools.tools_json, false,
          r.chat_template_kwargs);
      if (!rendered.ok()) {
        return reply_error(res, bad_request("the chat template cannot render these messages: " +
                                            rendered.error().message));
      }
      text = std::move(*rendered);
      if (continue_final_message) {
        if (auto e = continue_final(r.messages_json, text)) return reply_error(res, *e);
      }
    }
    // Without add_special_tokens: the ids /v1/chat/completions decodes (chat.h's
    // tokenize_prompt adds BOS only where the template did not).
    auto toks = add_special.has_value()
                    ? ctx.tok.encode(text, {.add_special = *add_special, .parse_special = true})
                    : chat::tokenize_prompt(ctx.tok, text);
    if (!toks.ok()) return reply_error(res, bad_request(toks.error().message));
    ids = std::move(*toks);
  }
  json body{{"count", ids.size()}, {"max_model_len", ctx.options.scheduler.n_ctx}, {"tokens", ids}};
  if (token_strs) {
    json strs = json::array();
    for (tokenizer::TokenId id : ids) strs.push_back(ctx.tok.token_text(id));
    body["token_strs"] = std::move(strs);
  }
  reply_json(res, body);
}

json model_object(const ServerContext& ctx) {
  const ModelCard& card = *ctx.model_card;
  const auto& hp = ctx.engine.hparams();
  return json{{"id", ctx.options.model_id},
              {"object", "model"},
              {"created", ctx.created},
              {"owned_by", "minfer"},
              {"root", ctx.options.model_id},
              {"parent", nullptr},
              {"max_model_len", ctx.options.scheduler.n_ctx},
              {"aliases", ctx.options.model_aliases},
              // llama-server's "meta".
              {"meta",
               {{"n_ctx_train", hp.n_ctx_train},
                {"n_embd", hp.n_embd},
                {"n_vocab", ctx.tok.n_vocab()},
                {"n_params", card.n_params},
                {"size", card.size}}}};
}

bool generative(const ServerContext& ctx) {
  return !ctx.engine.hparams().embeddings_out;
}

// Waits for the inference thread's answer to a slot command (it runs between steps:
// one step at most, or a queue of embedding batches).
std::optional<ApiError> run_slot_command(ServerContext& ctx, std::shared_ptr<SlotCommand> cmd,
                                         SlotCommand::Reply& out) {
  auto done = cmd->done.get_future();
  if (ctx.scheduler.submit_slot_command(std::move(cmd)) != SubmitResult::kQueued) {
    return ApiError{
        .status = 503, .type = "unavailable_error", .message = "the server is shutting down"};
  }
  out = done.get();
  if (out.status != 200) {
    return ApiError{.status = out.status,
                    .type = out.status == 404   ? "not_found_error"
                            : out.status == 503 ? "unavailable_error"
                                                : "invalid_request_error",
                    .message = out.error};
  }
  return {};
}

// The body's "filename": one plain name inside --slot-save-path (no path separator, no
// "..", no NUL), as llama-server asks of it.
std::optional<ApiError> slot_filename(const std::string& body, std::string& out) {
  json j;
  if (auto e = parse_object(body, j)) return e;
  const json* f = field(j, "filename");
  if (f == nullptr || !f->is_string() || f->get_ref<const std::string&>().empty()) {
    return bad_request("'filename' must be a non-empty string");
  }
  const std::string& name = f->get_ref<const std::string&>();
  const bool plain = name.size() <= 255 && name.find('/') == std::string::npos &&
                     name.find('\\') == std::string::npos && name.find('\0') == std::string::npos &&
                     name.find("..") == std::string::npos && name != ".";
  if (!plain) {
    return bad_request(fmt::format(
        "'filename' must be a plain file name (no path separator, no '..'): '{}'", name));
  }
  out = name;
  return {};
}

json slot_json(const ServerContext& ctx, const SlotInfo& s) {
  return json{{"id", s.id},
              {"n_ctx", ctx.options.scheduler.n_ctx},
              {"is_processing", s.processing},
              {"id_task", s.id_task},
              {"n_cached_tokens", s.n_cached},
              {"n_generated", s.n_generated}};
}

}  // namespace

bool serves_model(const ServerOptions& options, const std::string& name) {
  return name == options.model_id ||
         std::find(options.model_aliases.begin(), options.model_aliases.end(), name) !=
             options.model_aliases.end();
}

void handle_tokenize(ServerContext& ctx, const std::string& body, http::Response& res) {
  json j;
  if (auto e = parse_object(body, j)) return reply_error(res, *e);
  const std::string llama = present(j, kLlamaTokenizeKeys);
  const std::string vllm = present(j, kVllmTokenizeKeys);
  if (!llama.empty() && !vllm.empty()) {
    return reply_error(
        res, bad_request(fmt::format(
                 "{} (llama-server's /tokenize) cannot be mixed with {} (vLLM's)", llama, vllm)));
  }
  if (!vllm.empty()) return tokenize_vllm(ctx, j, res);
  if (!j.contains("content")) {
    return reply_error(res,
                       bad_request("'content' (or vLLM's 'prompt' or 'messages') is required"));
  }
  tokenize_llama(ctx, j, res);
}

void handle_detokenize(ServerContext& ctx, const std::string& body, http::Response& res) {
  json j;
  if (auto e = parse_object(body, j)) return reply_error(res, *e);
  if (auto e = optional_model(j)) return reply_error(res, *e);
  if (!j.contains("tokens") || !j["tokens"].is_array()) {
    return reply_error(res, bad_request("'tokens' must be an array of token ids"));
  }
  std::vector<tokenizer::TokenId> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer()) return reply_error(res, bad_request("'tokens' must hold integers"));
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.tok.n_vocab()) {
      return reply_error(res,
                         bad_request(fmt::format("token id {} is outside the vocabulary", id)));
    }
    ids.push_back(static_cast<tokenizer::TokenId>(id));
  }
  const std::string text = ctx.tok.decode(ids);
  reply_json(res, {{"content", text}, {"prompt", text}});
}

void handle_chat_render(ServerContext& ctx, const std::string& body, http::Response& res) {
  CompletionRequest r;
  if (auto e = parse_completion(body, Endpoint::kChat, ctx.tok.n_vocab(), r)) {
    return reply_error(res, *e);
  }
  std::string text;
  if (auto e = render_chat_prompt(ctx, r, tool_format(ctx.renderer.source()), text)) {
    return reply_error(res, *e);
  }
  auto ids = chat::tokenize_prompt(ctx.tok, text);
  if (!ids.ok())
    return reply_error(res, bad_request("cannot tokenize the prompt: " + ids.error().message));
  reply_json(res, {{"model", r.model.empty() ? ctx.options.model_id : r.model},
                   {"prompt", text},
                   {"token_ids", *ids},
                   {"count", ids->size()},
                   {"max_model_len", ctx.options.scheduler.n_ctx}});
}

void handle_models(ServerContext& ctx, http::Response& res) {
  reply_json(res, {{"object", "list"}, {"data", json::array({model_object(ctx)})}});
}

void handle_model_get(ServerContext& ctx, const std::string& id, http::Response& res) {
  if (!serves_model(ctx.options, id)) {
    return reply_error(res, ApiError{.status = 404,
                                     .type = "not_found_error",
                                     .message = fmt::format("The model '{}' does not exist "
                                                            "(this server serves '{}')",
                                                            id, ctx.options.model_id)});
  }
  reply_json(res, model_object(ctx));
}

void handle_server_info(ServerContext& ctx, http::Response& res) {
  const SchedulerOptions& so = ctx.options.scheduler;
  // SGLang's ServerArgs names where minfer has the same setting.
  reply_json(res, {{"model_path", ctx.options.model_path},
                   {"tokenizer_path", ctx.options.model_path},  // the GGUF carries its tokenizer
                   {"served_model_name", ctx.options.model_id},
                   {"context_length", so.n_ctx},
                   {"max_running_requests", so.n_slots},
                   {"max_queued_requests", so.max_queue},
                   {"max_total_num_tokens", uint64_t{so.n_slots} * so.n_ctx},
                   {"chunked_prefill_size", so.step_tokens},
                   {"host", ctx.options.host},
                   {"is_embedding", !generative(ctx)},
                   {"tp_size", 1},
                   {"dp_size", 1},
                   {"version", ctx.options.version},
                   {"engine", "minfer"}});
}

void handle_model_info(ServerContext& ctx, http::Response& res) {
  reply_json(res, {{"model_path", ctx.options.model_path},
                   {"tokenizer_path", ctx.options.model_path},
                   {"is_generation", generative(ctx)},
                   {"preferred_sampling_params", nullptr},
                   {"weight_version", "default"},
                   {"has_image_understanding", false},
                   {"has_audio_understanding", false},
                   {"model_type", ctx.engine.hparams().arch},
                   {"architectures", nullptr}});
}

void handle_props(ServerContext& ctx, http::Response& res) {
  const sample::SamplerConfig sc = default_sampler();
  json params{{"temperature", sc.temp},
              {"top_k", sc.top_k},
              {"top_p", sc.top_p},
              {"min_p", sc.min_p},
              {"typical_p", sc.typical_p},
              {"repeat_penalty", sc.repeat_penalty},
              {"repeat_last_n", sc.repeat_last_n},
              {"presence_penalty", sc.presence_penalty},
              {"frequency_penalty", sc.frequency_penalty},
              {"seed", sc.seed}};
  // Speculative decoding's request defaults (llama-server's keys; n_max 0: off).
  const engine::SpecOptions& spec = ctx.options.scheduler.spec;
  params["speculative.n_max"] = spec.enabled() ? spec.n_max : 0;
  params["speculative.n_min"] = spec.n_min;
  params["speculative.p_min"] = spec.p_min;
  reply_json(res, {{"default_generation_settings",
                    {{"id", 0},
                     {"n_ctx", ctx.options.scheduler.n_ctx},
                     {"is_processing", false},
                     {"params", std::move(params)}}},
                   {"total_slots", ctx.options.scheduler.n_slots},
                   {"model_path", ctx.options.model_path},
                   {"model_alias", ctx.options.model_id},
                   {"chat_template", std::string(ctx.renderer.source())},
                   {"build_info", "minfer " + ctx.options.version},
                   {"modalities", {{"vision", false}, {"audio", false}}},
                   {"is_sleeping", false}});
}

void handle_slots(ServerContext& ctx, http::Response& res) {
  auto cmd = std::make_shared<SlotCommand>();
  SlotCommand::Reply reply;
  if (auto e = run_slot_command(ctx, std::move(cmd), reply)) return reply_error(res, *e);
  json out = json::array();
  for (const SlotInfo& s : reply.slots) out.push_back(slot_json(ctx, s));
  reply_json(res, out);
}

void handle_slot_action(ServerContext& ctx, const std::string& id, const std::string& action,
                        const std::string& body, http::Response& res) {
  uint32_t slot = 0;
  const bool digits =
      !id.empty() && id.size() <= 9 &&
      std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    return reply_error(res, bad_request(fmt::format("slot id '{}' is not a number", id)));
  }
  slot = static_cast<uint32_t>(std::stoul(id));
  if (!body.empty()) {
    json j;
    if (auto e = parse_object(body, j)) return reply_error(res, *e);
  }
  if (action != "erase" && action != "save" && action != "restore") {
    return reply_error(res, bad_request(fmt::format(
                                "'action' must be save, restore or erase (got '{}')", action)));
  }
  auto cmd = std::make_shared<SlotCommand>();
  cmd->slot = slot;
  std::string filename;
  if (action == "erase") {
    cmd->kind = SlotCommand::Kind::kErase;
  } else {
    // llama-server's answer when it is started without a save folder.
    if (ctx.options.slot_save_path.empty()) {
      return reply_error(res, bad_request("slot save path not set (--slot-save-path DIR)"));
    }
    if (auto e = slot_filename(body, filename)) return reply_error(res, *e);
    cmd->kind = action == "save" ? SlotCommand::Kind::kSave : SlotCommand::Kind::kRestore;
    cmd->path = (std::filesystem::path(ctx.options.slot_save_path) / filename).string();
  }
  const auto t0 = std::chrono::steady_clock::now();
  SlotCommand::Reply reply;
  if (auto e = run_slot_command(ctx, std::move(cmd), reply)) return reply_error(res, *e);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (action == "erase") {
    return reply_json(res, {{"id_slot", slot}, {"n_erased", reply.n_tokens}});
  }
  const bool save = action == "save";
  std::error_code ec;
  const auto bytes =
      std::filesystem::file_size(std::filesystem::path(ctx.options.slot_save_path) / filename, ec);
  reply_json(res, {{"id_slot", slot},
                   {"filename", filename},
                   {save ? "n_saved" : "n_restored", reply.n_tokens},
                   {save ? "n_written" : "n_read", ec ? 0 : bytes},
                   {"timings", {{save ? "save_ms" : "restore_ms", ms}}}});
}

}  // namespace minfer::server
