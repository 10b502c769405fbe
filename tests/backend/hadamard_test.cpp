// Tests for stage 12 (kernels): the Walsh-Hadamard rotation of a quantized KV cache
// (hadamard.h) — bit for bit llama.cpp's CPU transform (ggml_compute_forward_fwht, its
// AVX-512 build: scalar butterflies below 16-lane spans, fused u + v·(−1) above), the
// orthonormal matrix ggml_gen_hadamard builds within f32 rounding, its own inverse, and
// the graph op through the CPU backend (thread- and batch-independent).
#include "backend/cpu/hadamard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/fp16.h"
#include "graph/builder.h"
#include "harness.h"

namespace minfer::backend::cpu {
namespace {

using graph::GraphBuilder;
using graph::NodeId;
using testing::CpuRig;
using testing::random_floats;

// ggml's fwht row as its 16-lane build runs it, written out independently: the scale,
// the scalar passes of span < 16, then the vector passes as fmaf(v, -1, u) lane by lane.
std::vector<float> ggml_fwht_reference(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  const float scale = 1.0f / sqrtf(static_cast<float>(n));
  std::vector<float> d(x.size());
  for (int64_t j = 0; j < n; ++j) d[j] = x[j] * scale;
  const int64_t step = 16;
  for (int64_t len = 1; len < step && len < n; len <<= 1) {
    for (int64_t i = 0; i < n; i += 2 * len) {
      for (int64_t j = 0; j < len; ++j) {
        const float u = d[i + j], v = d[i + len + j];
        d[i + j] = u + v;
        d[i + len + j] = u - v;
      }
    }
  }
  for (int64_t len = step; len < n; len <<= 1) {
    for (int64_t i = 0; i < n; i += 2 * len) {
      for (int64_t j = 0; j < len; ++j) {
        const float u = d[i + j], v = d[i + len + j];
        d[i + j] = u + v;
        d[i + len + j] = std::fma(v, -1.0f, u);
      }
    }
  }
  return d;
}

// ggml_gen_hadamard's matrix (row i, column j), in f64: H[0][0] = 1/sqrt(n), doubled
// into [[H, H], [H, -H]] until it has order n.
std::vector<double> hadamard_matrix(int64_t n) {
  std::vector<double> h(static_cast<size_t>(n * n));
  h[0] = 1.0 / std::sqrt(static_cast<double>(n));
  for (int64_t s = 1; s < n; s *= 2) {
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        const double v = h[i * n + j];
        h[(i + s) * n + j] = v;
        h[i * n + j + s] = v;
        h[(i + s) * n + j + s] = -v;
      }
    }
  }
  return h;
}

TEST(Hadamard, BlockIsGgmlFwhtBitForBitAndTheOrthonormalMatrixWithin1e6) {
  for (int64_t n : {2, 8, 16, 32, 64, 128, 256}) {
    std::vector<float> x =
        random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n), -8.0f, 8.0f);
    x[0] = 1e4f;  // an outlier: the rotation spreads it over the block
    std::vector<float> y(x.size());
    hadamard_block(n, x.data(), y.data());
    const std::vector<float> want = ggml_fwht_reference(x);
    const std::vector<double> h = hadamard_matrix(n);
    double norm_x = 0.0, norm_y = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(fp32_to_bits(y[i]), fp32_to_bits(want[i])) << "n " << n << " i " << i;
      double exact = 0.0;
      for (int64_t j = 0; j < n; ++j) exact += h[i * n + j] * x[j];
      ASSERT_NEAR(y[i], exact, 1e-6 * 1e4 * std::log2(static_cast<double>(n))) << n << " " << i;
      norm_x += double{x[i]} * x[i];
      norm_y += double{y[i]} * y[i];
    }
    EXPECT_NEAR(norm_y, norm_x, 1e-5 * norm_x) << n;  // orthonormal
    // its own inverse (H symmetric, H·H = I): rotating twice gives x back
    std::vector<float> back(x.size());
    hadamard_block(n, y.data(), back.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], x[i], 1e-6 * 1e4 * n) << n << " " << i;
    // in place (y aliases x) is the same
    std::vector<float> inplace = x;
    hadamard_block(n, inplace.data(), inplace.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(fp32_to_bits(inplace[i]), fp32_to_bits(y[i]));
  }
}

// The node over [64·2, rows] (two 64-blocks a row) or 128-blocks: each block is
// hadamard_block of its elements, whatever the thread count or the rows beside it.
TEST(Hadamard, GraphOpEqualsPerBlockKernelAndIsThreadAndBatchInvariant_bitwise) {
  const auto x = random_floats(128 * 9, 41, -4.0f, 4.0f);
  auto run = [&](int threads, int64_t rows, int32_t block) {
    CpuRig rig(threads);
    GraphBuilder b;
    NodeId in = b.input("x", DType::kF32, {128, rows});  // F32 [128, rows]
    NodeId y = b.hadamard(in, block);                    // F32 [128, rows]
    b.mark_output(y);
    const graph::ComputeGraph& graph = rig.load(b.finish());
    rig.fill_f32(graph, "x", std::vector<float>(x.begin(), x.begin() + 128 * rows));
    EXPECT_TRUE(rig.run(graph).ok());
    return rig.read(graph, y);
  };
  for (int32_t block : {64, 128}) {
    const std::vector<float> all = run(2, 9, block);
    const std::vector<float> one = run(1, 1, block);
    std::vector<float> ref(x.size());
    for (size_t at = 0; at < x.size(); at += static_cast<size_t>(block)) {
      hadamard_block(block, x.data() + at, ref.data() + at);
    }
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(fp32_to_bits(all[i]), fp32_to_bits(ref[i])) << block << " " << i;
    }
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(fp32_to_bits(one[i]), fp32_to_bits(all[i])) << block << " " << i;
    }
  }
}

}  // namespace
}  // namespace minfer::backend::cpu
