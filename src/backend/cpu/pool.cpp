// Stage 12 (kernels): persistent worker pool — workers spin briefly on the generation
// counter, then sleep on it (futex); the caller issues a wake syscall only when a
// worker is known to sleep (Dekker-style: sleepers_ and generation_ both seq_cst), so
// a steady decode step with busy workers makes no syscall. Dynamic chunks: one atomic
// fetch per chunk; a late or preempted worker simply claims nothing.
#include "backend/cpu/pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include "core/check.h"

namespace minfer::backend::cpu {
namespace {

// Spins before sleeping: long enough to cover the gap between two nodes of one step
// (microseconds), short enough not to steal a shared core for long.
constexpr int kSpinIterations = 4000;
// Waiting for the last chunks of a task: spin, then yield the core to the thread we
// wait for (it may share the core on an oversubscribed machine).
constexpr int kDoneSpinIterations = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

}  // namespace

ThreadPool::ThreadPool(int32_t n_threads) : n_threads_(n_threads) {
  MINFER_CHECK(n_threads >= 1, "ThreadPool: n_threads %d < 1", n_threads);
  threads_.reserve(static_cast<size_t>(n_threads - 1));
  for (int32_t i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&generation_);
  for (auto& t : threads_) t.join();
}

void ThreadPool::publish() {
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&generation_);
}

void ThreadPool::wait_done(int64_t want) {
  int spins = 0;
  while (n_done_.load(std::memory_order_acquire) != want) {
    if (++spins < kDoneSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::run(TaskFn fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  static_fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  static_gen_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  publish();
  fn(ctx, 0, n_threads_);
  wait_done(n_threads_ - 1);
}

void ThreadPool::for_each(int64_t n_chunks, ChunkFn fn, void* ctx) {
  MINFER_CHECK(n_chunks >= 0 && n_chunks < (int64_t{1} << 31), "for_each: %lld chunks",
               static_cast<long long>(n_chunks));
  if (n_threads_ == 1 || n_chunks <= 1) {
    for (int64_t i = 0; i < n_chunks; ++i) fn(ctx, i, 0);
    return;
  }
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  // The claim word moves to the new generation first: a late worker still inside the
  // previous generation must not read this task's n_chunks_ while the old claim word is
  // live, or it could claim (and count) chunk n_old of the new task, which then runs
  // twice and overfills n_done_ (a hang in wait_done).
  claim_.store(uint64_t{gen} << 32, std::memory_order_seq_cst);
  chunk_fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  n_chunks_.store(n_chunks, std::memory_order_release);
  publish();
  work_chunks(gen, 0);
  wait_done(n_chunks);
}

void ThreadPool::work_chunks(uint32_t gen, int32_t thread) {
  int64_t done = 0;
  for (;;) {
    uint64_t v = claim_.load(std::memory_order_acquire);
    // Claim the next chunk of generation `gen` (a stale generation claims nothing).
    for (;;) {
      if (static_cast<uint32_t>(v >> 32) != gen) goto out;
      // acquire: a new task's n_chunks_ is read only with its claim word visible, so
      // the CAS below then fails for a stale generation.
      if (static_cast<int64_t>(v & 0xFFFFFFFFu) >= n_chunks_.load(std::memory_order_acquire))
        goto out;
      if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
        break;
    }
    // The claim succeeded while the task was live: fn/ctx are this generation's.
    chunk_fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed),
                                              static_cast<int64_t>(v & 0xFFFFFFFFu), thread);
    ++done;
  }
out:
  if (done > 0) n_done_.fetch_add(done, std::memory_order_acq_rel);
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
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (generation_.load(std::memory_order_seq_cst) == seen) futex_wait(&generation_, seen);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        spins = 0;
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    // A run() task of this generation: every worker takes part and the caller waits
    // for all, so its fields are stable. Otherwise a for_each() (possibly already
    // finished: then no claim succeeds).
    if (static_gen_.load(std::memory_order_acquire) == g) {
      static_fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), ith,
                                                 n_threads_);
      n_done_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      work_chunks(g, ith);
    }
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
