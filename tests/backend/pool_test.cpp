// Stage 12 tests (kernels): the persistent worker pool — every thread runs each task
// once, barriers separate phases, and the pool survives many back-to-back runs.
#include "backend/cpu/pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace minfer::backend::cpu {
namespace {

TEST(ThreadPool, EveryThreadRunsEachTaskOnceAndBarriersOrderPhases) {
  for (int32_t nth : {1, 2, 3}) {
    ThreadPool pool(nth);
    std::vector<int> slot(static_cast<size_t>(nth), 0);
    std::atomic<int> bad{0};
    for (int step = 0; step < 300; ++step) {
      auto task = [&](int32_t ith, int32_t n) {
        if (n != nth) bad++;
        slot[static_cast<size_t>(ith)] = step;  // phase 1: each thread writes its slot
        pool.barrier();
        for (int v : slot) {  // phase 2: every slot already holds this step
          if (v != step) bad++;
        }
        pool.barrier();
      };
      pool.run(task);
    }
    EXPECT_EQ(bad.load(), 0) << nth;
  }
}

TEST(ThreadPool, ForEachRunsEveryChunkExactlyOnceInterleavedWithRun) {
  for (int32_t nth : {1, 2, 3}) {
    ThreadPool pool(nth);
    std::atomic<int> bad{0};
    for (int step = 0; step < 500; ++step) {
      const int64_t n_chunks = step % 13;  // 0 and 1 run inline on the caller
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n_chunks));
      auto chunk = [&](int64_t i, int32_t thread) {
        if (thread < 0 || thread >= nth) bad++;
        hits[static_cast<size_t>(i)]++;
      };
      pool.for_each(n_chunks, chunk);
      for (auto& h : hits) {
        if (h.load() != 1) bad++;
      }
      if (step % 7 == 0) {
        std::atomic<int> ran{0};
        auto task = [&](int32_t, int32_t) { ran++; };
        pool.run(task);
        if (ran.load() != nth) bad++;
      }
    }
    EXPECT_EQ(bad.load(), 0) << nth;
  }
}

}  // namespace
}  // namespace minfer::backend::cpu
