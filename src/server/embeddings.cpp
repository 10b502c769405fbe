// Stage 17 (HTTP): embeddings on an encoder model — OpenAI's POST /v1/embeddings,
// llama-server's POST /embeddings, and the parsing and running Ollama's /api/embed
// shares (server/ollama.cpp).
// Invariants: inputs are tokenized and checked here (HTTP thread): a bad input is a 400
// naming it, nothing is queued; the vectors are computed on the inference thread
// (Scheduler::submit_embed), an input's vector independent of its neighbours.
#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "server/routes.h"

namespace minfer::server {
namespace {

// Standard base64 (RFC 4648, padded) of the vector's little-endian float32 bytes, as
// OpenAI's encoding_format "base64". A dozen lines: no Debian library is worth linking
// for it (OpenSSL's EVP_EncodeBlock would be, but the server does not link libcrypto).
std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // x86: little-endian already
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const auto b0 = static_cast<uint8_t>(bytes[i]);
    const uint8_t b1 = i + 1 < bytes.size() ? static_cast<uint8_t>(bytes[i + 1]) : 0;
    const uint8_t b2 = i + 2 < bytes.size() ? static_cast<uint8_t>(bytes[i + 2]) : 0;
    out += kAlphabet[b0 >> 2];
    out += kAlphabet[((b0 & 3) << 4) | (b1 >> 4)];
    out += i + 1 < bytes.size() ? kAlphabet[((b1 & 15) << 2) | (b2 >> 6)] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[b2 & 63] : '=';
  }
  return out;
}

}  // namespace

