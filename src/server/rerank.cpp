// Stage 17 (HTTP): reranking on a cross-encoder — POST /v1/rerank, /rerank, /v1/reranking,
// /reranking in llama-server's shape (Jina's and Cohere's): {query, documents, top_n,
// return_documents} → {model, object, usage, results: [{index, relevance_score,
// document?}]} sorted by score, highest first.
// Invariants: the request is checked and tokenized here (HTTP thread), a bad one is a
// 400 naming the field, nothing is queued; the pairs are scored on the inference thread
// through run_embeddings (engine::embed, pooling rank), a pair's score independent of
// the other documents.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "server/routes.h"

namespace minfer::server {

void handle_rerank(ServerContext& ctx, const std::string& body, http::Response& res) {
  auto reject = [&](const ApiError& e) {
    ctx.metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    reply_error(res, e);
  };
  if (auto e = not_an_embedding_model(ctx)) return reject(*e);
  if (ctx.engine.hparams().n_cls_out == 0) {
    return reject(bad_request(fmt::format(
        "rerank needs a cross-encoder (a model with a classification head, such as a "
        "BertForSequenceClassification reranker); the served model ({}) is an embedding model",
        ctx.engine.hparams().arch)));
  }
  json j;
  std::string model;
  if (auto e = parse_with_model(ctx, body, j, model)) return reject(*e);
  const json* query = field(j, "query");
  if (query == nullptr || query->is_null()) return reject(bad_request("'query' is required"));
  if (!query->is_string()) return reject(bad_request("'query' must be a string"));
  const json* docs = field(j, "documents");
  if (docs == nullptr || docs->is_null()) return reject(bad_request("'documents' is required"));
  if (!docs->is_array() || docs->empty()) {
    return reject(bad_request("'documents' must be a non-empty array of strings"));
  }
  constexpr size_t kMaxDocuments = 2048;  // as /v1/embeddings' inputs
  if (docs->size() > kMaxDocuments) {
    return reject(bad_request(
        fmt::format("'documents' has {} entries, more than {}", docs->size(), kMaxDocuments)));
  }
  // Cohere's documents may be {"text": ...} objects; llama-server takes strings only.
  std::vector<std::string> texts;
  for (size_t i = 0; i < docs->size(); ++i) {
    const json& d = (*docs)[i];
    if (d.is_string()) {
      texts.push_back(d.get<std::string>());
    } else if (d.is_object() && d.contains("text") && d["text"].is_string()) {
      texts.push_back(d["text"].get<std::string>());
    } else {
      return reject(bad_request(fmt::format("'documents'[{}] must be a string", i)));
    }
  }
  size_t top_n = texts.size();
  if (const json* t = field(j, "top_n"); t != nullptr && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) {
      return reject(bad_request("'top_n' must be an integer >= 1"));
    }
    top_n = std::min<size_t>(top_n, static_cast<size_t>(t->get<int64_t>()));
  }
  bool return_documents = false;
  if (const json* r = field(j, "return_documents"); r != nullptr && !r->is_null()) {
    if (!r->is_boolean()) return reject(bad_request("'return_documents' must be a boolean"));
    return_documents = r->get<bool>();
  }
  const uint32_t n_ctx = ctx.scheduler.options().n_ctx;
  std::vector<std::vector<engine::TokenId>> inputs;
  std::vector<std::vector<int32_t>> types;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto pair = engine::rank_pair(ctx.tok, query->get<std::string>(), texts[i]);
    if (!pair.ok()) return reject(bad_request(pair.error().message));
    if (pair->tokens.size() > n_ctx) {
      return reject(bad_request(
          fmt::format("the query with 'documents'[{}] has {} tokens, more than the context of {}",
                      i, pair->tokens.size(), n_ctx)));
    }
    inputs.push_back(std::move(pair->tokens));
    types.push_back(std::move(pair->types));
  }
  engine::Embeddings emb;
  if (auto e = run_embeddings(ctx, std::move(inputs), {.pooling = engine::Pooling::kRank}, emb,
                              std::move(types))) {
    return reply_error(res, *e);
  }
  // llama-server ranks by the first score (a reranker's single relevance logit).
  std::vector<size_t> order(emb.vectors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return emb.vectors[a][0] > emb.vectors[b][0]; });
  json results = json::array();
  int32_t tokens = 0;
  for (int32_t t : emb.n_tokens) tokens += t;
  for (size_t k = 0; k < top_n; ++k) {
    const size_t i = order[k];
    json item = {{"index", i}, {"relevance_score", emb.vectors[i][0]}};
    if (return_documents) item["document"] = {{"text", texts[i]}};
    results.push_back(std::move(item));
  }
  reply_json(res, {{"model", model},
                   {"object", "list"},
                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
                   {"results", std::move(results)}});
}

}  // namespace minfer::server
