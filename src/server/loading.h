// Stage 17 (HTTP): the answers while the model loads — the server binds and listens
// first, so a probe sees "loading" (503) instead of a refused connection.
// Invariant: it accepts on the listening socket httplib bound, and only until stop()
// returns; httplib's own accept loop starts after that, on the same socket, so no
// connection is refused or lost between the two.
#pragma once

#include <atomic>
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

 private:
  void run();

  const int listen_fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace minfer::server
