// Stage 12 (kernels): the persistent worker pool of the CPU backend.
// Invariants: threads are created once (constructor) and joined once (destructor);
// run()/for_each() allocate nothing and make no syscall unless a worker is asleep
// (spin first, then a futex); for_each hands out chunks through one atomic counter, so
// which thread computes a chunk varies but what a chunk computes does not — kernels
// give each chunk whole output rows, never a part of one reduction, and results do not
// depend on the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace minfer::backend::cpu {

class ThreadPool {
 public:
  // A static task body: called once per thread with its index and the thread count.
  using TaskFn = void (*)(void* ctx, int32_t ith, int32_t nth);
  // A chunk body: chunk index in [0, n_chunks) and the index of the executing thread
  // (for per-thread scratch; never for partitioning).
  using ChunkFn = void (*)(void* ctx, int64_t chunk, int32_t thread);

  explicit ThreadPool(int32_t n_threads);  // n_threads >= 1 (the caller is thread 0)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t n_threads() const { return n_threads_; }

  // Runs fn(ctx, ith, nth) on every thread (the caller as ith 0); returns when all
  // are done. Tasks that need barrier() use this form.
  void run(TaskFn fn, void* ctx);
  template <typename F>
  void run(F& f) {
    run([](void* c, int32_t ith, int32_t nth) { (*static_cast<F*>(c))(ith, nth); }, &f);
  }

  // Runs fn(ctx, chunk, thread) once for every chunk in [0, n_chunks), chunks claimed
  // dynamically (a descheduled worker never holds up chunks it has not claimed); the
  // caller works too. n_chunks <= 1 runs inline on the caller without waking anyone.
  void for_each(int64_t n_chunks, ChunkFn fn, void* ctx);
  template <typename F>
  void for_each(int64_t n_chunks, F& f) {
    for_each(
        n_chunks,
        [](void* c, int64_t chunk, int32_t thread) { (*static_cast<F*>(c))(chunk, thread); }, &f);
  }

  // Inside a run() task: waits until every thread of the pool reached this barrier.
  void barrier();

 private:
  void worker(int32_t ith);
  void publish();
  void wait_done(int64_t want);
  void work_chunks(uint32_t gen, int32_t thread);

  int32_t n_threads_;
  std::vector<std::thread> threads_;
  // The published task: written by the caller before bumping generation_; read by a
  // worker only after it claimed a chunk of that generation (dynamic) or saw the
  // generation (static, where the caller waits for every worker).
  std::atomic<TaskFn> static_fn_{nullptr};
  std::atomic<ChunkFn> chunk_fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_chunks_{0};
  std::atomic<uint32_t> static_gen_{0};  // generation of the live run() task (0: none)
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int32_t> sleepers_{0};
  // (generation << 32) | next chunk: a claim succeeds only for the live generation.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> n_done_{0};
  alignas(64) std::atomic<int32_t> barrier_count_{0};
  alignas(64) std::atomic<uint32_t> barrier_phase_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace minfer::backend::cpu
