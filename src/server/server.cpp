// Stage 17 (HTTP): server set-up — routes, auth, error shapes, request log, signals
// and the drain. The transport (server/transport.h) reads and writes the sockets; what
// it reads comes here as http::Request (server/http_types.h).
#include "server/server.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "server/routes.h"
#include "server/transport.h"
#include "server/web_assets.h"

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;
using http::Request;
using http::Response;

// X-Request-Id: the client's value when it is 1..128 visible ASCII characters (it goes
// into ids and the log line), else one of ours.
std::string request_id_for(const Request& req) {
  const std::string v = req.header("X-Request-Id");
  const bool usable = !v.empty() && v.size() <= 128 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c > ' ' && c < 0x7f; });
  return usable ? v : random_id("");
}

const char* error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// The pages themselves carry no data and need no key: the chat page asks for the key
// when /v1 answers 401.
bool public_route(const Request& req) {
  return req.path == "/health" || req.method == "OPTIONS" ||
         ((req.method == "GET" || req.method == "HEAD") &&
          (req.path == "/" || req.path == "/index.html" || req.path == "/viz" ||
           req.path == "/chat"));
}

// The engine view's live panel: one SSE event per step batch (at most ~10 a second,
// at least one every 250 ms), until the client leaves or the server drains.
void handle_viz_events(VizState& viz, const Metrics& metrics, uint32_t n_slots, Response& res) {
  viz.client_connected();
  struct Cursor {
    uint64_t seen = 0;
    bool first = true;
    Clock::time_point last{};
  };
  auto cur = std::make_shared<Cursor>();
  cur->seen = viz.steps();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked(
      "text/event-stream",
      [&viz, &metrics, n_slots, cur](http::StreamSink& sink) {
        if (metrics.draining.load(std::memory_order_relaxed) != 0) {
          sink.done();
          return true;
        }
        if (!sink.writable()) return false;  // the viewer left: stop timing steps soon
        if (!cur->first) {
          const auto next = cur->last + std::chrono::milliseconds(100);
          if (Clock::now() < next) std::this_thread::sleep_until(next);
        }
        std::string ev =
            "data: " + viz.snapshot(metrics, n_slots, &cur->seen, cur->first ? 0 : 250) + "\n\n";
        cur->first = false;
        cur->last = Clock::now();
        return sink.write(ev);
      },
      [&viz](bool) { viz.client_gone(); });
}

void reply_page(Response& res, std::string_view html) {
  res.set_content(std::string(html), "text/html; charset=utf-8");
  res.set_header("Cache-Control", "no-cache");
  // The pages load nothing from elsewhere; the policy makes that a rule of the browser.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                 "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
}

// The route table: exact paths, or patterns where a "{id}" segment stands for any one
// non-empty segment and a final "{*}" for the non-empty rest of the path. It answers
// 404 for an unknown path and 405 (with Allow) for a known path asked with a method it
// lacks; HEAD is answered wherever GET is (the transport leaves the body out).
class Router {
 public:
  using Fn = std::function<void(Request&, Response&)>;
  void add(const std::string& method, const std::string& pattern, Fn fn) {
    routes_.push_back(Route{.method = method, .pattern = pattern, .fn = std::move(fn)});
  }
  // The route of (method, path), its pattern's segments in `matches`; null when none.
  const Fn* find(const std::string& method, const std::string& path,
                 std::vector<std::string>& matches) const {
    const std::string& m = method == "HEAD" ? kGet : method;
    for (int exact = 1; exact >= 0; --exact) {
      for (const Route& r : routes_) {
        if (r.method != m || is_pattern(r.pattern) == (exact == 1)) continue;
        matches.clear();
        if (match(r.pattern, path, matches)) return &r.fn;
      }
    }
    return nullptr;
  }
  bool has(const std::string& path, const std::string& method) const {
    std::vector<std::string> matches;
    return find(method, path, matches) != nullptr;
  }
  bool known(const std::string& path) const { return !methods(path).empty(); }
  // "GET, HEAD, OPTIONS" — HEAD wherever GET is; an unknown path gets every method the
  // server has.
  std::string allow(const std::string& path) const {
    std::vector<std::string> ms = methods(path);
    if (ms.empty()) ms = {"GET", "POST"};
    std::string out;
    for (const std::string& m : ms) {
      out += m + ", ";
      if (m == "GET") out += "HEAD, ";
    }
    return out + "OPTIONS";
  }
  // Whether a comma-separated Allow value lists `method` (methods are case-sensitive).
  static bool lists(const std::string& allow, const std::string& method) {
    size_t pos = 0;
    while (pos <= allow.size()) {
      size_t end = allow.find(',', pos);
      if (end == std::string::npos) end = allow.size();
      std::string item = allow.substr(pos, end - pos);
      item.erase(0, item.find_first_not_of(' '));
      if (item == method) return true;
      pos = end + 1;
    }
    return false;
  }

