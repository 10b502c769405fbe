// Tests (backend): a small rig that runs a graph on the CPU backend the way the engine
// will — GraphCache (uid) + Allocator (memory) + Scheduler — with random weights.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_dot.h"
#include "graph/cache.h"
#include "quant/quant.h"
#include "sched/sched.h"

namespace minfer::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Bytes of `values` in `type` (reference quantizer; F32 is a copy).
inline std::vector<uint8_t> encode(DType type, std::span<const float> values) {
  auto rb = quant::row_bytes(type, values.size());
  EXPECT_TRUE(rb.ok());
  std::vector<uint8_t> out(*rb);
  EXPECT_TRUE(quant::quantize(type, values, out).ok());
  return out;
}

inline std::vector<float> decode(DType type, std::span<const uint8_t> bytes, size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(quant::dequantize(type, bytes, out).ok());
  return out;
}

// One call of dk.gemm: n_w weight rows of `w_row` bytes at `wb` against the n_x rows of
// `x` (k floats each), converted by dk.from_f32 into `xq` (rows of `x_row` bytes, kept
// for the caller's single-row dots). Returns y[j * n_w + i].
inline std::vector<float> run_gemm(const backend::cpu::DotKernel& dk, int64_t k,
                                   const std::vector<uint8_t>& wb, uint64_t w_row, int64_t n_w,
                                   const std::vector<float>& x, uint64_t x_row, int64_t n_x,
                                   std::vector<uint8_t>& xq) {
  xq.assign(x_row * static_cast<uint64_t>(n_x), 0);
  for (int64_t j = 0; j < n_x; ++j) dk.from_f32(x.data() + j * k, xq.data() + j * x_row, k);
  std::vector<float> y(static_cast<size_t>(n_w * n_x), -1.0f);
  dk.gemm(backend::cpu::GemmArgs{.k = k,
                                 .w = wb.data(),
                                 .w_stride = w_row,
                                 .n_w = n_w,
                                 .x = xq.data(),
                                 .x_stride = x_row,
                                 .n_x = n_x,
                                 .y = y.data(),
                                 .y_stride = n_w});
  return y;
}

class CpuRig {
 public:
  explicit CpuRig(int32_t n_threads, backend::cpu::CpuIsa isa = backend::cpu::CpuIsa::kAuto)
      : CpuRig(backend::cpu::CpuBackendOptions{.n_threads = n_threads, .isa = isa}) {}
  explicit CpuRig(const backend::cpu::CpuBackendOptions& options) {
    auto a = std::make_unique<alloc::Allocator>();
    alloc_ = a.get();
    cache_ = std::make_unique<graph::GraphCache>(std::move(a));
    auto b = backend::cpu::CpuBackend::create(options);
    EXPECT_TRUE(b.ok()) << b.error().message;
    cpu_ = b->get();
    sched_.add_backend(std::move(b).value());
  }

  // Caches (stamps a uid) and maps `g`; `key` distinguishes graphs in one rig.
  const graph::ComputeGraph& load(graph::ComputeGraph g, uint32_t key = 1, uint32_t n_ctx = 64) {
    graph::GraphParams p;
    p.n_tokens = key;
    p.n_out = 1;
    p.cparams.n_ctx = n_ctx;
    auto assigned = sched_.assign_backends(g);
    EXPECT_TRUE(assigned.ok()) << assigned.error().message;
    auto r = cache_->replace_graph(std::move(g), p);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return **r;
  }
  // Binds a weight's bytes (kept alive by the rig).
  void bind(const std::string& name, std::vector<uint8_t> bytes) {
    weights_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
    alloc_->bind_weight(name, weights_.back()->data(), weights_.back()->size());
  }
  void fill_i32(const graph::ComputeGraph& g, std::string_view name, std::span<const int32_t> v) {
    auto st = alloc_->fill_input_i32(g, name, v);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  void fill_f32(const graph::ComputeGraph& g, std::string_view name, std::span<const float> v) {
    auto st = alloc_->fill_input_f32(g, name, v);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  Status run(const graph::ComputeGraph& g) { return sched_.execute(g, *alloc_); }
  std::vector<float> read(const graph::ComputeGraph& g, graph::NodeId id) const {
    const graph::Node& n = g.node(id);
    std::vector<float> v(static_cast<size_t>(n.shape.n_elements()));
    std::memcpy(v.data(), alloc_->data(g, id), v.size() * sizeof(float));
    return v;
  }
  alloc::Allocator& allocator() { return *alloc_; }
  graph::GraphCache& cache() { return *cache_; }
  sched::Scheduler& sched() { return sched_; }
  backend::cpu::CpuBackend& cpu() { return *cpu_; }

 private:
  alloc::Allocator* alloc_ = nullptr;
  std::unique_ptr<graph::GraphCache> cache_;
  sched::Scheduler sched_;
  backend::cpu::CpuBackend* cpu_ = nullptr;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> weights_;
};

}  // namespace minfer::testing
