// Stage 17 (HTTP): the answers while the model loads — the server binds and listens
// first, so a probe sees "loading" (503) instead of a refused connection.
// Invariant: it accepts on the listening socket httplib bound, and only until stop()
// returns; httplib's own accept loop starts after that, on the same socket, so no
// connection is refused or lost between the two.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>
#include <thread>

namespace minfer::server {

// One thread: accepts each connection, reads its request line (up to kReadMs), answers
// GET /health 503 {"status":"loading model"} and anything else 503 with the OpenAI
// error shape and Retry-After: 1, and closes it. Connections are served one at a time.
class LoadingResponder {
 public:
  static constexpr int kReadMs = 500;
  explicit LoadingResponder(int listen_fd);
  ~LoadingResponder();
  LoadingResponder(const LoadingResponder&) = delete;
  LoadingResponder& operator=(const LoadingResponder&) = delete;

  // Stops accepting (within ~50 ms) and joins the thread.
  void stop();

  // The request reading and the answer without the socket (pure: the unit test and the
  // fuzz target drive them). The responder reads until head_complete() on what it has,
  // then answers response(request_path(head)).
  static constexpr size_t kMaxHeadBytes = 8192;
  // The request line has ended (a CRLF) or kMaxHeadBytes bytes have come without one.
  static bool head_complete(std::string_view head);
  // The request line's path: from after its first space up to the next space, '?' or
  // CR, or to the end ("GET /health?x HTTP/1.1" → "/health"); "" without a space.
  static std::string request_path(std::string_view head);
  // The whole HTTP response for `path`: 503 with {"status":"loading model"} for
  // "/health", the OpenAI error shape for any other path.
  static std::string response(std::string_view path);

 private:
  void run();

  const int listen_fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace minfer::server