 private:
  struct Route {
    std::string method;
    std::string pattern;
    Fn fn;
  };
  static inline const std::string kGet = "GET";
  static bool is_pattern(const std::string& p) { return p.find('{') != std::string::npos; }
  static bool match(const std::string& pattern, const std::string& path,
                    std::vector<std::string>& out) {
    size_t i = 0, k = 0;
    while (i < pattern.size()) {
      if (pattern.compare(i, 3, "{*}") == 0) {
        if (k >= path.size()) return false;
        out.push_back(path.substr(k));
        return i + 3 == pattern.size();
      }
      if (pattern.compare(i, 4, "{id}") == 0) {
        const size_t end = std::min(path.find('/', k), path.size());
        if (end == k) return false;
        out.push_back(path.substr(k, end - k));
        i += 4;
        k = end;
      } else if (k < path.size() && pattern[i] == path[k]) {
        ++i;
        ++k;
      } else {
        return false;
      }
    }
    return k == path.size();
  }
  // The methods of the first path entry that matches (exact paths first), in order.
  std::vector<std::string> methods(const std::string& path) const {
    std::vector<std::string> out;
    std::vector<std::string> scratch;
    for (int exact = 1; exact >= 0 && out.empty(); --exact) {
      const std::string* first = nullptr;
      for (const Route& r : routes_) {
        if (is_pattern(r.pattern) == (exact == 1)) continue;
        if (first != nullptr && r.pattern != *first) continue;
        scratch.clear();
        if (!match(r.pattern, path, scratch)) continue;
        first = &r.pattern;
        if (std::find(out.begin(), out.end(), r.method) == out.end()) out.push_back(r.method);
      }
    }
    return out;
  }
  std::vector<Route> routes_;
};

// "*" (the default, as llama-server): any page may call the server. A named origin is
// answered only when the request comes from it, and the answer varies with Origin (a
// shared cache must not serve one origin's response to another).
void set_cors_origin(const std::string& allowed, const Request& req, Response& res) {
  if (allowed == "*") {
    res.set_header("Access-Control-Allow-Origin", "*");
    return;
  }
  res.set_header("Vary", "Origin");
  if (req.header("Origin") == allowed) {
    res.set_header("Access-Control-Allow-Origin", allowed);
  }
}

ApiError method_not_allowed(const Request& req, const std::string& allow) {
  return ApiError{
      .status = 405,
      .type = "invalid_request_error",
      .message = fmt::format("{} is not allowed on {} (Allow: {})", req.method, req.path, allow)};
}

ApiError no_such_route() {
  return ApiError{.status = 404, .type = "not_found_error", .message = "no such route"};
}

ApiError body_too_large(size_t limit) {
  return ApiError{
      .status = 413,
      .type = "invalid_request_error",
      .message = fmt::format("the request body is larger than {} bytes (--max-body)", limit)};
}