std::optional<ApiError> parse_with_model(const ServerContext& ctx, const std::string& body, json& j,
                                         std::string& model) {
  if (auto e = parse_object(body, j)) return e;
  model = ctx.options.model_id;
  if (const json* m = field(j, "model"); m != nullptr && !m->is_null()) {
    if (!m->is_string()) return bad_request("'model' must be a string");
    model = m->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> not_an_embedding_model(const ServerContext& ctx) {
  if (ctx.engine.hparams().embeddings_out) return std::nullopt;
  return bad_request(fmt::format(
      "the served model ({}) is a generative model: embeddings need an embedding model (an "
      "encoder such as bert)",
      ctx.engine.hparams().arch));
}

std::optional<ApiError> a_cross_encoder(const ServerContext& ctx) {
  if (ctx.engine.hparams().n_cls_out == 0) return std::nullopt;
  return bad_request(
      "the served model is a cross-encoder (a classification head): it scores query/document "
      "pairs at /v1/rerank and has no embeddings");
}

std::optional<ApiError> embed_inputs(ServerContext& ctx, const json* input, const char* name,
                                     bool truncate,
                                     std::vector<std::vector<engine::TokenId>>& out) {
  if (input == nullptr) return bad_request(fmt::format("'{}' is required", name));
  const auto n_vocab = static_cast<int64_t>(ctx.engine.hparams().n_vocab);
  const uint32_t n_ctx = ctx.scheduler.options().n_ctx;
  constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request
  auto add_ids = [&](const json& arr, size_t i) -> std::optional<ApiError> {
    std::vector<engine::TokenId> ids;
    for (const json& t : arr) {
      if (!t.is_number_integer()) {
        return bad_request(fmt::format("'{}'[{}] must hold token ids (integers)", name, i));
      }
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= n_vocab) {
        return bad_request(fmt::format("'{}'[{}]: token id {} is outside the vocabulary [0, {})",
                                       name, i, id, n_vocab));
      }
      ids.push_back(static_cast<engine::TokenId>(id));
    }
    out.push_back(std::move(ids));
    return std::nullopt;
  };
  auto add_text = [&](const std::string& text) -> std::optional<ApiError> {
    auto ids = ctx.tok.encode(text, {.add_special = true, .parse_special = false});
    if (!ids.ok()) return bad_request(ids.error().message);
    out.push_back(std::move(*ids));
    return std::nullopt;
  };
  if (input->is_string()) {
    if (auto e = add_text(input->get<std::string>())) return e;
  } else if (input->is_array() && !input->empty() && (*input)[0].is_number_integer()) {
    if (auto e = add_ids(*input, 0)) return e;  // one input given as token ids
  } else if (input->is_array()) {
    if (input->empty()) return bad_request(fmt::format("'{}' must not be empty", name));
    if (input->size() > kMaxInputs) {
      return bad_request(
          fmt::format("'{}' has {} inputs, more than {}", name, input->size(), kMaxInputs));
    }
    for (size_t i = 0; i < input->size(); ++i) {
      const json& item = (*input)[i];
      if (item.is_string()) {
        if (auto e = add_text(item.get<std::string>())) return e;
      } else if (item.is_array()) {
        if (auto e = add_ids(item, i)) return e;
      } else {
        return bad_request(
            fmt::format("'{}'[{}] must be a string or an array of token ids", name, i));
      }
    }
  } else {
    return bad_request(fmt::format(
        "'{}' must be a string, an array of strings, or token ids (an array, or arrays)", name));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<engine::TokenId>& ids = out[i];
    if (ids.empty()) return bad_request(fmt::format("'{}'[{}] has no tokens", name, i));
    if (ids.size() <= n_ctx) continue;
    if (!truncate) {
      return bad_request(fmt::format(
          "'{}'[{}] has {} tokens, more than the context of {} (ask for truncation to cut it)",
          name, i, ids.size(), n_ctx));
    }
    // Cut to n_ctx keeping the last token (the vocabulary's [SEP] when it adds one), as a
    // tokenizer's own truncation keeps the special tokens.
    const engine::TokenId last = ids.back();
    ids.resize(n_ctx);
    ids.back() = last;
  }
  return std::nullopt;
}

std::optional<ApiError> run_embeddings(ServerContext& ctx,
                                       std::vector<std::vector<engine::TokenId>> inputs,
                                       const engine::EmbedOptions& options, engine::Embeddings& out,
                                       std::vector<std::vector<int32_t>> token_types) {
  auto job = std::make_shared<EmbedJob>();
  job->inputs = std::move(inputs);
  job->options = options;
  job->token_types = std::move(token_types);
  std::future<Result<engine::Embeddings>> done = job->done.get_future();
  if (auto e = submit_refusal(ctx, ctx.scheduler.submit_embed(job))) return e;
  Result<engine::Embeddings> r = done.get();
  if (!r.ok()) {
    return ApiError{.status = 500, .type = "server_error", .message = r.error().message};
  }
  out = std::move(*r);
  int32_t n = 0;
  for (int32_t t : out.n_tokens) n += t;
  request_log().n_prompt = n;
  ctx.metrics.prompt_tokens.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  return std::nullopt;
}

void handle_embeddings(ServerContext& ctx, const std::string& body, http::Response& res,
                       bool openai) {
  auto reject = [&](const ApiError& e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    reply_error(res, e);
  };
  if (auto e = not_an_embedding_model(ctx)) return reject(*e);
  if (auto e = a_cross_encoder(ctx)) return reject(*e);
  json j;
  std::string model;
  if (auto e = parse_with_model(ctx, body, j, model)) return reject(*e);
  bool base64 = false;
  if (const json* f = field(j, "encoding_format"); f != nullptr && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) {
      return reject(bad_request("'encoding_format' must be \"float\" or \"base64\""));
    }
    base64 = *f == "base64";
  }
  const int32_t dim = static_cast<int32_t>(ctx.engine.hparams().n_embd);
  if (const json* d = field(j, "dimensions"); d != nullptr && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() != dim) {
      return reject(bad_request(fmt::format(
          "'dimensions': this model's embeddings have {} dimensions and cannot be shortened",
          dim)));
    }
  }
  engine::EmbedOptions options{.pooling = ctx.options.pooling};
  if (const json* n = field(j, "embd_normalize"); n != nullptr && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < -1 || n->get<int64_t>() > 1000) {
      return reject(bad_request("'embd_normalize' must be an integer from -1 to 1000"));
    }
    options.normalize = n->get<int32_t>();
  }
  bool truncate = false;
  if (const json* t = field(j, "truncate"); t != nullptr && !t->is_null()) {
    if (!t->is_boolean()) return reject(bad_request("'truncate' must be a boolean"));
    truncate = t->get<bool>();
  }
  // llama-server's /embeddings also takes `content`.
  const json* input = field(j, "input");
  if (input == nullptr && !openai) input = field(j, "content");
  std::vector<std::vector<engine::TokenId>> inputs;
  if (auto e = embed_inputs(ctx, input, input == field(j, "input") ? "input" : "content", truncate,
                            inputs)) {
    return reject(*e);
  }
  if (openai && engine::resolve_pooling(ctx.engine, options.pooling) == engine::Pooling::kNone) {
    return reject(bad_request(
        "pooling 'none' gives a vector per token, which /v1/embeddings cannot return: use "
        "/embeddings"));
  }
  engine::Embeddings emb;
  if (auto e = run_embeddings(ctx, std::move(inputs), options, emb)) return reply_error(res, *e);
  const auto n = static_cast<size_t>(emb.dim);
  if (!openai) {
    // llama-server's shape: per input, its vectors (one, or one per token with pooling
    // none) as an array of arrays.
    json data = json::array();
    for (size_t i = 0; i < emb.vectors.size(); ++i) {
      json rows = json::array();
      for (size_t at = 0; at < emb.vectors[i].size(); at += n) {
        rows.push_back(std::vector<float>(emb.vectors[i].begin() + static_cast<ptrdiff_t>(at),
                                          emb.vectors[i].begin() + static_cast<ptrdiff_t>(at + n)));
      }
      data.push_back({{"index", i}, {"embedding", std::move(rows)}});
    }
    return reply_json(res, data);
  }
  json data = json::array();
  int32_t tokens = 0;
  for (size_t i = 0; i < emb.vectors.size(); ++i) {
    tokens += emb.n_tokens[i];
    json item = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      item["embedding"] = base64_floats(emb.vectors[i]);
    } else {
      item["embedding"] = emb.vectors[i];
    }
    data.push_back(std::move(item));
  }
  reply_json(res, {{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model},
                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

}  // namespace minfer::server
