// Stage 12 tests (kernels): the persistent worker pool — every thread runs each task
// once, barriers separate phases, and the pool survives many back-to-back runs.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "backend/cpu/pool.h"

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

}  // namespace
}  // namespace minfer::backend::cpu
