// Stage 17 (HTTP): the task queue httplib runs connections on.
// httplib's model is one worker per connection for as long as the connection lives
// (keep-alive idle time and slow headers included), so a fixed pool is held by idle
// sockets: with 84 threads, 84 idle or slowly-sending clients stopped /health from being
// answered. This pool starts a thread when a connection arrives and none is idle, keeps
// finished threads parked for the next connection, and never runs more than `max`
// (past it, a connection waits for one to finish).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer::server {

class GrowingPool final : public httplib::TaskQueue {
 public:
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
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace minfer::server
