// Stage 17 (HTTP): the transport — the listening socket, connections, HTTP/1.1 reading
// and writing, timeouts and the connection cap — in front of an http::Handler.
// Invariant: the transport never reaches the engine; it calls the handler and writes
// what the handler answers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/result.h"
#include "server/http_types.h"

namespace minfer::server {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = size_t{8} << 20;
  size_t max_connections = 1024;
  int timeout_s = 5;
  int keep_alive_timeout_s = 5;
};

class HttpServer {
 public:
  // Binds and listens (SO_REUSEADDR only: a port in use is an error, "HOST:PORT is in
  // use"). From here every request is answered 503 "loading model" until serve().
  static Result<std::unique_ptr<HttpServer>> bind(const TransportOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Serves `handler` until stop(); returns once every request in progress is done.
  // `on_serving` runs once every new request reaches the handler (before serve()
  // blocks): a client told then that the server is ready never gets a loading answer.
  void serve(http::Handler& handler, const std::function<void()>& on_serving = nullptr);
  // From any thread; serve() returns soon after.
  void stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::server