// Browser clients (a web UI on another origin) need CORS; preflights carry no key.
void answer_preflight(const Router& router, const Request& req, Response& res) {
  res.status = 204;
  const std::string allow = router.allow(req.path);
  res.set_header("Allow", allow);
  // The requested method is allowed when the route has it (for an unknown path, when
  // the server has it); otherwise no Allow-Methods, and the browser refuses.
  const std::string want = req.header("Access-Control-Request-Method");
  if (want.empty() || Router::lists(allow, want)) {
    res.set_header("Access-Control-Allow-Methods", allow);
  }
  // Echo the headers asked for (the OpenAI SDKs send their own x-stainless-* ones).
  const std::string headers = req.header("Access-Control-Request-Headers");
  res.set_header(
      "Access-Control-Allow-Headers",
      headers.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : headers);
  res.set_header("Access-Control-Max-Age", "600");
}

// What the transport calls for each request: the checks every route shares (connection
// cap, API key, body rules), then the route; the error shapes; the log line.
class Front final : public http::Handler {
 public:
  Front(const ServerOptions& options, Metrics& metrics, const Router& router)
      : options_(options), metrics_(metrics), router_(router) {}

  bool on_head(Request& req, Response& res) override {
    request_log() =
        RequestLog{.t0 = Clock::now(), .request_id = request_id_for(req), .client = req.client};
    res.set_header("X-Request-Id", request_log().request_id);
    set_cors_origin(options_.cors_origin, req, res);
    if (req.over_capacity) {
      // Past --max-connections: answered at once and closed, /health as usual,
      // anything else 503.
      res.close = true;
      if (req.path != "/health") {
        metrics_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        res.set_header("Retry-After", "1");
        reply_error(res,
                    ApiError{.status = 503,
                             .type = "unavailable_error",
                             .message = fmt::format("the server has {} connections open "
                                                    "(--max-connections); retry later",
                                                    options_.max_connections)},
                    dialect_for_path(req.path));
        return true;
      }
    }
    if (!options_.api_key.empty() && !public_route(req)) {
      const std::string want = "Bearer " + options_.api_key;
      // EventSource cannot send headers: the view's data routes take ?api_key= too.
      const bool query_key = req.path.rfind("/viz/", 0) == 0 && req.has_param("api_key") &&
                             req.param("api_key") == options_.api_key;
      // Anthropic's clients send the key as x-api-key; any route takes either header.
      const bool header_key =
          req.header("Authorization") == want ||
          (req.has_header("x-api-key") && req.header("x-api-key") == options_.api_key);
      if (!header_key && !query_key) {
        metrics_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        reply_error(res,
                    ApiError{.status = 401,
                             .type = "authentication_error",
                             .message = "invalid or missing API key "
                                        "(Authorization: Bearer KEY, or x-api-key: KEY)"},
                    dialect_for_path(req.path));
        return true;  // a body stays unread (the transport ends the connection)
      }
    }
    // A body is read only by the POST routes, under the limit. A length past it is a 413
    // before a byte is read; a body sent anywhere else gets its 404 or 405 the same way.
    // Either way the unread body ends the connection (it cannot carry another request).
    if (req.has_body()) {
      const bool post_route = req.method == "POST" && router_.has(req.path, "POST");
      if (post_route && req.content_length() > options_.max_body_bytes) {
        metrics_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        reply_error(res, body_too_large(options_.max_body_bytes), dialect_for_path(req.path));
        return true;
      }
      if (!post_route) {
        not_routed(req, res);
        return true;
      }
    }
    // Every body is read as JSON whatever its Content-Type: `curl -d` sends
    // application/x-www-form-urlencoded, and llama-server and Ollama take it; a body
    // that is not JSON is a 400 from the parser.
    return false;
  }

