// Stage 17 (HTTP): GrowingPool (http_pool.h).
#include "server/http_pool.h"

#include <utility>

namespace minfer::server {
namespace {
thread_local bool t_overflow = false;
}  // namespace

bool on_overflow_thread() {
  return t_overflow;
}

GrowingPool::GrowingPool(size_t max_threads) : max_(max_threads == 0 ? 1 : max_threads) {}

GrowingPool::~GrowingPool() {
  shutdown();
}

void GrowingPool::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lk(mu_);
  if (jobs_.size() >= idle_ && threads_.size() >= max_) {
    // Every connection thread is taken: answer on an overflow thread if one is free.
    std::vector<std::thread> finished;
    for (auto it = overflow_.begin(); it != overflow_.end();) {
      if (*it->second) {
        finished.push_back(std::move(it->first));
        it = overflow_.erase(it);
      } else {
        ++it;
      }
    }
    if (overflow_.size() < kOverflowThreads && !shutdown_) {
      auto done = std::make_shared<bool>(false);
      overflow_.emplace_back(std::thread([this, done, fn = std::move(fn)] {
                               t_overflow = true;
                               fn();
                               std::lock_guard<std::mutex> g(mu_);
                               *done = true;
                             }),
                             done);
      lk.unlock();
      for (std::thread& t : finished) t.join();
      return;
    }
    lk.unlock();
    for (std::thread& t : finished) t.join();
    lk.lock();
  }
  jobs_.push_back(std::move(fn));
  // More waiting connections than parked threads: start one, up to the cap.
  if (jobs_.size() > idle_ && threads_.size() < max_) {
    threads_.emplace_back([this] { work(); });
  }
  lk.unlock();
  cv_.notify_one();
}

void GrowingPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutdown_ = true;
    threads.swap(threads_);
    for (auto& [t, done] : overflow_) threads.push_back(std::move(t));
    overflow_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t GrowingPool::n_threads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return threads_.size();
}

void GrowingPool::work() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [this] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (jobs_.empty()) return;  // shut down, nothing left to run
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    fn();
    lk.lock();
  }
}

}  // namespace minfer::server
