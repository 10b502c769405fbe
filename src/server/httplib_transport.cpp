// Stage 17 (HTTP): the transport on cpp-httplib (Debian libcpp-httplib-dev 0.11.4):
// one worker thread per connection (http_pool.h), the client found through its socket
// (connection.h), the loading responder (loading.h) on the same listening socket.
// Invariant: httplib appears in this file and the workarounds it needs, nowhere else.
#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "server/connection.h"
#include "server/http_pool.h"
#include "server/loading.h"
#include "server/transport.h"

namespace minfer::server {
namespace {

using HandlerResponse = httplib::Server::HandlerResponse;

// The client of the request this worker thread serves, found through its socket.
class WatchedClient final : public http::ClientLink {
 public:
  explicit WatchedClient(const httplib::Request* req) : watch_(req) {}
  bool gone() override { return watch_.gone(); }
  ClientWatch& watch() { return watch_; }

 private:
  ClientWatch watch_;
};

// The request this worker thread serves, from its head to its log line.
struct Current {
  bool active = false;
  http::Request req;
  http::Response res;
  std::optional<WatchedClient> client;
};
thread_local Current t_current;

// An HTTP/2 client with prior knowledge opens with "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
// (RFC 9113 §3.4), which httplib reads as a request line it cannot parse. The answer is
// a 505 with Connection: close, at once, so the client closes and falls back to HTTP/1.1
// (sglang-router does). An HTTP/2 GOAWAY would need the socket, which httplib 0.11.4
// does not give for a request it could not parse (no peer address to find it by); for
// the same reason httplib goes on reading the connection, and parses the rest of the
// preface ("SM", the client's SETTINGS frame) as more bad requests: their answers reach
// no one who reads them, and they are left out of the log (t_after_h2_preface).
thread_local bool t_after_h2_preface = false;

class HttplibSink final : public http::StreamSink {
 public:
  HttplibSink(httplib::DataSink& sink, ClientWatch* watch) : sink_(sink), watch_(watch) {}
  bool write(std::string_view data) override { return sink_.write(data.data(), data.size()); }
  bool writable() override { return sink_.is_writable(); }
  void done() override { sink_.done(); }
  bool drained_within(size_t max_unsent, std::chrono::milliseconds stall) override {
    return watch_ == nullptr || watch_->drained_within(max_unsent, stall);
  }

