// Stage 17 (HTTP): ending a keep-alive connection whose request body was not read to
// its end (over --max-body, or sent to a route that takes none).
// Invariant: everything here runs on the HTTP worker thread that owns the connection;
// httplib 0.11.4 gives handlers no socket and no way to close one, so the socket is
// found by its address pair and swapped for a dead end once the response is written.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>

namespace minfer::server {

// The response now being built is the connection's last: it says "Connection: close",
// and close_if_marked() (from the logger, after the write) ends the connection.
void mark_close_after_response(httplib::Response& res);

// After the response is written: if it was marked, the client's socket is taken from
// httplib (which would parse the unread body as further requests) and closed politely:
// FIN after the response, then whatever the client still sends is read and dropped
// (never buffered) for up to `linger_ms`, so a client that sends its whole body before
// it reads (Python's http.client, requests) still gets the response, not a reset.
void close_if_marked(const httplib::Request& req, int linger_ms = 2000);

// Whether the current log line belongs to a connection close_if_marked() took (httplib
// parses a few leftover bytes it had already buffered as one last bad request).
bool on_taken_connection();

// Watches the client of one request (on its worker thread) while the handler waits
// for the scheduler: cpp-httplib 0.11.4 has no Request::is_connection_closed, so the
// socket is found once by its address pair (as close_if_marked does) and peeked.
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request* req) : req_(req) {}
  // The client closed its end (a zero-byte peek) or the socket failed. A client that
  // half-closes after sending its request (shutdown(SHUT_WR)) reads as gone too, as in
  // httplib's own is_socket_alive; HTTP clients do not do that. False when the socket
  // cannot be found (no request, or not a TCP socket).
  bool gone();
  // Waits while more than `max_queued` bytes sit unsent in the socket's send queue
  // (SIOCOUTQ), or the send buffer has no room, for as long as the client keeps taking
  // bytes: false when it took none for `stall`, or the socket failed. The send buffer itself is no
  // bound: Linux grows it to megabytes for a loopback client that reads nothing. True when the
  // socket cannot be found (the write then waits under httplib's own write timeout).
  bool drained_within(size_t max_queued, std::chrono::milliseconds stall);

 private:
  int fd();
  const httplib::Request* req_;
  int fd_ = -2;  // -2: not looked up yet; -1: not found
};

}  // namespace minfer::server