  void on_request(Request& req, Response& res) override {
    if (req.method == "OPTIONS") return answer_preflight(router_, req, res);
    const Router::Fn* fn = router_.find(req.method, req.path, req.matches);
    if (fn == nullptr) return not_routed(req, res);
    try {
      (*fn)(req, res);
    } catch (const std::exception& e) {
      res = Response{.headers = res.headers};
      reply_error(res, ApiError{.status = 500, .type = "server_error", .message = e.what()},
                  dialect_for_path(req.path));
    }
  }

  void on_refused(const Request& req, Response& res) override {
    if (res.status == 413) {
      metrics_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
      return reply_error(res, body_too_large(options_.max_body_bytes), dialect_for_path(req.path));
    }
    // An HTTP/2 client with prior knowledge (RFC 9113 §3.4): a 505 at once, so it
    // closes and falls back to HTTP/1.1 (sglang-router does).
    std::string message = res.status == 505   ? "HTTP/2 is not supported: use HTTP/1.1"
                          : !res.body.empty() ? res.body
                          : res.status == 404 ? "no such route"
                          : res.status == 405 ? "method not allowed"
                                              : fmt::format("HTTP {}", res.status);
    const ApiError e{.status = res.status,
                     .type = res.status == 505 ? "invalid_request_error" : error_type(res.status),
                     .message = std::move(message)};
    reply_error(res, e, dialect_for_path(req.path));
  }

  void on_done(const Request& req, const Response& res) override {
    // The worker thread's record of this request; a request refused before its head was
    // read has none: no time and no counts, rather than the previous request's.
    RequestLog& log = request_log();
    std::string tokens;
    if (log.n_prompt >= 0) {
      tokens = fmt::format(" prompt={} completion={} reused={}", log.n_prompt,
                           std::max(log.n_generated, 0), std::max(log.n_reused, 0));
    }
    const std::string ms =
        log.t0 == Clock::time_point{}
            ? std::string("-")
            : fmt::format("{:.1f}",
                          std::chrono::duration<double, std::milli>(Clock::now() - log.t0).count());
    const std::string id = log.request_id.empty() ? "" : " id=" + log.request_id;
    std::fprintf(stderr, "[server] %s %s %d%s %s ms%s\n", req.method.c_str(), req.path.c_str(),
                 log.status >= 0 ? log.status : res.status, tokens.c_str(), ms.c_str(), id.c_str());
    log = RequestLog{};
  }

 private:
  // 405 with Allow for a known path, else 404.
  void not_routed(const Request& req, Response& res) const {
    if (router_.known(req.path)) {
      const std::string allow = router_.allow(req.path);
      res.set_header("Allow", allow);
      reply_error(res, method_not_allowed(req, allow), dialect_for_path(req.path));
    } else {
      reply_error(res, no_such_route(), dialect_for_path(req.path));
    }
  }

  const ServerOptions& options_;
  Metrics& metrics_;
  const Router& router_;
};

sigset_t shutdown_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  return sigs;
}

}  // namespace

void block_shutdown_signals() {
  const sigset_t sigs = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
}

RequestLog& request_log() {
  thread_local RequestLog log;
  return log;
}

void reply_json(Response& res, const json& body, int status) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(Response& res, const ApiError& e, Dialect dialect) {
  switch (dialect) {
    case Dialect::kAnthropic:
      return reply_json(res, anthropic_error_body(e), e.status);
    case Dialect::kOllama:
      return reply_json(res, ollama_error_body(e), e.status);
    case Dialect::kOpenAI:
      return reply_json(res, error_body(e), e.status);
  }
}

Status serve(engine::Context& engine, const ServerOptions& options) {
  return serve(options, [&engine](ServerOptions&) -> Result<engine::Context*> { return &engine; });
}