 private:
  httplib::DataSink& sink_;
  ClientWatch* watch_;
};

http::Request convert(const httplib::Request& r) {
  http::Request out;
  out.method = r.method;
  out.target = r.target;
  out.path = r.path;
  for (const auto& [k, v] : r.headers) out.headers.emplace(k, v);
  for (const auto& [k, v] : r.params) out.params.emplace(k, v);
  return out;
}

// Writes `r` into httplib's response (the chunked provider moved along).
void apply(http::Response& r, httplib::Response& out) {
  out.status = r.status;
  for (const auto& [k, v] : r.headers) out.set_header(k, v);
  if (r.close) {
    mark_close_after_response(out);
  }
  if (r.provider) {
    ClientWatch* watch = t_current.client ? &t_current.client->watch() : nullptr;
    out.set_chunked_content_provider(
        r.content_type,
        [p = std::move(r.provider), watch](size_t, httplib::DataSink& sink) {
          HttplibSink s(sink, watch);
          return p(s);
        },
        [rel = std::move(r.release)](bool success) {
          if (rel) rel(success);
        });
  } else if (!r.body.empty() || !r.content_type.empty()) {
    out.set_content(r.body, r.content_type.c_str());
  }
}

}  // namespace

struct HttpServer::Impl {
  TransportOptions options;
  httplib::Server svr;
  int listen_fd = -1;
  int port = 0;
  std::optional<LoadingResponder> loading;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

int HttpServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<HttpServer>> HttpServer::bind(const TransportOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  httplib::Server& svr = impl->svr;
  // httplib's default sets SO_REUSEPORT as well, which lets a second server bind a busy
  // port and take half its connections: SO_REUSEADDR only, so a busy port is an error.
  // The listening socket is kept for the answers while the model loads.
  int* listen_fd = &impl->listen_fd;
  svr.set_socket_options([listen_fd](socket_t sock) {
    *listen_fd = sock;
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
  impl->port = port;
  impl->loading.emplace(impl->listen_fd);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::stop() {
  impl_->svr.stop();
}

void HttpServer::serve(http::Handler& handler, const std::function<void()>& on_serving) {
  impl_->loading.reset();
  httplib::Server& svr = impl_->svr;
  const TransportOptions& options = impl_->options;
  svr.new_task_queue = [n = options.max_connections] { return new GrowingPool(n); };
  svr.set_payload_max_length(options.max_body_bytes);
  svr.set_keep_alive_timeout(options.keep_alive_timeout_s);
  svr.set_read_timeout(options.timeout_s);
  svr.set_write_timeout(options.timeout_s);

  svr.set_pre_routing_handler([&handler](const httplib::Request& hreq, httplib::Response& hres) {
    t_after_h2_preface = false;  // a request parsed: the connection speaks HTTP/1.1
    Current& cur = t_current;
    cur = Current{};
    cur.active = true;
    cur.req = convert(hreq);
    cur.client.emplace(&hreq);
    cur.req.client = &*cur.client;
    cur.req.over_capacity = on_overflow_thread();
    if (!handler.on_head(cur.req, cur.res)) return HandlerResponse::Unhandled;
    if (cur.req.has_body()) cur.res.close = true;  // the body stays unread
    apply(cur.res, hres);
    return HandlerResponse::Handled;
  });
  // Every path and method reaches the handler, which routes (404 and 405 are its own).
  auto no_body = [&handler](const httplib::Request&, httplib::Response& hres) {
    Current& cur = t_current;
    handler.on_request(cur.req, cur.res);
    apply(cur.res, hres);
  };
  // httplib 0.11.4 buffers a chunked body whole whatever its payload limit: the body is
  // read here through its content reader, which stops at the first piece past the limit.
  const size_t limit = options.max_body_bytes;
  svr.Post(".*", [&handler, limit](const httplib::Request&, httplib::Response& hres,
                                   const httplib::ContentReader& reader) {
    Current& cur = t_current;
    if (cur.req.has_body()) {
      bool over = false;
      std::string& body = cur.req.body;
      const bool ok = reader([&](const char* data, size_t n) {
        if (n > limit - body.size()) {
          over = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (!ok) {
        cur.res = http::Response{};
        cur.res.status = over ? 413 : 400;
        cur.res.close = true;  // the rest of the body cannot carry another request
        handler.on_refused(cur.req, cur.res);
        apply(cur.res, hres);
        return;
      }
    }
    handler.on_request(cur.req, cur.res);
    apply(cur.res, hres);
  });
  svr.Get(".*", no_body);
  svr.Put(".*", no_body);
  svr.Patch(".*", no_body);
  svr.Delete(".*", no_body);
  svr.Options(".*", no_body);
  // httplib's own refusals (bad request line, headers too large, ...): the handler
  // shapes them; responses that already carry a body are left alone.
  const httplib::Server::HandlerWithResponse on_error = [&handler](const httplib::Request& hreq,
                                                                   httplib::Response& hres) {
    if (!hres.body.empty()) return HandlerResponse::Unhandled;
    http::Response res;
    res.status = hres.status;
    if (hreq.method == "PRI") {
      t_after_h2_preface = true;
      res.status = 505;
    }
    const http::Request req = convert(hreq);
    handler.on_refused(req, res);
    // No socket to close: httplib gives none for a request it could not parse.
    if (hreq.method == "PRI") res.set_header("Connection", "close");
    apply(res, hres);
    return HandlerResponse::Handled;
  };
  svr.set_error_handler(on_error);
  svr.set_exception_handler(
      [&handler](const httplib::Request& hreq, httplib::Response& hres, std::exception_ptr ep) {
        std::string what = "unexpected exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        http::Response res;
        res.status = 500;
        res.body = what;
        handler.on_refused(convert(hreq), res);
        apply(res, hres);
      });
  svr.set_logger([&handler](const httplib::Request& hreq, const httplib::Response& hres) {
    // Bytes of a body left unread, which httplib parsed as a request: not a request.
    if (on_taken_connection()) return;
    Current& cur = t_current;
    // The rest of an HTTP/2 preface, which httplib parsed as a request: not a request.
    if (t_after_h2_preface && hreq.method != "PRI" && !cur.active) return;
    if (cur.active) {
      cur.res.status = hres.status;
      handler.on_done(cur.req, cur.res);
    } else {
      // Refused before routing (a bad request line): what httplib read.
      http::Response res;
      res.status = hres.status;
      handler.on_done(convert(hreq), res);
    }
    cur = Current{};
    close_if_marked(hreq);  // the response is written: an unread body ends the connection
  });
  // Connections that come meanwhile wait in the listen backlog.
  if (on_serving) on_serving();
  svr.listen_after_bind();  // returns after stop(), once every handler is done
}

}  // namespace minfer::server
