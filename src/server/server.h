// Stage 17 (HTTP): `minfer serve` — OpenAI-compatible routes on Boost.Beast in front
// of the request scheduler (ARCHITECTURE §2b "Server").
// Invariants: HTTP threads parse, validate, render and tokenize; a request takes a
// slot only once it is valid (bad input is a 4xx, never a 5xx); only the scheduler's
// thread touches the engine; SIGINT/SIGTERM stop the listener, let in-flight requests
// finish up to the drain deadline, and return normally (exit code 0).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "server/scheduler.h"

namespace minfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (the chosen one is printed)
  std::string api_key;   // non-empty: every route but /health needs "Authorization: Bearer KEY"
  std::string model_id;  // /v1/models id and the default "model" of responses
  // More names a request's "model" may give (--served-model-name's after the first).
  std::vector<std::string> model_aliases;
  std::string model_path;  // the GGUF file served (the info routes' model_path)
  // POST /slots/{id}?action=save|restore read and write files here; empty: refused.
  std::string slot_save_path;
  std::string version;            // minfer's version (Ollama's GET /api/version)
  std::string cors_origin = "*";  // Access-Control-Allow-Origin: "*" or the one origin answered
  SchedulerOptions scheduler;
  size_t max_body_bytes = size_t{8} << 20;  // larger bodies → 413
  int drain_ms = 30000;                     // in-flight requests get this long after a signal
  // Connections open at once (one I/O thread holds them all, transport.h); past it a
  // request is answered 503 and its connection closed.
  size_t max_connections = 1024;
  // A stream whose client takes no bytes for this long is cancelled and its connection
  // closed (its pending output is bounded meanwhile: JobStream).
  int stream_timeout_s = 600;
  // A request's head, then its body, and a response's write (not a stream's) must each
  // take less than timeout_s, else the connection closes; a connection with no request
  // begun (new, or kept alive) is closed after keep_alive_timeout_s.
  int timeout_s = 5;
  int keep_alive_timeout_s = 5;
  // Thinking blocks (`<think>…</think>`) of a template that has them: split into
  // reasoning_content (--reasoning-format deepseek) or left in the text (none); each
  // request may say otherwise (reasoning_format).
  bool reasoning_split = true;
  int32_t reasoning_budget = -1;  // --reasoning-budget: reasoning tokens at most; -1 no limit
  std::string chat_template;      // Jinja source replacing the model's (--chat-template-file)
  std::string viz_prompt;  // the view's prompt box text, run once when opened (`minfer viz -p`)
  bool viz_home = false;
  // Finished Responses API responses kept in memory for GET /v1/responses/{id} and
  // previous_response_id; the oldest is evicted past this; 0 keeps none.
  size_t responses_max = 1000;
  // Embedding routes: the pooling of their vectors (kModel: the model's pooling_type).
  engine::Pooling pooling =
      engine::Pooling::kModel;  // GET / serves the engine view (`minfer viz`), not the chat page
};

// Whether `name` is the served model's id or one of its aliases.
bool serves_model(const ServerOptions& options, const std::string& name);

// Blocks SIGINT and SIGTERM in the calling thread, so every thread it starts later
// inherits the mask and the signals reach only serve()'s signal thread. Call it before
// any other thread exists (before Engine::open starts the worker pool); serve() calls
// it too. Left blocked: the process ends after serve().
void block_shutdown_signals();

// Loads the model to serve, filling in the options that depend on it (n_ctx, model
// id); the engine must outlive serve(). Runs on serve()'s thread.
using LoadEngine = std::function<Result<engine::Context*>(ServerOptions&)>;

// Binds and listens, prints "minfer server loading the model on http://HOST:PORT",
// answers every request 503 (/health: {"status":"loading model"}) while `load` runs,
// then prints "minfer server listening on http://HOST:PORT", serves until SIGINT or
// SIGTERM, drains, returns. Errors: the address cannot be bound, `load` fails, the chat
// template cannot render, the arena cannot be sized.
Status serve(const ServerOptions& options, const LoadEngine& load);
// serve() of an engine already loaded.
Status serve(engine::Context& engine, const ServerOptions& options);

}  // namespace minfer::server
