// Stage 17 (HTTP): the server's own request and response types, and the two seams
// between the routes and the transport that reads and writes sockets (server/transport.h).
// Invariant: route handlers see only these types; the transport alone knows sockets,
// parsers and timers, so it can be replaced without touching a route.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::server::http {

// Header names compare without case (RFC 9110 §5.1).
struct CaseLess {
  bool operator()(std::string_view a, std::string_view b) const;
  using is_transparent = void;
};
using Headers = std::multimap<std::string, std::string, CaseLess>;
using Params = std::multimap<std::string, std::string>;

// The client of a request, as long as the request is being served.
class ClientLink {
 public:
  virtual ~ClientLink() = default;
  // The client closed its end or the connection failed. Bytes the client has sent
  // meanwhile (a pipelined request) do not count as leaving.
  virtual bool gone() = 0;
};

// Where a chunked (streaming) response's body goes, piece by piece.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Queues `data` as the next chunk: false when the client has left or the write failed.
  virtual bool write(std::string_view data) = 0;
  // Whether the client is still there to take more.
  virtual bool writable() = 0;
  // The body is complete: the last chunk is written after what is queued.
  virtual void done() = 0;
  // Backpressure: waits while more than `max_unsent` bytes are written but not yet taken
  // by the client, for as long as the client keeps taking bytes. False when it took
  // none for `stall`, or left.
  virtual bool drained_within(size_t max_unsent, std::chrono::milliseconds stall) = 0;
};
// Called again and again until it calls sink.done() or returns false (which ends the
// response without its last chunk, and the connection with it).
using StreamProvider = std::function<bool(StreamSink& sink)>;
// Called once when the response is gone (written to its end, or failed): true when the
// provider finished it.
using StreamRelease = std::function<void(bool finished)>;

struct Request {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // the request target as sent ("/v1/models?x=1")
  std::string path;    // the target's path, percent-decoded
  Headers headers;
  Params params;  // the target's query, decoded
  std::string body;
  // The route pattern's "{id}" segments (or "{*}" rest), in order (the router fills them).
  std::vector<std::string> matches;
  // The connection is past --max-connections: the answer is a 503 (or /health) and close.
  bool over_capacity = false;
  ClientLink* client = nullptr;  // never null while a handler runs

  // The first value of a header, "" without one.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  std::string param(std::string_view name) const;
  bool has_param(std::string_view name) const;
  // Content-Length as a number (0 when absent or unreadable).
  uint64_t content_length() const;
  bool chunked() const;  // Transfer-Encoding: chunked
  // Whether the request carries a body (chunked, or a length above 0).
  bool has_body() const { return chunked() || content_length() > 0; }
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  std::string content_type;
  // Set: the body is this provider's chunks (Transfer-Encoding: chunked).
  StreamProvider provider;
  StreamRelease release;
  // The connection ends after this response ("Connection: close"), e.g. after a body
  // left unread.
  bool close = false;

  // Replaces the header's value (adds it when absent).
  void set_header(const std::string& name, std::string value);
  std::string header(std::string_view name) const;
  void set_content(std::string content, std::string type);
  void set_chunked(std::string type, StreamProvider p, StreamRelease r = nullptr);
};

// What the transport calls, in this order, for each request it reads.
class Handler {
 public:
  virtual ~Handler() = default;
  // The request line and headers are read, not yet the body. True when `res` is the
  // answer: the body is then not read (and the connection ends after the answer if one
  // was sent). False: the transport reads the body (under its limit) and calls
  // on_request.
  virtual bool on_head(Request& req, Response& res) = 0;
  virtual void on_request(Request& req, Response& res) = 0;
  // The transport refused the request itself; res.status says why (400 unreadable
  // request, 408 too slow, 413 body past the limit, 431 headers too large, 505 HTTP/2
  // preface). `req` holds what was read. The handler writes the answer's body.
  virtual void on_refused(const Request& req, Response& res) = 0;
  // After the response is written (or could not be): the request's log line. On the
  // thread that ran on_head/on_request for the request.
  virtual void on_done(const Request& req, const Response& res) = 0;
};

// "a%20b+c" → "a b c" when `plus_space` (a query), "a b+c" otherwise (a path). Bad
// escapes are left as they are.
std::string percent_decode(std::string_view s, bool plus_space);
// "a=1&b=x%20y" → {a: 1, b: x y}; a key without '=' has the value "".
Params parse_query(std::string_view query);

}  // namespace minfer::server::http
