// Tests for stage 12 (kernels): GeGLU (ggml's f16 gelu table) and tanh — the scalar
// reference against the formula, the AVX2 twin against the scalar one bit for bit,
// and the graph ops through the CPU backend (batch- and thread-independent).
#include "backend/cpu/geglu.h"

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

// The table rounds x to f16 (relative 2^-11) and gelu(x) to f16 (another 2^-11); gelu's
// slope is at most ~1.13, so |table - gelu(x)| <= ~2.5·2^-11 relative to max(|x|, 1)
// plus the f32 evaluation of the formula.
constexpr double kTableRel = 3.0 / 2048.0;

double gelu_exact(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
}

TEST(Geglu, FormulaIsTheTanhApproximation_within1e6Rel) {
  for (float x : random_floats(2000, 5, -12.0f, 12.0f)) {
    ASSERT_NEAR(gelu_tanh_f32(x), gelu_exact(x), 1e-6 * std::max(1.0, std::fabs(double{x}))) << x;
  }
}

TEST(Geglu, ScalarKernelIsGgmlTableLookup) {
  std::vector<float> x = random_floats(4096, 11, -12.0f, 12.0f);
  for (float v : {-10.0f, -9.999f, 10.0f, 9.999f, 0.0f, -0.0f, 1e-8f, -1e-8f, 65504.0f, -1e6f}) {
    x.push_back(v);
  }
  std::vector<float> up = random_floats(x.size(), 12, -2.0f, 2.0f);
  std::vector<float> y(x.size());
  geglu_scalar(static_cast<int64_t>(x.size()), x.data(), up.data(), y.data(), gelu_f16_table());
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    float want;
    if (v <= -10.0f) {
      want = 0.0f;  // ggml: exactly 0, not 0 · up
    } else if (v >= 10.0f) {
      want = v * up[i];
    } else {
      const float t = fp16_to_fp32(fp32_to_fp16(gelu_tanh_f32(fp16_to_fp32(fp32_to_fp16(v)))));
      want = t * up[i];
    }
    ASSERT_EQ(fp32_to_bits(y[i]), fp32_to_bits(want)) << "x " << v;
    if (std::fabs(v) < 10.0f) {
      ASSERT_NEAR(y[i], gelu_exact(v) * up[i],
                  kTableRel * std::max(1.0, std::fabs(double{v})) * std::fabs(double{up[i]}))
          << v;
    }
  }
}

TEST(Geglu, Avx2EqualsScalarWithAndWithoutUp_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  std::vector<float> x = random_floats(4099, 21, -14.0f, 14.0f);  // ragged tail
  for (float v :
       {-10.0f, 10.0f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65520.0f, -65520.0f, -1.999f}) {
    x.push_back(v);
  }
  std::vector<float> up = random_floats(x.size(), 22, -3.0f, 3.0f);
  for (bool fma : {false, true}) {
    std::vector<float> a(x.size()), b(x.size());
    geglu_scalar(static_cast<int64_t>(x.size()), x.data(), up.data(), a.data(),
                 gelu_f16_table(fma));
    geglu_avx2(static_cast<int64_t>(x.size()), x.data(), up.data(), b.data(), gelu_f16_table(fma));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(fp32_to_bits(a[i]), fp32_to_bits(b[i])) << "x " << x[i] << " fma " << fma;
    }
    // No up factor: gelu alone (the gelu op's kernel), the same bits as a product by 1.
    const std::vector<float> one(x.size(), 1.0f);
    std::vector<float> c(x.size()), d(x.size()), e(x.size());
    geglu_scalar(static_cast<int64_t>(x.size()), x.data(), nullptr, c.data(), gelu_f16_table(fma));
    geglu_avx2(static_cast<int64_t>(x.size()), x.data(), nullptr, d.data(), gelu_f16_table(fma));
    geglu_scalar(static_cast<int64_t>(x.size()), x.data(), one.data(), e.data(),
                 gelu_f16_table(fma));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(fp32_to_bits(c[i]), fp32_to_bits(d[i])) << "x " << x[i] << " fma " << fma;
      if (!std::isnan(x[i])) {
        ASSERT_EQ(fp32_to_bits(c[i]), fp32_to_bits(e[i])) << "x " << x[i];
      }
    }
  }
}

// llama.cpp's native build contracts 1 + 0.044715·x·x into an fma when it fills its table;
// of the 65536 entries that changes one, x = -1.999 (0xbfff): -0.04550171 (llama.cpp's
// value, read from its ffn_geglu node) instead of -0.04547119. Every other entry is the
// uncontracted table's, and the FMA formula is still the tanh approximation.
TEST(Geglu, LlamaCppFmaTableDiffersFromThePlainOneOnlyAtMinus1999) {
  const float* plain = gelu_f16_table(false);
  const float* fma = gelu_f16_table(true);
  std::vector<uint32_t> differ;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = plain[h], b = fma[h];
    if (fp32_to_bits(a) != fp32_to_bits(b) && !(std::isnan(a) && std::isnan(b)))
      differ.push_back(h);
  }
  ASSERT_EQ(differ, std::vector<uint32_t>{0xbfffu});
  EXPECT_EQ(fma[0xbfff], fp16_to_fp32(fp32_to_fp16(-0.04550171f)));
  EXPECT_EQ(plain[0xbfff], fp16_to_fp32(fp32_to_fp16(-0.04547119f)));
  for (float x : random_floats(2000, 6, -12.0f, 12.0f)) {
    ASSERT_NEAR(gelu_tanh_f32_fma(x), gelu_exact(x), 1e-6 * std::max(1.0, std::fabs(double{x})))
        << x;
  }
}

