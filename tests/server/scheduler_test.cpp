// Stage 17 tests: the request scheduler without HTTP, on a tiny random model with the
// GPT-2 vocabulary (hermetic: no downloaded model). Bars: a seeded request's tokens are
// the same alone and beside other requests (bitwise, via the text bytes); a shared
// prefix is reused (counted) and gives the same output; a cancelled request's slot and
// cells are freed; a full queue refuses; the drain finishes queued work.
#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../engine/engine_fixture.h"

namespace minfer::server {
namespace {

using engine::testing::gpt2_vocab;
using engine::testing::make_engine;
using engine::testing::TinySpec;
using std::chrono::milliseconds;

constexpr engine::TokenId kEos = 50256;  // GPT-2 <|endoftext|>

struct Result1 {
  std::string text;
  int32_t n_generated = 0;
  int32_t n_reused = 0;
  std::string error;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void start(uint32_t n_slots, uint32_t max_queue = 16, uint32_t n_ctx = 128) {
    tiny_ = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 64, "sched");
    ASSERT_TRUE(tiny_.engine);
    sched_ = std::make_unique<Scheduler>(
        *tiny_,
        SchedulerOptions{
            .n_slots = n_slots, .n_ctx = n_ctx, .max_queue = max_queue, .step_tokens = 32},
        metrics_);
    ASSERT_TRUE(sched_->start().ok());
  }
  void TearDown() override {
    if (sched_) {
      sched_->drain(std::chrono::steady_clock::now() + milliseconds(5000));
      sched_->join();
    }
  }
  std::vector<engine::TokenId> prompt(int first, int n) const {
    std::vector<engine::TokenId> p;
    for (int i = 0; i < n; ++i) p.push_back(static_cast<engine::TokenId>((first + i * 37) % 5000));
    return p;
  }
  std::shared_ptr<JobStream> submit(std::vector<engine::TokenId> p, uint64_t seed,
                                    int32_t n_predict, SubmitResult* result = nullptr,
                                    size_t max_pending = JobStream::kMaxPendingBytes) {
    engine::SequenceOptions o{.n_predict = n_predict, .n_ctx = sched_->options().n_ctx};
    o.sampler.seed = seed;
    o.sampler.temp = 1.0f;
    o.sampler.top_k = 0;
    o.sampler.top_p = 1.0f;
    o.sampler.logit_bias = {{.id = kEos, .bias = -100.0f}};
    auto st = engine::SequenceState::create(tiny_->tokenizer(), sched_->token_bytes(), o);
    EXPECT_TRUE(st.ok());
    auto stream = std::make_shared<JobStream>(max_pending);
    const SubmitResult r =
        sched_->submit(Job{.prompt = std::move(p), .state = std::move(*st), .stream = stream});
    if (result) *result = r;
    return stream;
  }
  static Result1 collect(JobStream& s) {
    Result1 out;
    JobEvent ev;
    for (int waited = 0; waited < 600; ++waited) {
      if (!s.pop(ev, milliseconds(100))) continue;
      out.text += ev.text;
      if (ev.final) {
        out.n_generated = ev.n_generated;
        out.n_reused = ev.n_reused;
        out.error = ev.error;
        return out;
      }
    }
    ADD_FAILURE() << "no final event within 60 s";
    return out;
  }
  template <typename F>
  static bool eventually(F pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  engine::testing::TinyEngine tiny_;
  Metrics metrics_;
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(SchedulerTest, seeded_request_is_the_same_alone_and_beside_others_bitwise) {
  start(4);
  const auto target = prompt(11, 40);  // longer than a step's budget: chunked prefill
  const Result1 alone = collect(*submit(target, 7, 24));
  ASSERT_TRUE(alone.error.empty()) << alone.error;
  EXPECT_EQ(alone.n_generated, 24);
  // Others first, so the target joins steps that carry their decode rows and prefills.
  std::vector<std::shared_ptr<JobStream>> others;
  for (int k = 0; k < 5; ++k) others.push_back(submit(prompt(100 + k, 5 + 9 * k), 100 + k, 30));
  const Result1 beside = collect(*submit(target, 7, 24));
  for (auto& o : others) EXPECT_TRUE(collect(*o).error.empty());
  EXPECT_EQ(beside.text, alone.text);
  EXPECT_EQ(beside.n_generated, alone.n_generated);
  EXPECT_GT(metrics_.steps.load(), 24u);
  // Each request reserved its cells, so sequences decoding side by side did not
  // interleave: every window stayed one run plus one for a shared prefix (the
  // scheduler is idle here; the engine is not running).
  EXPECT_LE(tiny_->context_options().n_runs, 2);
}

TEST_F(SchedulerTest, shared_prefix_is_reused_and_the_output_unchanged) {
  start(2);
  auto p1 = prompt(3, 50);
  auto p2 = p1;
  p2.back() = 4999;                                // same first 49 tokens
  const Result1 ref = collect(*submit(p2, 5, 8));  // p2 with nothing cached
  // A fresh scheduler caches p1; p2 then reuses its first 49 tokens.
  sched_->drain(std::chrono::steady_clock::now());
  sched_->join();
  sched_.reset();
  start(2);
  ASSERT_TRUE(collect(*submit(p1, 1, 8)).error.empty());
  const uint64_t prefill_before = metrics_.prefill_tokens.load();
  const Result1 got = collect(*submit(p2, 5, 8));
  EXPECT_EQ(got.n_reused, 49);
  EXPECT_EQ(metrics_.prefill_tokens.load() - prefill_before, 1u);
  EXPECT_EQ(got.text, ref.text);
}

TEST_F(SchedulerTest, cancel_frees_the_slot_and_its_cells) {
  start(1);
  auto s = submit(prompt(9, 10), 3, 100);
  ASSERT_TRUE(eventually([&] { return metrics_.decode_tokens.load() >= 3; }));
  EXPECT_GT(metrics_.kv_cells_used.load(), 0u);
  s->cancel();
  ASSERT_TRUE(eventually([&] { return metrics_.running.load() == 0; }));
  EXPECT_EQ(metrics_.kv_cells_used.load(), 0u);
  EXPECT_EQ(metrics_.requests_cancelled.load(), 1u);
  // The slot serves the next request.
  EXPECT_EQ(collect(*submit(prompt(1, 4), 1, 3)).n_generated, 3);
}

TEST_F(SchedulerTest, full_stream_pauses_only_its_sequence_and_resumes_bitwise) {
  start(2);
  const Result1 ref = collect(*submit(prompt(5, 6), 9, 40));
  ASSERT_EQ(ref.n_generated, 40);
  // A reader that never pops, on a stream bounded at 8 bytes of text.
  constexpr size_t kBound = 8;
  auto stuck = submit(prompt(5, 6), 9, 40, nullptr, kBound);
  // The other slot keeps running to its end meanwhile.
  const Result1 other = collect(*submit(prompt(7, 6), 3, 30));
  EXPECT_TRUE(other.error.empty()) << other.error;
  EXPECT_EQ(other.n_generated, 30);
  ASSERT_TRUE(eventually([&] { return stuck->full(); }));
  const size_t pending = stuck->pending_bytes();
  // Paused: past the bound by at most the event that reached it, and no more steps.
  EXPECT_LT(pending, kBound + 64);
  const uint64_t steps = metrics_.steps.load();
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(stuck->pending_bytes(), pending);
  EXPECT_EQ(metrics_.steps.load(), steps);
  EXPECT_EQ(metrics_.running.load(), 1);
  // Read at last, it resumes and ends with the output it has alone.
  const Result1 got = collect(*stuck);
  EXPECT_EQ(got.n_generated, 40);
  EXPECT_EQ(got.text, ref.text);
}

TEST_F(SchedulerTest, full_queue_refuses_and_drain_finishes_queued_requests) {
  start(1, /*max_queue=*/1);
  auto a = submit(prompt(1, 4), 1, 60);
  ASSERT_TRUE(eventually([&] { return metrics_.running.load() == 1; }));
  SubmitResult rb{}, rc{};
  auto b = submit(prompt(2, 4), 2, 5, &rb);
  submit(prompt(3, 4), 3, 5, &rc);
  EXPECT_EQ(rb, SubmitResult::kQueued);
  EXPECT_EQ(rc, SubmitResult::kQueueFull);
  sched_->drain(std::chrono::steady_clock::now() + milliseconds(60000));
  SubmitResult rd{};
  submit(prompt(4, 4), 4, 5, &rd);
  EXPECT_EQ(rd, SubmitResult::kDraining);
  EXPECT_EQ(collect(*a).n_generated, 60);
  EXPECT_EQ(collect(*b).n_generated, 5);
  sched_->join();
  EXPECT_EQ(metrics_.requests_completed.load(), 2u);
}

TEST_F(SchedulerTest, drain_deadline_cancels_what_is_left) {
  start(1);
  auto a = submit(prompt(1, 4), 1, 120);
  auto b = submit(prompt(2, 4), 2, 5);
  ASSERT_TRUE(eventually([&] { return metrics_.decode_tokens.load() >= 2; }));
  sched_->drain(std::chrono::steady_clock::now());
  sched_->join();
  const Result1 ra = collect(*a), rb = collect(*b);
  EXPECT_EQ(ra.error, "the server is shutting down");
  EXPECT_EQ(rb.error, "the server is shutting down");
  EXPECT_LT(ra.n_generated, 120);
}

}  // namespace
}  // namespace minfer::server
