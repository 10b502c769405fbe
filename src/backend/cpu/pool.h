// Stage 12 (kernels): the persistent worker pool of the CPU backend.
// Invariants: threads are created once (constructor) and joined once (destructor);
// run() allocates nothing and makes no syscall beyond waking sleeping workers; a task
// sees (ith, nth) with nth fixed for the pool's lifetime, so kernels partition output
// rows by (ith, nth) — never one reduction — and results do not depend on nth.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace minfer::backend::cpu {

class ThreadPool {
 public:
  // A task body: called once per thread with its index and the thread count.
  using TaskFn = void (*)(void* ctx, int32_t ith, int32_t nth);

  explicit ThreadPool(int32_t n_threads);  // n_threads >= 1 (the caller is thread 0)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t n_threads() const { return n_threads_; }

  // Runs fn(ctx, ith, nth) on every thread (the caller as ith 0); returns when all
  // are done.
  void run(TaskFn fn, void* ctx);
  template <typename F>
  void run(F& f) {
    run([](void* c, int32_t ith, int32_t nth) { (*static_cast<F*>(c))(ith, nth); }, &f);
  }

  // Inside a task: waits until every thread of the pool reached this barrier.
  void barrier();

 private:
  void worker(int32_t ith);

  int32_t n_threads_;
  std::vector<std::thread> threads_;
  // The published task: written by run() before bumping generation_.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int32_t> n_done_{0};
  alignas(64) std::atomic<int32_t> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_phase_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace minfer::backend::cpu