Status serve(const ServerOptions& options_in, const LoadEngine& load) {
  ServerOptions options = options_in;  // `load` fills in what depends on the model
  block_shutdown_signals();
  std::signal(SIGPIPE, SIG_IGN);  // a closed client socket is a write error, not a kill

  // Listening from here: every request is a 503 "loading model" until the routes serve.
  auto bound =
      HttpServer::bind(TransportOptions{.host = options.host,
                                        .port = options.port,
                                        .max_body_bytes = options.max_body_bytes,
                                        .max_connections = options.max_connections,
                                        .timeout_s = options.timeout_s,
                                        .keep_alive_timeout_s = options.keep_alive_timeout_s});
  if (!bound.ok()) return bound.error();
  HttpServer& http_server = **bound;
  const int port = http_server.port();
  std::printf("minfer server loading the model on http://%s:%d (503 until ready)\n",
              options.host.c_str(), port);
  std::fflush(stdout);
  if (Config::get().test_load_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(Config::get().test_load_delay_ms));
  }
  auto loaded = load(options);
  if (!loaded.ok()) return loaded.error();
  engine::Context& engine = **loaded;
  if (!engine.has_tokenizer()) return make_error("serve: the model has no tokenizer");
  const tokenizer::Tokenizer& tok = engine.tokenizer();
  chat::RendererChoice renderer = chat::renderer_for(tok, options.chat_template);
  if (Status st = chat::validate_renderer(*renderer.renderer); !st.ok()) {
    return st.error().context("serve: the chat template cannot be used");
  }
  if (renderer.fallback) {
    std::fprintf(stderr, "[server] the model has no chat template; chat uses %.*s\n",
                 static_cast<int>(renderer.fallback_name.size()), renderer.fallback_name.data());
  }

  const sigset_t sigs = shutdown_signals();

  Metrics metrics;
  VizState viz(options.model_id);
  Scheduler scheduler(engine, options.scheduler, metrics, &viz);
  MINFER_TRY_STATUS(scheduler.start());

  std::atomic<int32_t> open_streams{0};
  ResponseStore responses(options.responses_max);
  ServerContext ctx{.engine = engine,
                    .tok = tok,
                    .renderer = *renderer.renderer,
                    .scheduler = scheduler,
                    .metrics = metrics,
                    .options = options,
                    .vocab = grammar::TokenVocab::build(tok),
                    .created = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count(),
                    .open_streams = &open_streams,
                    .responses = &responses,
                    .model_card = build_model_card(engine)};

  // Every route, for dispatch, 405's Allow and the CORS preflight; filled here,
  // read-only once the server serves.
  Router router;
  auto get = [&](const std::string& path, Router::Fn h) { router.add("GET", path, std::move(h)); };
  // POST routes get their body read by the transport, under --max-body.
  auto post = [&](const std::string& path, std::function<void(const std::string&, Response&)> h) {
    router.add("POST", path, [h = std::move(h)](Request& req, Response& res) { h(req.body, res); });
  };
  // A draining server (SIGINT/SIGTERM) answers 503, so a router or a readiness probe stops
  // sending it requests it would refuse.
  get("/health", [&metrics](const Request&, Response& res) {
    if (metrics.draining.load(std::memory_order_relaxed) != 0) {
      reply_error(
          res,
          {.status = 503, .type = "unavailable_error", .message = "the server is shutting down"});
      return;
    }
    reply_json(res, {{"status", "ok"}});
  });
  const std::string_view home = options.viz_home ? web::viz_html() : web::chat_html();
  for (const char* path : {"/", "/index.html"}) {
    get(path, [home](const Request&, Response& res) { reply_page(res, home); });
  }
  get("/chat", [](const Request&, Response& res) { reply_page(res, web::chat_html()); });
  get("/viz", [](const Request&, Response& res) { reply_page(res, web::viz_html()); });
  get("/viz/graph.svg", [&](const Request&, Response& res) {
    auto svg = viz.svg();
    if (!svg.ok()) {
      return reply_error(
          res,
          ApiError{.status = 501, .type = "not_implemented_error", .message = svg.error().message});
    }
    res.set_content(*svg, "image/svg+xml; charset=utf-8");
  });
  get("/viz/config", [&](const Request&, Response& res) {
    reply_json(res, {{"mode", options.viz_home ? "viz" : "serve"},
                     {"model", options.model_id},
                     {"prompt", options.viz_prompt},
                     {"autorun", !options.viz_prompt.empty()}});
  });
  get("/viz/graph.json", [&](const Request&, Response& res) {
    res.set_content(viz.graph_json(), "application/json; charset=utf-8");
  });
  get("/viz/events", [&](const Request&, Response& res) {
    handle_viz_events(viz, metrics, options.scheduler.n_slots, res);
  });
  get("/metrics", [&](const Request&, Response& res) {
    res.set_content(render_metrics(metrics, options.scheduler.n_slots),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  for (const char* path : {"/v1/models", "/models"}) {
    get(path, [&](const Request&, Response& res) { handle_models(ctx, res); });
    // A model id may hold '/' (vLLM's served names are often "org/model"): the rest of
    // the path is the id.
    get(std::string(path) + "/{*}",
        [&](const Request& req, Response& res) { handle_model_get(ctx, req.matches[0], res); });
  }
  // Routers' and llama-server clients' info routes (server/info.cpp).
  post("/tokenize",
       [&](const std::string& body, Response& res) { handle_tokenize(ctx, body, res); });
  post("/detokenize",
       [&](const std::string& body, Response& res) { handle_detokenize(ctx, body, res); });
  post("/v1/chat/completions/render",
       [&](const std::string& body, Response& res) { handle_chat_render(ctx, body, res); });
  for (const char* path : {"/get_server_info", "/server_info"}) {
    get(path, [&](const Request&, Response& res) { handle_server_info(ctx, res); });
  }
  for (const char* path : {"/get_model_info", "/model_info"}) {
    get(path, [&](const Request&, Response& res) { handle_model_info(ctx, res); });
  }
  get("/props", [&](const Request&, Response& res) { handle_props(ctx, res); });
  get("/slots", [&](const Request&, Response& res) { handle_slots(ctx, res); });
  // POST /slots/{id}?action=erase (an optional body).
  router.add("POST", "/slots/{id}", [&](Request& req, Response& res) {
    handle_slot_action(ctx, req.matches[0], req.param("action"), req.body, res);
  });
  for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
    post(path, [&](const std::string& body, Response& res) {
      handle_completion(ctx, Endpoint::kChat, body, res);
    });
  }
  for (const char* path : {"/v1/completions", "/completions"}) {
    post(path, [&](const std::string& body, Response& res) {
      handle_completion(ctx, Endpoint::kCompletion, body, res);
    });
  }
  // Anthropic's Messages API (its SDKs post to {base_url}/v1/messages).
  post("/v1/messages",
       [&](const std::string& body, Response& res) { handle_messages(ctx, body, res); });
  post("/v1/messages/count_tokens",
       [&](const std::string& body, Response& res) { handle_count_tokens(ctx, body, res); });
  // OpenAI's Responses API (stored responses named by one path segment).
  for (const std::string prefix : {"/v1/responses", "/responses"}) {
    post(prefix, [&](const std::string& body, Response& res) { handle_responses(ctx, body, res); });
    const std::string one = prefix + "/{id}";
    get(one,
        [&](const Request& req, Response& res) { handle_response_get(ctx, req.matches[0], res); });
    router.add("DELETE", one, [&](Request& req, Response& res) {
      handle_response_delete(ctx, req.matches[0], res);
    });
    router.add("POST", one + "/cancel", [&](Request& req, Response& res) {
      handle_response_cancel(ctx, req.matches[0], res);
    });
  }
  // Ollama's API (its clients call {host}/api/...).
  post("/api/chat",
       [&](const std::string& body, Response& res) { handle_ollama_chat(ctx, body, res); });
  post("/api/generate",
       [&](const std::string& body, Response& res) { handle_ollama_generate(ctx, body, res); });
  post("/api/show",
       [&](const std::string& body, Response& res) { handle_ollama_show(ctx, body, res); });
  get("/api/tags", [&](const Request&, Response& res) { handle_ollama_tags(ctx, res); });
  get("/api/ps", [&](const Request&, Response& res) { handle_ollama_ps(ctx, res); });
  get("/api/version", [&](const Request&, Response& res) { handle_ollama_version(ctx, res); });
  // Embeddings (an encoder model): OpenAI's, llama-server's and Ollama's routes.
  for (const char* path : {"/v1/embeddings", "/v1/embedding"}) {
    post(path, [&](const std::string& body, Response& res) {
      handle_embeddings(ctx, body, res, /*openai=*/true);
    });
  }
  for (const char* path : {"/embeddings", "/embedding"}) {
    post(path, [&](const std::string& body, Response& res) {
      handle_embeddings(ctx, body, res, /*openai=*/false);
    });
  }
  // Reranking (a cross-encoder): llama-server's four paths.
  for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"}) {
    post(path, [&](const std::string& body, Response& res) { handle_rerank(ctx, body, res); });
  }
  post("/api/embed", [&](const std::string& body, Response& res) {
    handle_ollama_embed(ctx, body, res, /*legacy=*/false);
  });
  post("/api/embeddings", [&](const std::string& body, Response& res) {
    handle_ollama_embed(ctx, body, res, /*legacy=*/true);
  });

  // The signal thread: the first SIGINT/SIGTERM starts the drain — the scheduler takes
  // no new request (503) and finishes what runs and what is queued, ending the rest at
  // the deadline with an error event; a second signal moves the deadline to now. The
  // HTTP server is stopped only once the scheduler has stopped and every completion
  // stream has written its last chunk (a stopped transport writes no more), or at the
  // deadline plus a grace second for a client that does not read.
  std::atomic<bool> listening_done{false};
  std::thread signals([&] {
    const timespec poll{.tv_sec = 0, .tv_nsec = 50'000'000};
    int n_signals = 0;
    bool stopping = false;
    Clock::time_point hard_stop{};
    while (!listening_done.load()) {
      const int sig = sigtimedwait(&sigs, nullptr, &poll);
      if (sig >= 0) {
        const auto now = Clock::now();
        if (++n_signals == 1) {
          std::fprintf(stderr, "[server] signal %d: draining (up to %d ms; again to stop now)\n",
                       sig, options.drain_ms);
          const auto deadline = now + std::chrono::milliseconds(options.drain_ms);
          scheduler.drain(deadline);
          hard_stop = deadline + std::chrono::seconds(1);
        } else {
          std::fprintf(stderr, "[server] signal %d: stopping now\n", sig);
          scheduler.drain(now);
          hard_stop = std::min(hard_stop, now + std::chrono::seconds(1));
        }
      }
      if (n_signals > 0 && !stopping &&
          ((scheduler.stopped() && open_streams.load(std::memory_order_acquire) == 0) ||
           Clock::now() >= hard_stop)) {
        stopping = true;
        http_server.stop();
      }
    }
  });
  Front front(options, metrics, router);
  // Returns after stop(), once every handler is done.
  http_server.serve(front, [&] {
    std::printf("minfer server listening on http://%s:%d (slots %u, n_ctx %u per request)\n",
                options.host.c_str(), port, options.scheduler.n_slots, options.scheduler.n_ctx);
    std::fflush(stdout);
  });
  listening_done.store(true);
  signals.join();
  scheduler.drain(Clock::now() + std::chrono::milliseconds(options.drain_ms));
  scheduler.join();
  std::fprintf(stderr, "[server] stopped: %llu requests completed, %llu cancelled\n",
               static_cast<unsigned long long>(metrics.requests_completed.load()),
               static_cast<unsigned long long>(metrics.requests_cancelled.load()));
  return Ok{};
}

}  // namespace minfer::server
