// Stage 12 (kernels): persistent worker pool — spin briefly, then sleep on the
// generation counter (C++20 atomic wait: a futex on Linux), so a decode step costs one
// wake-up per worker and nothing else.
#include "backend/cpu/pool.h"

#include "core/check.h"

namespace minfer::backend::cpu {
namespace {

// Spins before sleeping: long enough to cover the gap between two nodes of one step,
// short enough not to steal a shared core for long from other processes.
constexpr int kSpinIterations = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int32_t n_threads) : n_threads_(n_threads) {
  MINFER_CHECK(n_threads >= 1, "ThreadPool: n_threads %d < 1", n_threads);
  threads_.reserve(static_cast<size_t>(n_threads - 1));
  for (int32_t i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(TaskFn fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  n_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(ctx, 0, n_threads_);
  const int32_t want = n_threads_ - 1;
  int spins = 0;
  while (n_done_.load(std::memory_order_acquire) != want) {
    if (++spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker(int32_t ith) {
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t g = generation_.load(std::memory_order_acquire);
    while (g == seen) {
      if (++spins < kSpinIterations) {
        cpu_relax();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    fn_(ctx_, ith, n_threads_);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) return;
  const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  int spins = 0;
  while (barrier_phase_.load(std::memory_order_acquire) == phase) {
    if (++spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace minfer::backend::cpu
