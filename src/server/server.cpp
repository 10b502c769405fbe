// Stage 17 (HTTP): server set-up — routes, auth, error shapes, request log, signals
// and the drain.
#include "server/server.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "server/connection.h"
#include "server/http_pool.h"
#include "server/loading.h"
#include "server/routes.h"
#include "server/web_assets.h"

namespace minfer::server {
namespace {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

// X-Request-Id: the client's value when it is 1..128 visible ASCII characters (it goes
// into ids and the log line), else one of ours.
std::string request_id_for(const Request& req) {
  const std::string v = req.get_header_value("X-Request-Id");
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
         (req.method == "GET" && (req.path == "/" || req.path == "/index.html" ||
                                  req.path == "/viz" || req.path == "/chat"));
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
  res.set_chunked_content_provider(
      "text/event-stream",
      [&viz, &metrics, n_slots, cur](size_t, httplib::DataSink& sink) {
        if (metrics.draining.load(std::memory_order_relaxed) != 0) {
          sink.done();
          return true;
        }
        if (!sink.is_writable()) return false;  // the viewer left: stop timing steps soon
        if (!cur->first) {
          const auto next = cur->last + std::chrono::milliseconds(100);
          if (Clock::now() < next) std::this_thread::sleep_until(next);
        }
        std::string ev =
            "data: " + viz.snapshot(metrics, n_slots, &cur->seen, cur->first ? 0 : 250) + "\n\n";
        cur->first = false;
        cur->last = Clock::now();
        return sink.write(ev.data(), ev.size());
      },
      [&viz](bool) { viz.client_gone(); });
}

void reply_page(Response& res, std::string_view html) {
  res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
  res.set_header("Cache-Control", "no-cache");
  // The pages load nothing from elsewhere; the policy makes that a rule of the browser.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                 "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
}

// The methods of every registered path: exact paths, or patterns where a "{id}" segment
// stands for any one non-empty segment (the server has no other patterns but the
// OPTIONS catch-all).
class RouteMethods {
 public:
  void add(const std::string& path, const char* method) { methods_[path].push_back(method); }
  bool known(const std::string& path) const { return find(path) != nullptr; }
  bool has(const std::string& path, const std::string& method) const {
    const auto* ms = find(path);
    return ms != nullptr && std::find(ms->begin(), ms->end(), method) != ms->end();
  }
  // "GET, HEAD, OPTIONS" — HEAD wherever GET is (httplib answers it with the GET handler);
  // an unknown path gets every method the server has.
  std::string allow(const std::string& path) const {
    const auto* found = find(path);
    std::vector<std::string> ms = found ? *found : std::vector<std::string>{"GET", "POST"};
    std::string out;
    for (const std::string& m : ms) {
      out += m + ", ";
      if (m == "GET") out += "HEAD, ";
    }
    return out + "OPTIONS";
  }
  // The httplib route (a regex) of a registered path: "{id}" → one segment.
  static std::string regex(const std::string& path) {
    std::string out = path;
    for (size_t at = out.find("{id}"); at != std::string::npos; at = out.find("{id}", at)) {
      out.replace(at, 4, "([^/]+)");
    }
    return out;
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
  static bool matches(const std::string& pattern, const std::string& path) {
    size_t i = 0, k = 0;
    while (i < pattern.size() && k <= path.size()) {
      if (pattern.compare(i, 4, "{id}") == 0) {
        const size_t end = std::min(path.find('/', k), path.size());
        if (end == k) return false;
        i += 4;
        k = end;
      } else if (k < path.size() && pattern[i] == path[k]) {
        ++i;
        ++k;
      } else {
        return false;
      }
    }
    return i == pattern.size() && k == path.size();
  }
  const std::vector<std::string>* find(const std::string& path) const {
    if (auto it = methods_.find(path); it != methods_.end()) return &it->second;
    for (const auto& [pattern, ms] : methods_) {
      if (pattern.find("{id}") != std::string::npos && matches(pattern, path)) return &ms;
    }
    return nullptr;
  }
  std::map<std::string, std::vector<std::string>> methods_;
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
  if (req.get_header_value("Origin") == allowed) {
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

// Whether the request carries a body httplib would read (chunked, or a length).
bool has_body(const Request& req) {
  return ::strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0 ||
         req.get_header_value<uint64_t>("Content-Length") > 0;
}

// Reads the body through httplib's content reader, keeping at most `limit` bytes: the
// reader stops at the first piece past it (chunked or sized alike), the reply is 413
// and the connection ends after it. False when the reply is written.
bool read_body(const httplib::ContentReader& reader, size_t limit, Dialect dialect, Response& res,
               std::string& body) {
  bool over = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (n > limit - body.size()) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (ok) return true;
  reply_error(res, over ? body_too_large(limit) : bad_request("the request body could not be read"),
              dialect);
  mark_close_after_response(res);
  return false;
}

// An HTTP/2 client with prior knowledge opens with "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
// (RFC 9113 §3.4), which httplib reads as a request line it cannot parse. The answer is
// a 505 with Connection: close, at once, so the client closes and falls back to HTTP/1.1
// (sglang-router does). An HTTP/2 GOAWAY would need the socket, which httplib 0.11.4
// does not give for a request it could not parse (no peer address to find it by); for
// the same reason httplib goes on reading the connection, and parses the rest of the
// preface ("SM", the client's SETTINGS frame) as more bad requests: their answers reach
// no one who reads them, and they are left out of the log (t_after_h2_preface).
thread_local bool t_after_h2_preface = false;

HandlerResponse answer_http2_preface(Response& res) {
  t_after_h2_preface = true;
  reply_error(res, ApiError{.status = 505,
                            .type = "invalid_request_error",
                            .message = "HTTP/2 is not supported: use HTTP/1.1"});
  res.set_header("Connection", "close");
  return HandlerResponse::Handled;
}

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

  httplib::Server svr;
  // httplib's default sets SO_REUSEPORT as well, which lets a second server bind a busy
  // port and take half its connections: SO_REUSEADDR only, so a busy port is an error.
  // The listening socket is kept for the answers while the model loads.
  int listen_fd = -1;
  svr.set_socket_options([&listen_fd](socket_t sock) {
    listen_fd = sock;
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  int port = options.port;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
    if (port < 0) return make_error(fmt::format("serve: cannot bind {}", options.host));
  } else if (!svr.bind_to_port(options.host, port)) {
    const int err = errno;
    if (err == EADDRINUSE) return make_error(fmt::format("{}:{} is in use", options.host, port));
    return make_error(
        fmt::format("serve: cannot bind {}:{}: {}", options.host, port, std::strerror(err)));
  }
  // Listening from here: /health says 503 "loading model" until the routes below serve.
  std::optional<LoadingResponder> loading;
  loading.emplace(listen_fd);
  std::printf("minfer server loading the model on http://%s:%d (503 until ready)\n",
              options.host.c_str(), port);
  std::fflush(stdout);
  if (Config::get().test_load_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(Config::get().test_load_delay_ms));
  }
  auto loaded = load(options);
  loading.reset();
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

  svr.new_task_queue = [n = options.max_connections] { return new GrowingPool(n); };
  svr.set_payload_max_length(options.max_body_bytes);
  svr.set_keep_alive_timeout(options.keep_alive_timeout_s);
  svr.set_read_timeout(options.timeout_s);
  svr.set_write_timeout(options.timeout_s);

  // Every route's methods, for 405's Allow and the CORS preflight; filled as the
  // routes are registered below, read-only once the server listens.
  RouteMethods routes;
  // Browser clients (a web UI on another origin) need CORS; preflights carry no key.
  svr.Options(R"(/.*)", [&routes](const Request& req, Response& res) {
    res.status = 204;
    const std::string allow = routes.allow(req.path);
    res.set_header("Allow", allow);
    // The requested method is allowed when the route has it (for an unknown path, when
    // the server has it); otherwise no Allow-Methods, and the browser refuses.
    const std::string want = req.get_header_value("Access-Control-Request-Method");
    if (want.empty() || RouteMethods::lists(allow, want)) {
      res.set_header("Access-Control-Allow-Methods", allow);
    }
    // Echo the headers asked for (the OpenAI SDKs send their own x-stainless-* ones).
    const std::string headers = req.get_header_value("Access-Control-Request-Headers");
    res.set_header(
        "Access-Control-Allow-Headers",
        headers.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : headers);
    res.set_header("Access-Control-Max-Age", "600");
  });
  svr.set_pre_routing_handler([&](const Request& req, Response& res) {
    t_after_h2_preface = false;  // a request parsed: the connection speaks HTTP/1.1
    request_log() = RequestLog{.t0 = Clock::now(), .request_id = request_id_for(req), .req = &req};
    res.set_header("X-Request-Id", request_log().request_id);
    set_cors_origin(options.cors_origin, req, res);
    if (on_overflow_thread()) {
      // Past --max-connections (http_pool.h): answered at once and closed, /health as
      // usual, anything else 503.
      mark_close_after_response(res);
      if (req.path != "/health") {
        metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        res.set_header("Retry-After", "1");
        reply_error(res,
                    ApiError{.status = 503,
                             .type = "unavailable_error",
                             .message = fmt::format("the server has {} connections open "
                                                    "(--max-connections); retry later",
                                                    options.max_connections)},
                    dialect_for_path(req.path));
        return HandlerResponse::Handled;
      }
    }
    if (!options.api_key.empty() && !public_route(req)) {
      const std::string want = "Bearer " + options.api_key;
      // EventSource cannot send headers: the view's data routes take ?api_key= too.
      const bool query_key = req.path.rfind("/viz/", 0) == 0 && req.has_param("api_key") &&
                             req.get_param_value("api_key") == options.api_key;
      // Anthropic's clients send the key as x-api-key; any route takes either header.
      const bool header_key =
          req.get_header_value("Authorization") == want ||
          (req.has_header("x-api-key") && req.get_header_value("x-api-key") == options.api_key);
      if (!header_key && !query_key) {
        metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        reply_error(res,
                    ApiError{.status = 401,
                             .type = "authentication_error",
                             .message = "invalid or missing API key "
                                        "(Authorization: Bearer KEY, or x-api-key: KEY)"},
                    dialect_for_path(req.path));
        if (has_body(req)) mark_close_after_response(res);  // the body stays unread
        return HandlerResponse::Handled;
      }
    }
    // A body is read only by the POST routes, under the limit. A length past it is a 413
    // before a byte is read; a body sent anywhere else gets its 404 or 405 the same way.
    // Either way the unread body ends the connection (it cannot carry another request).
    if (has_body(req)) {
      const bool post_route = req.method == "POST" && routes.has(req.path, "POST");
      if (post_route && req.get_header_value<uint64_t>("Content-Length") > options.max_body_bytes) {
        metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        reply_error(res, body_too_large(options.max_body_bytes), dialect_for_path(req.path));
        mark_close_after_response(res);
        return HandlerResponse::Handled;
      }
      if (!post_route) {
        if (routes.known(req.path)) {
          const std::string allow = routes.allow(req.path);
          res.set_header("Allow", allow);
          reply_error(res, method_not_allowed(req, allow), dialect_for_path(req.path));
        } else {
          reply_error(res, no_such_route(), dialect_for_path(req.path));
        }
        mark_close_after_response(res);
        return HandlerResponse::Handled;
      }
    }
    // Every body is read as JSON whatever its Content-Type: `curl -d` sends
    // application/x-www-form-urlencoded, and llama-server and Ollama take it; a body
    // that is not JSON is a 400 from the parser.
    return HandlerResponse::Unhandled;
  });
  // httplib's own errors (unknown route, body too large, bad request line) get the
  // OpenAI shape too; responses that already carry a body are left alone.
  const httplib::Server::HandlerWithResponse on_error = [&routes](const Request& req,
                                                                  Response& res) {
    if (req.method == "PRI") return answer_http2_preface(res);
    if (!res.body.empty()) return HandlerResponse::Unhandled;
    // httplib answers 404 for a known path asked with a method it does not have.
    if (res.status == 404 && routes.known(req.path)) {
      const std::string allow = routes.allow(req.path);
      res.set_header("Allow", allow);
      reply_error(res, method_not_allowed(req, allow), dialect_for_path(req.path));
      return HandlerResponse::Handled;
    }
    std::string message = res.status == 404   ? "no such route"
                          : res.status == 413 ? "the request body is too large"
                          : res.status == 405 ? "method not allowed"
                                              : fmt::format("HTTP {}", res.status);
    reply_error(res,
                ApiError{.status = res.status, .type = error_type(res.status), .message = message},
                dialect_for_path(req.path));
    return HandlerResponse::Handled;
  };
  svr.set_error_handler(on_error);
  svr.set_exception_handler([](const Request& req, Response& res, std::exception_ptr ep) {
    std::string what = "unexpected exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, ApiError{.status = 500, .type = "server_error", .message = what},
                dialect_for_path(req.path));
  });
  svr.set_logger([](const Request& req, const Response& res) {
    // Bytes of a body left unread, which httplib parsed as a request: not a request.
    if (on_taken_connection()) return;
    // The rest of an HTTP/2 preface, which httplib parsed as a request: not a request.
    if (t_after_h2_preface && req.method != "PRI" && request_log().t0 == Clock::time_point{}) {
      return;
    }
    // The worker thread's record of this request; a request httplib refused before
    // routing (a bad request line) has none: no time and no counts, rather than the
    // previous request's on this thread.
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
    close_if_marked(req);  // the response is written: an unread body ends the connection
  });

  auto get = [&](const std::string& path, httplib::Server::Handler h) {
    routes.add(path, "GET");
    svr.Get(path, std::move(h));
  };
  // POST routes read their body themselves, under --max-body (httplib 0.11.4 buffers a
  // chunked body whole whatever its payload limit).
  auto post = [&](const std::string& path, std::function<void(const std::string&, Response&)> h) {
    routes.add(path, "POST");
    svr.Post(path, [&options, &metrics, h = std::move(h)](const Request& req, Response& res,
                                                          const httplib::ContentReader& reader) {
      std::string body;
      if (!read_body(reader, options.max_body_bytes, dialect_for_path(req.path), res, body)) {
        metrics.requests_rejected.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      h(body, res);
    });
  };
  get("/health", [](const Request&, Response& res) { reply_json(res, {{"status", "ok"}}); });
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
    // With a charset the type is not one cpp-httplib gzips: its deflate takes seconds
    // for the ~1 MB picture, while loopback moves the bytes in milliseconds.
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
    const std::string one = std::string(path) + "/{id}";
    routes.add(one, "GET");
    svr.Get(std::string(path) + "/(.+)",
            [&](const Request& req, Response& res) { handle_model_get(ctx, req.matches[1], res); });
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
  // POST /slots/{id}?action=erase (an optional body, read under --max-body).
  routes.add("/slots/{id}", "POST");
  svr.Post(RouteMethods::regex("/slots/{id}"), [&](const Request& req, Response& res,
                                                   const httplib::ContentReader& reader) {
    std::string body;
    if (has_body(req) && !read_body(reader, options.max_body_bytes, Dialect::kOpenAI, res, body)) {
      return;
    }
    handle_slot_action(ctx, req.matches[1], req.get_param_value("action"), body, res);
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
    svr.Get(RouteMethods::regex(one), [&](const Request& req, Response& res) {
      handle_response_get(ctx, req.matches[1], res);
    });
    routes.add(one, "GET");
    routes.add(one, "DELETE");
    svr.Delete(RouteMethods::regex(one), [&](const Request& req, Response& res) {
      handle_response_delete(ctx, req.matches[1], res);
    });
    // No body to read (the SDKs send none; httplib's payload limit bounds one sent).
    routes.add(one + "/cancel", "POST");
    svr.Post(RouteMethods::regex(one + "/cancel"), [&](const Request& req, Response& res) {
      handle_response_cancel(ctx, req.matches[1], res);
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
  // stream has written its last chunk (httplib stops writing chunked bodies once it is
  // stopped), or at the deadline plus a grace second for a client that does not read.
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
        svr.stop();
      }
    }
  });
  std::printf("minfer server listening on http://%s:%d (slots %u, n_ctx %u per request)\n",
              options.host.c_str(), port, options.scheduler.n_slots, options.scheduler.n_ctx);
  std::fflush(stdout);
  svr.listen_after_bind();  // returns after stop(), once every handler is done
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