// The ops through the backend: geglu rows are independent of the thread count and of
// how many rows share the node; tanh is tanhf.
TEST(Geglu, GraphOpsThreadAndBatchInvariant_bitwise) {
  auto run = [](int threads, int64_t rows, const std::vector<float>& g,
                const std::vector<float>& u) {
    CpuRig rig(threads);
    GraphBuilder b;
    NodeId gate = b.input("g", DType::kF32, {96, rows});     // F32 [96, rows]
    NodeId up = b.input("u", DType::kF32, {96, rows});       // F32 [96, rows]
    NodeId y = b.geglu(gate, up);                            // F32 [96, rows]
    NodeId yl = b.geglu(gate, up, /*llamacpp_table=*/true);  // F32 [96, rows]
    NodeId t = b.tanh(gate);                                 // F32 [96, rows]
    b.mark_output(y);
    b.mark_output(t);
    b.mark_output(yl);
    const graph::ComputeGraph& graph = rig.load(b.finish());
    rig.fill_f32(graph, "g", std::vector<float>(g.begin(), g.begin() + 96 * rows));
    rig.fill_f32(graph, "u", std::vector<float>(u.begin(), u.begin() + 96 * rows));
    EXPECT_TRUE(rig.run(graph).ok());
    return std::make_tuple(rig.read(graph, y), rig.read(graph, t), rig.read(graph, yl));
  };
  auto g = random_floats(96 * 7, 31, -6.0f, 6.0f);
  const auto u = random_floats(96 * 7, 32);
  g[5] = -1.999f;  // the entry where the two tables differ
  const auto [y7, t7, l7] = run(3, 7, g, u);
  const auto [y1, t1, l1] = run(1, 1, g, u);
  std::vector<float> ref(96), refl(96);
  geglu_scalar(96, g.data(), u.data(), ref.data(), gelu_f16_table(false));
  geglu_scalar(96, g.data(), u.data(), refl.data(), gelu_f16_table(true));
  for (int i = 0; i < 96; ++i) {
    EXPECT_EQ(fp32_to_bits(y7[i]), fp32_to_bits(y1[i])) << i;
    EXPECT_EQ(fp32_to_bits(y7[i]), fp32_to_bits(ref[i])) << i;
    EXPECT_EQ(fp32_to_bits(l7[i]), fp32_to_bits(l1[i])) << i;
    EXPECT_EQ(fp32_to_bits(l7[i]), fp32_to_bits(refl[i])) << i;
    EXPECT_EQ(fp32_to_bits(t7[i]), fp32_to_bits(std::tanh(g[i]))) << i;
  }
  EXPECT_NE(fp32_to_bits(y7[5]), fp32_to_bits(l7[5]));
  for (int i = 0; i < 96 * 7; ++i) EXPECT_NEAR(y7[i], gelu_exact(g[i]) * u[i], 0.02) << i;
}

// The encoder ops: gelu is geglu's table without the up factor (ggml_vec_gelu_f32: 0 at
// <= -10, x at >= 10); layer_norm is (x - mean) / sqrt(var + eps) per row, checked
// against the formula in double; both bit-identical at any thread and row count.
TEST(Gelu, GeluAndLayerNormOpsMatchFormulasAndAreThreadAndBatchInvariant) {
  auto run = [](int threads, int64_t rows, const std::vector<float>& x) {
    CpuRig rig(threads);
    GraphBuilder b;
    NodeId in = b.input("x", DType::kF32, {200, rows});  // F32 [200, rows]
    NodeId g = b.gelu(in);                               // F32 [200, rows]
    NodeId n = b.layer_norm(in, 1e-12f);                 // F32 [200, rows]
    b.mark_output(g);
    b.mark_output(n);
    const graph::ComputeGraph& graph = rig.load(b.finish());
    rig.fill_f32(graph, "x", std::vector<float>(x.begin(), x.begin() + 200 * rows));
    EXPECT_TRUE(rig.run(graph).ok());
    return std::make_pair(rig.read(graph, g), rig.read(graph, n));
  };
  auto x = random_floats(200 * 5, 41, -12.0f, 12.0f);
  x[3] = -10.0f;
  x[4] = 10.0f;
  x[5] = -1.999f;
  const auto [g5, n5] = run(3, 5, x);
  const auto [g1, n1] = run(1, 1, x);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(fp32_to_bits(g5[i]), fp32_to_bits(g1[i])) << i;
    EXPECT_EQ(fp32_to_bits(n5[i]), fp32_to_bits(n1[i])) << i;
  }
  EXPECT_EQ(g5[3], 0.0f);
  EXPECT_EQ(g5[4], 10.0f);
  for (int i = 0; i < 200 * 5; ++i) {
    float up = 1.0f, want = 0.0f;
    geglu_scalar(1, &x[i], &up, &want, gelu_f16_table());
    EXPECT_EQ(fp32_to_bits(g5[i]), fp32_to_bits(want)) << i;
    EXPECT_NEAR(g5[i], gelu_exact(x[i]), kTableRel * std::max(1.0, std::fabs(double{x[i]}))) << i;
  }
  for (int r = 0; r < 5; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 200; ++i) mean += x[r * 200 + i];
    mean /= 200;
    for (int i = 0; i < 200; ++i) var += (x[r * 200 + i] - mean) * (x[r * 200 + i] - mean);
    var /= 200;
    for (int i = 0; i < 200; ++i) {
      EXPECT_NEAR(n5[r * 200 + i], (x[r * 200 + i] - mean) / std::sqrt(var + 1e-12), 1e-5) << i;
    }
  }
}

}  // namespace
}  // namespace minfer::backend::cpu
