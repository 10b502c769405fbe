// Stage 17 (HTTP): what the route handlers share (internal to src/server).
// Invariant: handlers run on HTTP worker threads and reach the engine only through the
// scheduler (submit) and the immutable parts of the model (tokenizer, template).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "chat/renderer.h"
#include "grammar/token_mask.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/server.h"

namespace minfer::server {

struct ServerContext {
  engine::Engine& engine;
  const tokenizer::Tokenizer& tok;
  const chat::ChatRenderer& renderer;
  Scheduler& scheduler;
  Metrics& metrics;
  const ServerOptions& options;
  std::shared_ptr<const grammar::TokenVocab> vocab;  // token bytes trie for grammar masks
  int64_t created = 0;                               // server start, unix seconds
  // Completion streams whose response has not been written to its end (the drain waits
  // for them before it closes the HTTP server, which stops writing chunked bodies).
  std::atomic<int32_t>* open_streams = nullptr;
};

// Per request, on its worker thread: what the one stderr log line reports.
struct RequestLog {
  std::chrono::steady_clock::time_point t0;
  int32_t n_prompt = -1;
  int32_t n_generated = -1;
  int32_t n_reused = -1;
  int status = -1;  // the status logged when not the response's: 499, the client left
};
RequestLog& request_log();

void reply_json(httplib::Response& res, const json& body, int status = 200);
void reply_error(httplib::Response& res, const ApiError& e);

// POST /v1/chat/completions and /v1/completions (stream and not).
// `body`: the request body, read under --max-body.
void handle_completion(ServerContext& ctx, Endpoint endpoint, const std::string& body,
                       httplib::Response& res);

}  // namespace minfer::server
