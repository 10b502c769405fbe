// Stage 17 (HTTP): the task queue httplib runs connections on.
// httplib's model is one worker per connection for as long as the connection lives
// (keep-alive idle time and slow headers included), so a fixed pool is held by idle
// sockets: with 84 threads, 84 idle or slowly-sending clients stopped /health from being
// answered. This pool starts a thread when a connection arrives and none is idle, keeps
// finished threads parked for the next connection, and never runs more than `max`.
// Past `max`, a connection is not left waiting: one of kOverflowThreads short-lived
// threads runs it with on_overflow_thread() true, and the server answers its request
// 503 (Retry-After) and closes it — or /health, answered as usual, then closed. Only
// when those are busy too (each holds a connection at most until its request is read,
// under the read timeouts) does a connection wait.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace minfer::server {

// Whether this thread runs a connection past --max-connections (GrowingPool).
bool on_overflow_thread();

class GrowingPool final : public httplib::TaskQueue {
 public:
  static constexpr size_t kOverflowThreads = 4;
  explicit GrowingPool(size_t max_threads);
  ~GrowingPool() override;
  GrowingPool(const GrowingPool&) = delete;
  GrowingPool& operator=(const GrowingPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread (httplib calls it after stop()).
  void shutdown() override;

  size_t n_threads() const;

 private:
  void work();

  const size_t max_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  // Overflow threads, each with its done flag (set under mu_), joined when done.
  std::vector<std::pair<std::thread, std::shared_ptr<bool>>> overflow_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace minfer::server
