// Stage 12 tests (kernels): mul_mat for every weight type against dequantize + a double
// matmul, every AVX2 dot against its scalar twin, and determinism over threads and batch.
// Bars: named tolerances with their cause; bitwise where the reduction order is shared.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/ops.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_dot_kquants.h"
#include "core/fp16.h"
#include "graph/builder.h"
#include "harness.h"

namespace minfer::backend::cpu {
namespace {

using graph::GraphBuilder;
using graph::NodeId;
using testing::CpuRig;
using testing::decode;
using testing::encode;
using testing::random_floats;
using testing::run_gemm;

const DType kAllWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                                 DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                                 DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                                 DType::kQ6_K};

// Cause of the mul_mat error vs an exact product of the dequantized weights: the
// activation row is rounded to the vec_dot_type. For Q8 formats each element moves by
// at most half a step (amax/127 of its block) plus the fp16 rounding of the block
// scale (2^-11 relative); F16 / BF16 round each element (2^-11 / 2^-8 relative). The
// float accumulation adds kAccumRel relative to Σ|w·x|.
constexpr double kAccumRel = 1e-5;
constexpr double kScaleRel = 1.0 / 2048;

double act_error_bound(DType vdt, const float* w, const float* x, int64_t k) {
  double bound = 0.0, mag = 0.0;
  const int64_t blk = vdt == DType::kQ8_K ? 256 : 32;
  for (int64_t b0 = 0; b0 < k; b0 += blk) {
    double amax = 0.0;
    for (int64_t i = b0; i < std::min(k, b0 + blk); ++i)
      amax = std::max(amax, std::fabs(double{x[i]}));
    for (int64_t i = b0; i < std::min(k, b0 + blk); ++i) {
      const double wx = std::fabs(double{w[i]});
      mag += wx * std::fabs(double{x[i]});
      switch (vdt) {
        case DType::kQ8_0:
        case DType::kQ8_1:
        case DType::kQ8_K:
          bound += wx * (0.5 * amax / 127.0 + kScaleRel * amax);
          break;
        case DType::kF16:
          bound += wx * std::fabs(double{x[i]}) * kScaleRel;
          break;
        case DType::kBF16:
          bound += wx * std::fabs(double{x[i]}) / 256.0;
          break;
        default:
          break;
      }
    }
  }
  return bound + kAccumRel * mag + 1e-6;
}

struct MatMulCase {
  std::vector<float> w_deq;  // F32 [k, n] — the weights as the kernel sees them
  std::vector<float> x;      // F32 [k, m]
  std::vector<float> y;      // F32 [n, m] from the backend
};

MatMulCase run_mul_mat(DType type, int64_t k, int64_t n, int64_t m, int32_t threads,
                       CpuIsa isa = CpuIsa::kAuto, uint32_t seed = 7) {
  MatMulCase c;
  std::vector<float> w = random_floats(static_cast<size_t>(k * n), seed);
  std::vector<uint8_t> wb = encode(type, w);
  c.w_deq = decode(type, wb, w.size());
  c.x = random_floats(static_cast<size_t>(k * m), seed + 1);
  CpuRig rig(threads, isa);
  GraphBuilder b;
  NodeId wn = b.weight("w", type, {k, n});        // Q [k, n]
  NodeId xn = b.input("x", DType::kF32, {k, m});  // F32 [k, m]
  NodeId y = b.mul_mat(wn, xn);                   // F32 [n, m]
  b.mark_output(y);
  const graph::ComputeGraph& g = rig.load(b.finish());
  rig.bind("w", std::move(wb));
  rig.fill_f32(g, "x", c.x);
  Status st = rig.run(g);
  EXPECT_TRUE(st.ok()) << st.error().message;
  c.y = rig.read(g, y);
  return c;
}

TEST(MulMat, EveryWeightTypeMatchesDequantizedMatmul_WithinActivationQuantBound) {
  const int64_t k = 512, n = 9, m = 3;
  for (DType t : kAllWeightTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    MatMulCase c = run_mul_mat(t, k, n, m, 2);
    const DType vdt = scalar_dot_kernel(t).vec_dot_type;
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t i = 0; i < n; ++i) {
        const float* wr = c.w_deq.data() + i * k;
        const float* xr = c.x.data() + j * k;
        double ref = 0.0;
        for (int64_t e = 0; e < k; ++e) ref += double{wr[e]} * double{xr[e]};
        const double got = c.y[static_cast<size_t>(j * n + i)];
        ASSERT_LE(std::fabs(got - ref), act_error_bound(vdt, wr, xr, k))
            << "row " << i << " col " << j << " got " << got << " ref " << ref;
      }
    }
  }
}

TEST(MulMat, ScalarIsaAlsoMatchesReference) {
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    MatMulCase c = run_mul_mat(t, 256, 5, 2, 1, CpuIsa::kScalar);
    const DType vdt = scalar_dot_kernel(t).vec_dot_type;
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < 5; ++i) {
        double ref = 0.0;
        for (int64_t e = 0; e < 256; ++e) ref += double{c.w_deq[i * 256 + e]} * c.x[j * 256 + e];
        ASSERT_LE(std::fabs(c.y[j * 5 + i] - ref),
                  act_error_bound(vdt, &c.w_deq[i * 256], &c.x[j * 256], 256));
      }
    }
  }
}

TEST(MulMat, ThreadCountAndBatchingAreBitwiseInvariant_bitwise) {
  // m 9: 4 × 4 tiles, a remainder row, chunks; m 2 and 3: the per-row GEMV path of
  // small decode batches; m 8 the widest one-pass batch. n 137: more than one 64-row weight block
  // per thread.
  const int64_t k = 512;
  for (auto [n, m] : {std::pair<int64_t, int64_t>{37, 9}, {137, 2}, {137, 3}, {137, 8}})
    for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                    DType::kQ6_K, DType::kQ5_K, DType::kF16, DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n) + " m " +
                   std::to_string(m));
      MatMulCase one = run_mul_mat(t, k, n, m, 1);
      for (int32_t threads : {2, 3}) {
        MatMulCase many = run_mul_mat(t, k, n, m, threads);
        ASSERT_EQ(0, std::memcmp(one.y.data(), many.y.data(), one.y.size() * 4)) << threads;
      }
      // Each activation row alone (decode GEMV) equals its row of the batch (GEMM).
      for (int64_t j = 0; j < m; ++j) {
        CpuRig rig(2);
        GraphBuilder b;
        NodeId wn = b.weight("w", t, {k, n});
        NodeId xn = b.input("x", DType::kF32, {k, 1});
        NodeId y = b.mul_mat(wn, xn);
        b.mark_output(y);
        const graph::ComputeGraph& g = rig.load(b.finish());
        rig.bind("w", encode(t, random_floats(static_cast<size_t>(k * n), 7)));
        rig.fill_f32(g, "x", std::span<const float>(one.x.data() + j * k, static_cast<size_t>(k)));
        ASSERT_TRUE(rig.run(g).ok());
        std::vector<float> yr = rig.read(g, y);
        ASSERT_EQ(0, std::memcmp(yr.data(), one.y.data() + j * n, static_cast<size_t>(n) * 4)) << j;
      }
    }
}

// ---- SIMD vs scalar twins ---------------------------------------------------------

bool have_avx2() {
  return detect_isa() != CpuIsa::kScalar;  // kAvx512 includes the AVX2 set
}
bool have_avx512() {
  return detect_isa() == CpuIsa::kAvx512;
}

// Every AVX2 dot of the default numerics equals its scalar twin bit for bit: the K-quants
// and legacy types keep the scalar's exact integers and float expression per block, the
// float types its lanes — so an AVX2-only CPU computes what an AVX-512 one does.
TEST(VecDotSimd, EveryAvx2DotEqualsScalarTwin_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const int64_t k = 1024;
  int n_k_quants = 0;
  for (DType t : kAllWeightTypes) {
    DotKernel simd = avx2_dot_kernel(t);
    if (simd.vec_dot == nullptr) continue;
    SCOPED_TRACE(std::string(dtype_name(t)));
    DotKernel ref = scalar_dot_kernel(t);
    ASSERT_EQ(simd.vec_dot_type, ref.vec_dot_type);
    if (quant::traits(t)->block_size == 256) ++n_k_quants;
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      std::vector<float> w = random_floats(static_cast<size_t>(k), seed, -2.0f, 2.0f);
      std::vector<float> x = random_floats(static_cast<size_t>(k), seed + 100, -3.0f, 3.0f);
      std::vector<uint8_t> wb = encode(t, w);
      std::vector<uint8_t> xa(*quant::row_bytes(ref.vec_dot_type, k));
      std::vector<uint8_t> xb(xa.size());
      ref.from_f32(x.data(), xa.data(), k);
      simd.from_f32(x.data(), xb.data(), k);
      ASSERT_EQ(xa, xb);  // activation bytes are shared by construction
      const float a = ref.vec_dot(k, wb.data(), xa.data());
      const float b = simd.vec_dot(k, wb.data(), xa.data());
      ASSERT_EQ(fp32_to_bits(a), fp32_to_bits(b)) << a << " vs " << b << " seed " << seed;
    }
  }
  EXPECT_EQ(n_k_quants, 5);  // Q2_K Q3_K Q4_K Q5_K Q6_K
}

TEST(VecDotSimd, F32DotAndAxpyMatchScalar_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  for (int64_t n : {1, 7, 8, 64, 67, 128}) {
    std::vector<float> a = random_floats(static_cast<size_t>(n), 3);
    std::vector<float> b = random_floats(static_cast<size_t>(n), 4);
    EXPECT_EQ(fp32_to_bits(dot_f32_scalar(n, a.data(), b.data())),
              fp32_to_bits(dot_f32_avx2(n, a.data(), b.data())));
    std::vector<float> y1 = b, y2 = b;
    axpy_f32_scalar(n, 0.37f, a.data(), y1.data());
    axpy_f32_avx2(n, 0.37f, a.data(), y2.data());
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), static_cast<size_t>(n) * 4));
  }
}

// The word-parallel unpacking of a Q4_K / Q5_K super-block's scales and mins equals the
// per-sub-block one, on random packed bytes.
TEST(KQuantScales, WordParallelUnpackEqualsPerSubBlock) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20000; ++trial) {
    uint8_t packed[12];
    for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
    uint8_t all[16];
    kquant_scales_mins(packed, all);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      kquant_scale_min(j, packed, &sc, &m);
      ASSERT_EQ(all[j], sc) << "trial " << trial << " j " << j;
      ASSERT_EQ(all[8 + j], m) << "trial " << trial << " j " << j;
    }
  }
}

// The chunk forms of attention are the per-cell loops bit for bit, on every ISA: scores
// are dot_f32 · scale per cell, the rows are axpy_f32 per cell in cell order.
TEST(VecDotSimd, AttentionChunkKernelsEqualPerCellLoops_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  for (int64_t hd : {8, 16, 32, 56, 64, 67, 120, 128}) {
    for (int64_t n_cells : {1, 3, 4, 5, 8, 9, 13, 16, 17, 33, 64}) {
      const int64_t stride = hd + 5;
      std::vector<float> q = random_floats(static_cast<size_t>(hd), 7);
      std::vector<float> kv = random_floats(static_cast<size_t>(n_cells * stride), 8);
      std::vector<float> p = random_floats(static_cast<size_t>(n_cells), 9, 0.0f, 1.0f);
      std::vector<float> loop(static_cast<size_t>(n_cells)), s1 = loop, s2 = loop;
      for (int64_t c = 0; c < n_cells; ++c) {
        loop[static_cast<size_t>(c)] =
            dot_f32_scalar(hd, q.data(), kv.data() + c * stride) * 0.125f;
      }
      attn_scores_f32_scalar(n_cells, hd, q.data(), kv.data(), stride, 0.125f, s1.data());
      attn_scores_f32_avx2(n_cells, hd, q.data(), kv.data(), stride, 0.125f, s2.data());
      EXPECT_EQ(0, std::memcmp(loop.data(), s1.data(), loop.size() * 4)) << hd << " " << n_cells;
      EXPECT_EQ(0, std::memcmp(loop.data(), s2.data(), loop.size() * 4)) << hd << " " << n_cells;
      if (have_avx512()) {  // sixteen cells per step, reduced by the same tree
        std::vector<float> s3(loop.size(), -1.0f);
        attn_scores_f32_avx512(n_cells, hd, q.data(), kv.data(), stride, 0.125f, s3.data());
        EXPECT_EQ(0, std::memcmp(loop.data(), s3.data(), loop.size() * 4)) << hd << " " << n_cells;
      }
      std::vector<float> y0 = random_floats(static_cast<size_t>(hd), 10), y1 = y0, y2 = y0;
      for (int64_t c = 0; c < n_cells; ++c) {
        axpy_f32_scalar(hd, p[static_cast<size_t>(c)], kv.data() + c * stride, y0.data());
      }
      attn_axpy_rows_f32_scalar(n_cells, hd, p.data(), kv.data(), stride, y1.data());
      attn_axpy_rows_f32_avx2(n_cells, hd, p.data(), kv.data(), stride, y2.data());
      EXPECT_EQ(0, std::memcmp(y0.data(), y1.data(), y0.size() * 4)) << hd << " " << n_cells;
      EXPECT_EQ(0, std::memcmp(y0.data(), y2.data(), y0.size() * 4)) << hd << " " << n_cells;
      if (have_avx512()) {
        std::vector<float> y3 = random_floats(static_cast<size_t>(hd), 10);  // y0's start
        attn_axpy_rows_f32_avx512(n_cells, hd, p.data(), kv.data(), stride, y3.data());
        EXPECT_EQ(0, std::memcmp(y0.data(), y3.data(), y0.size() * 4)) << hd << " " << n_cells;
      }
    }
  }
}

// The two-head score kernel is two single-head passes bit for bit: each half of its
// registers keeps dot_f32's 8 lanes and order (head sizes with and without an 8-tail,
// cell counts around its 8- and 4-cell groups).
TEST(VecDotSimd, AttentionTwoHeadScoresEqualTwoSingleHeadPasses_bitwise) {
  for (int64_t hd : {1, 7, 8, 64, 67, 128, 256, 260}) {
    for (int64_t n_cells : {0, 1, 3, 4, 5, 8, 9, 12, 13, 64}) {
      const int64_t stride = hd * 3 + 5;
      std::vector<float> q0 = random_floats(static_cast<size_t>(hd), 7);
      std::vector<float> q1 = random_floats(static_cast<size_t>(hd), 11);
      std::vector<float> kv = random_floats(static_cast<size_t>(n_cells * stride + hd), 8);
      const size_t n = static_cast<size_t>(n_cells);
      std::vector<float> want0(n), want1(n), got0(n, -1.0f), got1(n, -1.0f);
      for (size_t c = 0; c < n; ++c) {
        want0[c] = dot_f32_scalar(hd, q0.data(), kv.data() + c * stride) * 0.0883883f;
        want1[c] = dot_f32_scalar(hd, q1.data(), kv.data() + c * stride) * 0.0883883f;
      }
      attn_scores2_f32_scalar(n_cells, hd, q0.data(), q1.data(), kv.data(), stride, 0.0883883f,
                              got0.data(), got1.data());
      EXPECT_TRUE(n == 0 || std::memcmp(want0.data(), got0.data(), n * 4) == 0)
          << hd << " " << n_cells;
      EXPECT_TRUE(n == 0 || std::memcmp(want1.data(), got1.data(), n * 4) == 0)
          << hd << " " << n_cells;
      if (have_avx512()) {
        std::fill(got0.begin(), got0.end(), -1.0f);
        std::fill(got1.begin(), got1.end(), -1.0f);
        attn_scores2_f32_avx512(n_cells, hd, q0.data(), q1.data(), kv.data(), stride, 0.0883883f,
                                got0.data(), got1.data());
        EXPECT_TRUE(n == 0 || std::memcmp(want0.data(), got0.data(), n * 4) == 0)
            << hd << " " << n_cells;
        EXPECT_TRUE(n == 0 || std::memcmp(want1.data(), got1.data(), n * 4) == 0)
            << hd << " " << n_cells;
      }
    }
  }
}

// The several-query forms (a block's tokens over the same cells) are per-query calls of
// the single forms bit for bit: query counts around their groups of 3 (scores) and 4 / 8
// (axpy), head sizes with and without a 16-wide or 8-wide tail, cell counts around 16.
TEST(VecDotSimd, AttentionMultiQueryKernelsEqualPerQueryCalls_bitwise) {
  if (!have_avx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  for (int64_t hd : {8, 20, 32, 64, 67, 96, 128}) {
    for (int64_t n_cells : {1, 15, 16, 17, 33, 64}) {
      for (int64_t nq : {1, 2, 3, 4, 5, 7, 8, 9, 16}) {
        const int64_t stride = hd * 2 + 3;
        const auto cells = static_cast<size_t>(n_cells);
        std::vector<float> kv = random_floats(static_cast<size_t>(n_cells * stride), 8);
        std::vector<std::vector<float>> q, p, want_s, got_s, want_y, got_y;
        std::vector<const float*> qp, pp;
        std::vector<float*> sp, yp;
        for (int64_t j = 0; j < nq; ++j) {
          q.push_back(random_floats(static_cast<size_t>(hd), 20 + static_cast<uint32_t>(j)));
          p.push_back(random_floats(cells, 40 + static_cast<uint32_t>(j), 0.0f, 1.0f));
          want_s.emplace_back(cells);
          got_s.emplace_back(cells, -1.0f);
          want_y.push_back(random_floats(static_cast<size_t>(hd), 60 + static_cast<uint32_t>(j)));
          got_y.push_back(want_y.back());
        }
        for (int64_t j = 0; j < nq; ++j) {
          const auto u = static_cast<size_t>(j);
          attn_scores_f32_avx512(n_cells, hd, q[u].data(), kv.data(), stride, 0.125f,
                                 want_s[u].data());
          attn_axpy_rows_f32_avx512(n_cells, hd, p[u].data(), kv.data(), stride, want_y[u].data());
          qp.push_back(q[u].data());
          pp.push_back(p[u].data());
          sp.push_back(got_s[u].data());
          yp.push_back(got_y[u].data());
        }
        attn_scores_f32_multi_avx512(nq, qp.data(), n_cells, hd, kv.data(), stride, 0.125f,
                                     sp.data());
        attn_axpy_rows_f32_multi_avx512(nq, n_cells, hd, pp.data(), kv.data(), stride, yp.data());
        for (int64_t j = 0; j < nq; ++j) {
          const auto u = static_cast<size_t>(j);
          EXPECT_EQ(0, std::memcmp(want_s[u].data(), got_s[u].data(), cells * 4))
              << hd << " " << n_cells << " " << nq << " q" << j;
          EXPECT_EQ(0, std::memcmp(want_y[u].data(), got_y[u].data(), want_y[u].size() * 4))
              << hd << " " << n_cells << " " << nq << " q" << j;
        }
      }
    }
  }
}

// The norms' row sums: the AVX2 form (rows side by side, one lane each) gives the scalar
// chains' bits for every row count up to 8, lengths around its 8-element blocks, each kind
// of term, rows at odd offsets, and the large and tiny magnitudes where a double sum's
// order shows.
TEST(VecDotSimd, RowSumsSideBySideEqualOneRowAtATime_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  for (int64_t n : {1, 7, 8, 9, 64, 384, 897}) {
    std::vector<float> data = random_floats(static_cast<size_t>(8 * (n + 3)), 77, -3.0f, 3.0f);
    for (size_t i = 0; i < data.size(); i += 5) data[i] *= 1e7f;
    for (size_t i = 2; i < data.size(); i += 7) data[i] *= 1e-9f;
    const float centre[8] = {0.5f, -1.25f, 3e6f, 0.0f, -7e-3f, 1.0f, 2.5f, -4e5f};
    for (int nr = 1; nr <= 8; ++nr) {
      const float* rows[8];
      for (int r = 0; r < nr; ++r) rows[r] = data.data() + r * (n + 3) + r % 3;
      for (RowSum t : {RowSum::kSum, RowSum::kSquares, RowSum::kCentredSquares}) {
        double want[8], got[8];
        row_sums_f64_scalar(rows, nr, n, t, centre, want);
        row_sums_f64_avx2(rows, nr, n, t, centre, got);
        EXPECT_EQ(0, std::memcmp(want, got, static_cast<size_t>(nr) * sizeof(double)))
            << n << " " << nr << " " << static_cast<int>(t);
      }
    }
  }
}

// The chunk exponentials are std::exp per element, bit for bit: the AVX2 (four lanes) and
// AVX-512 (eight) forms run glibc's expf algorithm (its FMA variant) in double, and send
// |x| >= 88, infinities and NaN to std::exp. Every float of [-110, 0] at a stride of 61 (over 18
// million, each exponent and every table slot), the edges around the special cases, and m that
// moves the argument. A libm whose expf is another algorithm fails here (and the kernel must then
// not be used).
TEST(VecDotSimd, AttentionExpEqualsStdExp_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  using ExpFn = void (*)(int64_t, const float*, float, float*);
  std::vector<ExpFn> twins = {attn_exp_f32_avx2};
  if (have_avx512()) twins.push_back(attn_exp_f32_avx512);
  std::vector<float> x;
  const uint32_t lo = 0x80000000u, hi = 0xC2DC0000u;  // -0 .. -110
  for (uint64_t b = lo; b <= hi; b += 61) {
    float f;
    const auto u = static_cast<uint32_t>(b);
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (float f : {0.0f, -0.0f, -87.99f, -88.0f, -88.01f, -103.2f, -103.3f, -103.9f, -104.0f,
                  -1e-30f, -1e-45f, 1e-7f, 0.5f, 3.0f, -INFINITY, NAN}) {
    x.push_back(f);
  }
  std::vector<float> want(x.size()), got(x.size(), -1.0f);
  for (auto [m, fn] : std::vector<std::pair<float, ExpFn>>{{0.0f, twins[0]},
                                                           {1.5f, twins[0]},
                                                           {-2.25f, twins[0]},
                                                           {0.0f, twins.back()},
                                                           {1.5f, twins.back()},
                                                           {-2.25f, twins.back()}}) {
    fn(static_cast<int64_t>(x.size()), x.data(), m, got.data());
    attn_exp_f32_scalar(static_cast<int64_t>(x.size()), x.data(), m, want.data());
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::memcmp(&want[i], &got[i], 4) != 0 && bad++ < 5) {
        ADD_FAILURE() << "expf(" << x[i] << " - " << m << "): std::exp " << want[i] << ", kernel "
                      << got[i];
      }
    }
    EXPECT_EQ(bad, 0u) << "m " << m;
  }
}

// Every AVX-512 VNNI kernel equals the scalar reference bit for bit: the K-quants keep
// exact integer super-block sums in ggml's x86 lane order with the scalar float
// expression (so the AVX2 twins too); Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 keep one f32 lane per
// weight row, block after block, with the scalar reference's expression.
TEST(VecDotSimd, EveryAvx512DotEqualsScalarTwin_bitwise) {
  if (!have_avx512()) GTEST_SKIP() << "CPU lacks AVX512F/BW/VL/VNNI";
  int n_checked = 0;
  // k 1024: 32 legacy blocks; k 1056 only for the legacy types: 33 blocks; k 16448: 514
  // blocks, more than the GEMV's on-stack segment of 512.
  for (int64_t k : {int64_t{1024}, int64_t{1056}, int64_t{16448}})
    for (DType t : kAllWeightTypes) {
      if (k % 256 != 0 && quant::traits(t)->block_size != 32) continue;
      DotKernel fast = avx512_dot_kernel(t);
      if (fast.vec_dot == nullptr) continue;
      SCOPED_TRACE(std::string(dtype_name(t)));
      DotKernel twin = avx2_dot_kernel(t);
      DotKernel ref = scalar_dot_kernel(t);
      ASSERT_EQ(fast.vec_dot_type, ref.vec_dot_type);
      ASSERT_NE(fast.gemm, nullptr);
      ++n_checked;
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        std::vector<uint8_t> wb =
            encode(t, random_floats(static_cast<size_t>(k), seed, -2.0f, 2.0f));
        std::vector<float> x = random_floats(static_cast<size_t>(k), seed + 100, -3.0f, 3.0f);
        std::vector<uint8_t> xa(*quant::row_bytes(ref.vec_dot_type, k));
        fast.from_f32(x.data(), xa.data(), k);
        const float a = fast.vec_dot(k, wb.data(), xa.data());
        const float r = ref.vec_dot(k, wb.data(), xa.data());
        ASSERT_EQ(fp32_to_bits(a), fp32_to_bits(r)) << a << " vs " << r << " seed " << seed;
        if (t == DType::kQ4_K || t == DType::kQ6_K) {  // one lane order on every ISA
          const float b = twin.vec_dot(k, wb.data(), xa.data());
          ASSERT_EQ(fp32_to_bits(a), fp32_to_bits(b)) << a << " vs " << b << " seed " << seed;
        }
      }
    }
  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K; legacy x2
  EXPECT_EQ(n_checked, 11 + 5 + 5);
}

// The register-blocked GEMM of every SIMD table equals its vec_dot element by element,
// for every tile shape and remainder (invariant 8: prefill GEMM == decode GEMV).
TEST(VecDotSimd, GemmEqualsVecDotForEveryTileShape_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  // k 544: 17 legacy blocks, an odd tail after the block pairs; k 1792: a longer row
  // (56 legacy blocks, 7 super-blocks).
  for (int64_t k : {int64_t{512}, int64_t{544}, int64_t{1792}})
    for (DType t : kAllWeightTypes)
      for (bool avx512 : {false, true}) {
        if (avx512 && !have_avx512()) continue;
        DotKernel dk = avx512 ? avx512_dot_kernel(t) : avx2_dot_kernel(t);
        if (dk.gemm == nullptr) continue;
        if (k % 256 != 0 && quant::traits(t)->block_size != 32) continue;
        SCOPED_TRACE(std::string(dtype_name(t)) + (avx512 ? " avx512" : " avx2"));
        const uint64_t w_row = *quant::row_bytes(t, k);
        const uint64_t x_row = *quant::row_bytes(dk.vec_dot_type, k);
        for (int64_t n_w : {1, 3, 4, 5, 8, 9, 16, 17, 33, 48}) {
          for (int64_t n_x :
               {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {  // rows kernels: <= 8 one pass, > 8 prepared
            std::vector<uint8_t> wb = encode(
                t, random_floats(static_cast<size_t>(k * n_w), 11 + static_cast<uint32_t>(n_w)));
            std::vector<float> x = random_floats(static_cast<size_t>(k * n_x), 5);
            std::vector<uint8_t> xq;
            const std::vector<float> y = run_gemm(dk, k, wb, w_row, n_w, x, x_row, n_x, xq);
            for (int64_t j = 0; j < n_x; ++j) {
              for (int64_t i = 0; i < n_w; ++i) {
                const float v = dk.vec_dot(k, wb.data() + i * w_row, xq.data() + j * x_row);
                ASSERT_EQ(fp32_to_bits(v), fp32_to_bits(y[static_cast<size_t>(j * n_w + i)]))
                    << "n_w " << n_w << " n_x " << n_x << " i " << i << " j " << j;
              }
            }
          }
        }
      }
}

// llama.cpp's f16 dot orders: the AVX2 GEMV form equals its portable scalar emulation
// bit for bit, and the batched (sgemm) form equals a one-accumulator reference.
TEST(VecDotSimd, LlamaCppF16DotsFollowTheirOrder_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU";
  const DotKernel k = llamacpp_dot_kernel(DType::kF16);
  ASSERT_NE(k.vec_dot_batch, nullptr);
  for (int64_t n : {16, 37, 64, 100, 128, 896, 4864}) {
    SCOPED_TRACE(n);
    auto a = random_floats(static_cast<size_t>(n), 50 + static_cast<uint32_t>(n), -1.0f, 1.0f);
    auto b = random_floats(static_cast<size_t>(n), 60 + static_cast<uint32_t>(n), -1.0f, 1.0f);
    std::vector<uint16_t> ha(a.size()), hb(b.size());
    from_f32_f16(a.data(), ha.data(), n);
    from_f32_f16(b.data(), hb.data(), n);
    const float vec = k.vec_dot(n, ha.data(), hb.data());
    const float ref_vec = ggml_dot_f16_vec_scalar(n, ha.data(), hb.data());
    EXPECT_EQ(fp32_to_bits(vec), fp32_to_bits(ref_vec));
    const float batch = k.vec_dot_batch(n, ha.data(), hb.data());
    if (n % 16 != 0) {
      EXPECT_EQ(fp32_to_bits(batch), fp32_to_bits(vec));  // tinyBLAS declines: GEMV order
      continue;
    }
    float lane[16] = {};
    for (int64_t i = 0; i < n; i += 16) {
      for (int e = 0; e < 16; ++e) {
        lane[e] = std::fma(fp16_to_fp32(ha[i + e]), fp16_to_fp32(hb[i + e]), lane[e]);
      }
    }
    float l8[8], l4[4];
    for (int e = 0; e < 8; ++e) l8[e] = lane[8 + e] + lane[e];
    for (int e = 0; e < 4; ++e) l4[e] = l8[4 + e] + l8[e];
    const float ref_batch = (l4[0] + l4[2]) + (l4[1] + l4[3]);
    EXPECT_EQ(fp32_to_bits(batch), fp32_to_bits(ref_batch));
    double exact = 0.0;
    for (int64_t i = 0; i < n; ++i) exact += double{fp16_to_fp32(ha[i])} * fp16_to_fp32(hb[i]);
    EXPECT_NEAR(vec, exact, 1e-5 * static_cast<double>(n));
  }
}

// llama.cpp's F32 dot orders (its AVX-512 build): ggml_vec_dot_f32 for one row — four
// 16-lane FMA accumulators over steps of 64, folded 0+2, 1+3, 0+1, the lanes reduced as
// _mm512_reduce_add_ps, the tail fused in f32 — and tinyBLAS for a batch — one 16-lane
// FMA accumulator, reduced the same way —, each against a plain 16-lane emulation.
TEST(VecDotSimd, LlamaCppF32DotsFollowTheirOrder_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU";
  const DotKernel k = llamacpp_dot_kernel(DType::kF32);
  ASSERT_NE(k.vec_dot_batch, nullptr);
  auto reduce = [](const float* lane) {  // _mm512_reduce_add_ps: 8, 4, then 2 + 2
    float l8[8], l4[4];
    for (int e = 0; e < 8; ++e) l8[e] = lane[8 + e] + lane[e];
    for (int e = 0; e < 4; ++e) l4[e] = l8[4 + e] + l8[e];
    return (l4[0] + l4[2]) + (l4[1] + l4[3]);
  };
  for (int64_t n : {16, 37, 64, 100, 128, 256, 896, 4864}) {
    SCOPED_TRACE(n);
    auto a = random_floats(static_cast<size_t>(n), 70 + static_cast<uint32_t>(n), -1.0f, 1.0f);
    auto b = random_floats(static_cast<size_t>(n), 80 + static_cast<uint32_t>(n), -1.0f, 1.0f);
    float acc[4][16] = {};
    const int64_t np = n / 64 * 64;
    for (int64_t i = 0; i < np; i += 64) {
      for (int j = 0; j < 4; ++j) {
        for (int e = 0; e < 16; ++e) {
          const int64_t at = i + j * 16 + e;
          acc[j][e] = std::fma(a[static_cast<size_t>(at)], b[static_cast<size_t>(at)], acc[j][e]);
        }
      }
    }
    float folded[16];
    for (int e = 0; e < 16; ++e) folded[e] = (acc[0][e] + acc[2][e]) + (acc[1][e] + acc[3][e]);
    float ref_vec = reduce(folded);
    for (int64_t i = np; i < n; ++i) {
      ref_vec = std::fma(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)], ref_vec);
    }
    const float vec = k.vec_dot(n, a.data(), b.data());
    EXPECT_EQ(fp32_to_bits(vec), fp32_to_bits(ref_vec));
    const float batch = k.vec_dot_batch(n, a.data(), b.data());
    if (n % 16 != 0) {
      EXPECT_EQ(fp32_to_bits(batch), fp32_to_bits(vec));  // tinyBLAS declines: GEMV order
      continue;
    }
    float lane[16] = {};
    for (int64_t i = 0; i < n; i += 16) {
      for (int e = 0; e < 16; ++e) {
        lane[e] = std::fma(a[static_cast<size_t>(i + e)], b[static_cast<size_t>(i + e)], lane[e]);
      }
    }
    EXPECT_EQ(fp32_to_bits(batch), fp32_to_bits(reduce(lane)));
    double exact = 0.0;
    for (int64_t i = 0; i < n; ++i)
      exact += double{a[static_cast<size_t>(i)]} * b[static_cast<size_t>(i)];
    EXPECT_NEAR(vec, exact, 1e-6 * static_cast<double>(n));
    EXPECT_NEAR(batch, exact, 1e-6 * static_cast<double>(n));
  }
}

// llama.cpp's F32 and F16 dot orders on its AVX2-only build, each against a plain 8-lane
// emulation: ggml_vec_dot_* for one row — four 8-lane FMA accumulators over steps of 32,
// folded 0+2, 1+3, 0+1, the halves added, two horizontal adds ((0+1) + (2+3)), the tail
// fused in f32 (F32) or summed in double (F16) — and tinyBLAS<8> for a batch — one 8-lane
// FMA accumulator, the halves added, then (0+2) + (1+3); tinyBLAS declines n % 8 != 0.
TEST(VecDotSimd, LlamaCppAvx2BuildF32F16DotsFollowTheirOrder_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU";
  for (const DType t : {DType::kF32, DType::kF16}) {
    const DotKernel k = llamacpp_avx2_build_dot_kernel(t);
    ASSERT_NE(k.vec_dot_batch, nullptr);
    EXPECT_EQ(k.batch_w_rows_multiple, t == DType::kF32 ? 4 : 1);
    for (int64_t n : {8, 12, 37, 64, 100, 128, 384, 1536}) {
      SCOPED_TRACE(::testing::Message() << (t == DType::kF32 ? "f32 n " : "f16 n ") << n);
      auto fa = random_floats(static_cast<size_t>(n), 90 + static_cast<uint32_t>(n), -1.0f, 1.0f);
      auto fb = random_floats(static_cast<size_t>(n), 95 + static_cast<uint32_t>(n), -1.0f, 1.0f);
      std::vector<uint16_t> ha(fa.size()), hb(fb.size());
      from_f32_f16(fa.data(), ha.data(), n);
      from_f32_f16(fb.data(), hb.data(), n);
      std::vector<float> a(fa.size()), b(fb.size());
      for (size_t i = 0; i < a.size(); ++i) {
        a[i] = t == DType::kF32 ? fa[i] : fp16_to_fp32(ha[i]);
        b[i] = t == DType::kF32 ? fb[i] : fp16_to_fp32(hb[i]);
      }
      const void* wa = t == DType::kF32 ? static_cast<const void*>(fa.data()) : ha.data();
      const void* xb = t == DType::kF32 ? static_cast<const void*>(fb.data()) : hb.data();
      float acc[4][8] = {};
      const int64_t np = n / 32 * 32;
      for (int64_t i = 0; i < np; i += 32) {
        for (int j = 0; j < 4; ++j) {
          for (int e = 0; e < 8; ++e) {
            const auto at = static_cast<size_t>(i + j * 8 + e);
            acc[j][e] = std::fma(a[at], b[at], acc[j][e]);
          }
        }
      }
      float f8[8];
      for (int e = 0; e < 8; ++e) f8[e] = (acc[0][e] + acc[2][e]) + (acc[1][e] + acc[3][e]);
      float f4[4];
      for (int e = 0; e < 4; ++e) f4[e] = f8[e] + f8[4 + e];
      const float body = (f4[0] + f4[1]) + (f4[2] + f4[3]);
      float ref_vec = body;
      if (t == DType::kF32) {
        for (int64_t i = np; i < n; ++i) {
          ref_vec = std::fma(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)], ref_vec);
        }
      } else {
        double d = body;
        for (int64_t i = np; i < n; ++i) {
          d += static_cast<double>(a[static_cast<size_t>(i)] * b[static_cast<size_t>(i)]);
        }
        ref_vec = static_cast<float>(d);
      }
      const float vec = k.vec_dot(n, wa, xb);
      EXPECT_EQ(fp32_to_bits(vec), fp32_to_bits(ref_vec));
      const float batch = k.vec_dot_batch(n, wa, xb);
      if (n % 8 != 0) {
        EXPECT_EQ(fp32_to_bits(batch), fp32_to_bits(vec));  // tinyBLAS declines: GEMV order
        continue;
      }
      float lane[8] = {};
      for (int64_t i = 0; i < n; i += 8) {
        for (int e = 0; e < 8; ++e) {
          const auto at = static_cast<size_t>(i + e);
          lane[e] = std::fma(a[at], b[at], lane[e]);
        }
      }
      for (int e = 0; e < 4; ++e) f4[e] = lane[4 + e] + lane[e];
      EXPECT_EQ(fp32_to_bits(batch), fp32_to_bits((f4[0] + f4[2]) + (f4[1] + f4[3])));
      double exact = 0.0;
      for (int64_t i = 0; i < n; ++i)
        exact += double{a[static_cast<size_t>(i)]} * b[static_cast<size_t>(i)];
      EXPECT_NEAR(vec, exact, 1e-6 * static_cast<double>(n));
      EXPECT_NEAR(batch, exact, 1e-6 * static_cast<double>(n));
      // not the AVX-512 build's orders (n = 384: sixteen-lane sums round otherwise)
      if (n == 384 && t == DType::kF32) {
        EXPECT_NE(fp32_to_bits(batch),
                  fp32_to_bits(llamacpp_dot_kernel(t).vec_dot_batch(n, wa, xb)));
      }
    }
  }
}

// silu with ggml's polynomial e^x: the AVX2 form equals the scalar one bit for bit, over
// ordinary values, the ends where 2^n leaves the normal range, and NaN / ±inf; and it
// stays within 2 ulp-ish of the exact silu.
TEST(VecDotSimd, SiluPolyAvx2EqualsScalar_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  std::vector<float> x = random_floats(4096, 77, -20.0f, 20.0f);
  for (float v : {0.0f, -0.0f, 87.0f, 88.5f, 89.0f, 100.0f, -87.0f, -88.0f, -103.0f, -104.0f,
                  -150.0f, 1e-30f, -1e-30f, INFINITY, -INFINITY, NAN}) {
    x.push_back(v);
  }
  while (x.size() % 8 != 3) x.push_back(0.5f);  // a ragged tail as well
  std::vector<float> up = random_floats(x.size(), 78, -2.0f, 2.0f);
  for (bool with_up : {false, true}) {
    std::vector<float> a(x.size()), b(x.size());
    const float* u = with_up ? up.data() : nullptr;
    silu_poly_scalar(static_cast<int64_t>(x.size()), x.data(), u, a.data());
    silu_poly_avx2(static_cast<int64_t>(x.size()), x.data(), u, b.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(fp32_to_bits(a[i]), fp32_to_bits(b[i])) << "x " << x[i] << " up " << with_up;
      if (!with_up && std::isfinite(x[i]) && std::fabs(x[i]) < 80.0f) {
        const double ref = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
        ASSERT_NEAR(a[i], ref, 4e-7 * std::max(1.0, std::fabs(ref))) << x[i];
      }
    }
  }
}

// silu as llama.cpp's AVX2-only build computes it (ggml_v_expf's AVX2 form): the AVX2 form
// equals the scalar one bit for bit over the same values, stays as close to the exact silu,
// and parts from the AVX-512 form (silu_poly_*) on some ordinary inputs.
TEST(VecDotSimd, SiluPoly8Avx2EqualsScalar_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  std::vector<float> x = random_floats(4096, 79, -20.0f, 20.0f);
  for (float v : {0.0f, -0.0f, 87.0f, 88.5f, 89.0f, 100.0f, -87.0f, -88.0f, -103.0f, -104.0f,
                  -150.0f, 1e-30f, -1e-30f, INFINITY, -INFINITY, NAN}) {
    x.push_back(v);
  }
  while (x.size() % 8 != 5) x.push_back(0.25f);
  std::vector<float> up = random_floats(x.size(), 80, -2.0f, 2.0f);
  int differ_from_avx512_form = 0;
  for (bool with_up : {false, true}) {
    std::vector<float> a(x.size()), b(x.size()), c(x.size());
    const float* u = with_up ? up.data() : nullptr;
    silu_poly8_scalar(static_cast<int64_t>(x.size()), x.data(), u, a.data());
    silu_poly8_avx2(static_cast<int64_t>(x.size()), x.data(), u, b.data());
    silu_poly_scalar(static_cast<int64_t>(x.size()), x.data(), u, c.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(fp32_to_bits(a[i]), fp32_to_bits(b[i])) << "x " << x[i] << " up " << with_up;
      differ_from_avx512_form += fp32_to_bits(a[i]) != fp32_to_bits(c[i]);
      if (!with_up && std::isfinite(x[i]) && std::fabs(x[i]) < 80.0f) {
        const double ref = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
        ASSERT_NEAR(a[i], ref, 4e-7 * std::max(1.0, std::fabs(ref))) << x[i];
      }
    }
  }
  EXPECT_GT(differ_from_avx512_form, 20);
  // e^x itself: 0 below the range, inf above it, NaN through.
  EXPECT_EQ(ggml_v_expf8_lane(-INFINITY), 0.0f);
  EXPECT_EQ(ggml_v_expf8_lane(-200.0f), 0.0f);
  EXPECT_EQ(ggml_v_expf8_lane(200.0f), INFINITY);
  EXPECT_TRUE(std::isnan(ggml_v_expf8_lane(NAN)));
  EXPECT_EQ(ggml_v_expf8_lane(0.0f), 1.0f);
}

TEST(VecDot, Q8ActivationFollowsGgmlX86Rounding) {
  // amax 127 → d = 1, id = 1: halves round to even (2.5 → 2, 3.5 → 4, −2.5 → −2).
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  quant::BlockQ8_0 blk;
  from_f32_q8_0(x.data(), &blk, 32);
  EXPECT_EQ(blk.qs[0], 127);
  EXPECT_EQ(blk.qs[1], 2);
  EXPECT_EQ(blk.qs[2], 4);
  EXPECT_EQ(blk.qs[3], -2);
  EXPECT_EQ(fp16_to_fp32(blk.d), 1.0f);
}

// The AVX2 Q8_K converter writes the scalar reference's bytes, also where the block's
// largest magnitude repeats (the first one sets the sign), halves round to even, the
// block is all zero, or holds NaN / infinities.
TEST(VecDot, Q8KAvx2ConverterEqualsReferenceBytes) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  std::vector<std::vector<float>> cases;
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    cases.push_back(random_floats(512, seed, -4.0f, 4.0f));
  }
  std::vector<float> v(512, 0.0f);
  cases.push_back(v);  // all zero
  v[3] = -2.0f;
  v[40] = 2.0f;  // same magnitude, other sign, later
  v[7] = 1.0f / 127.0f * 2.5f;
  cases.push_back(v);
  for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 255) - 127.0f;
  cases.push_back(v);  // exact codes, ties
  v[5] = std::nanf("");
  cases.push_back(v);
  v[9] = INFINITY;
  v[300] = -INFINITY;
  cases.push_back(v);
  for (const std::vector<float>& c : cases) {
    std::vector<uint8_t> a(*quant::row_bytes(DType::kQ8_K, 512)), b(a.size());
    from_f32_q8_k(c.data(), a.data(), 512);
    from_f32_q8_k_avx2(c.data(), b.data(), 512);
    ASSERT_EQ(a, b);
  }
}

// ---- llama.cpp's repack orders (--numerics llamacpp; vec_dot.h, vec_dot_repack.cpp) ----

// Every SIMD form of a repack / ggml-x86 expression equals its scalar reference, for
// decode (vec_dot) and, for the AVX-512 rows kernel, its GEMV / GEMM for every tile shape.
TEST(VecDotSimd, LlamaCppRepackDotsEqualTheirScalarReferences_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  struct Pair {
    DType t;
    VecDotFn simd, ref;
    const char* what;
  };
  const Pair pairs[] = {
      {DType::kQ4_0, dot_q4_0_q8_0_repack_avx2, dot_q4_0_q8_0_repack_scalar, "q4_0 repack"},
      {DType::kQ4_K, dot_q4_k_q8_k_repack_gemv_avx2, dot_q4_k_q8_k_repack_gemv_scalar, "q4_k gemv"},
      {DType::kQ4_K, dot_q4_k_q8_k_repack_gemm_avx2, dot_q4_k_q8_k_repack_gemm_scalar, "q4_k gemm"},
      {DType::kQ5_0, dot_q5_0_q8_0_ggml_avx2, dot_q5_0_q8_0_ggml_scalar, "q5_0 ggml lanes"},
      {DType::kQ6_K, dot_q6_k_q8_k_tiled_avx2, dot_q6_k_q8_k_tiled_scalar, "q6_k tiled"},
      {DType::kQ5_K, dot_q5_k_q8_k_ggml_avx2, dot_q5_k_q8_k_ggml_scalar, "q5_k ggml lanes"},
      {DType::kQ5_K, dot_q5_k_q8_k_tiled_avx2, dot_q5_k_q8_k_tiled_scalar, "q5_k tiled"},
  };
  for (const Pair& pr : pairs)
    for (int64_t k : {int64_t{512}, int64_t{1024}, int64_t{4864}}) {
      SCOPED_TRACE(std::string(pr.what) + " k " + std::to_string(k));
      const DotKernel ref = scalar_dot_kernel(pr.t);
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        std::vector<uint8_t> wb =
            encode(pr.t, random_floats(static_cast<size_t>(k), seed, -2.0f, 2.0f));
        std::vector<float> x = random_floats(static_cast<size_t>(k), seed + 100, -3.0f, 3.0f);
        std::vector<uint8_t> xa(*quant::row_bytes(ref.vec_dot_type, k));
        ref.from_f32(x.data(), xa.data(), k);
        const float a = pr.simd(k, wb.data(), xa.data());
        const float r = pr.ref(k, wb.data(), xa.data());
        ASSERT_EQ(fp32_to_bits(a), fp32_to_bits(r)) << a << " vs " << r << " seed " << seed;
      }
    }
  if (!have_avx512()) return;
  const DotKernel dk = llamacpp_repack_dot_kernel(DType::kQ4_0);  // the AVX-512 rows form here
  ASSERT_NE(dk.gemm, nullptr);
  for (int64_t k : {int64_t{512}, int64_t{544}, int64_t{16448}}) {
    const uint64_t w_row = *quant::row_bytes(DType::kQ4_0, k);
    const uint64_t x_row = *quant::row_bytes(DType::kQ8_0, k);
    for (int64_t n_w : {1, 8, 17, 48})
      for (int64_t n_x : {1, 2, 3, 4, 5, 8, 9, 13}) {
        std::vector<uint8_t> wb =
            encode(DType::kQ4_0,
                   random_floats(static_cast<size_t>(k * n_w), 3 + static_cast<uint32_t>(n_w)));
        std::vector<float> x = random_floats(static_cast<size_t>(k * n_x), 9);
        std::vector<uint8_t> xq;
        const std::vector<float> y = run_gemm(dk, k, wb, w_row, n_w, x, x_row, n_x, xq);
        for (int64_t j = 0; j < n_x; ++j)
          for (int64_t i = 0; i < n_w; ++i) {
            const float r =
                dot_q4_0_q8_0_repack_scalar(k, wb.data() + i * w_row, xq.data() + j * x_row);
            const float v = dk.vec_dot(k, wb.data() + i * w_row, xq.data() + j * x_row);
            ASSERT_EQ(fp32_to_bits(r), fp32_to_bits(y[static_cast<size_t>(j * n_w + i)]))
                << "k " << k << " n_w " << n_w << " n_x " << n_x << " i " << i << " j " << j;
            ASSERT_EQ(fp32_to_bits(r), fp32_to_bits(v));
          }
      }
  }
}

// The repack expressions are other float orders than the plain kernels' (what makes a
// repacking llama.cpp's tokens differ): over random rows they disagree somewhere, and the
// Q4_K GEMV and GEMM orders disagree with each other.
TEST(VecDot, LlamaCppRepackOrdersDifferFromThePlainOnes) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const VecDotFn plain_q4_0 = llamacpp_dot_kernel(DType::kQ4_0).vec_dot;  // ggml's plain x86 order
  const VecDotFn own_q5_0 = scalar_dot_kernel(DType::kQ5_0).vec_dot;
  int differ_q4_0 = 0, differ_q4_k = 0, differ_q5_0 = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const int64_t k = 4864;
    std::vector<float> x = random_floats(static_cast<size_t>(k), seed + 7, -3.0f, 3.0f);
    std::vector<uint8_t> x8(*quant::row_bytes(DType::kQ8_0, k)),
        xk(*quant::row_bytes(DType::kQ8_K, k));
    from_f32_q8_0(x.data(), x8.data(), k);
    from_f32_q8_k(x.data(), xk.data(), k);
    std::vector<uint8_t> w0 = encode(DType::kQ4_0, random_floats(static_cast<size_t>(k), seed));
    std::vector<uint8_t> wk = encode(DType::kQ4_K, random_floats(static_cast<size_t>(k), seed));
    std::vector<uint8_t> w5 = encode(DType::kQ5_0, random_floats(static_cast<size_t>(k), seed));
    differ_q4_0 +=
        dot_q4_0_q8_0_repack_scalar(k, w0.data(), x8.data()) != plain_q4_0(k, w0.data(), x8.data());
    differ_q4_k += dot_q4_k_q8_k_repack_gemv_scalar(k, wk.data(), xk.data()) !=
                   dot_q4_k_q8_k_repack_gemm_scalar(k, wk.data(), xk.data());
    differ_q5_0 +=
        dot_q5_0_q8_0_ggml_scalar(k, w5.data(), x8.data()) != own_q5_0(k, w5.data(), x8.data());
  }
  int differ_q6_k = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const int64_t k = 4864;
    std::vector<float> x = random_floats(static_cast<size_t>(k), seed + 9, -3.0f, 3.0f);
    std::vector<uint8_t> xk(*quant::row_bytes(DType::kQ8_K, k));
    from_f32_q8_k(x.data(), xk.data(), k);
    std::vector<uint8_t> w6 = encode(DType::kQ6_K, random_floats(static_cast<size_t>(k), seed));
    differ_q6_k += dot_q6_k_q8_k_tiled_scalar(k, w6.data(), xk.data()) !=
                   avx2_dot_kernel(DType::kQ6_K).vec_dot(k, w6.data(), xk.data());
  }
  // Q5_K: ggml's GEMV lanes, its tiled order and minfer's own per-super-block order are
  // three roundings of one exact sum — close to each other, bitwise apart on many rows.
  int differ_q5_k_gemv = 0, differ_q5_k_tiled = 0, differ_q5_k_pair = 0;
  const VecDotFn own_q5_k = scalar_dot_kernel(DType::kQ5_K).vec_dot;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const int64_t k = 4864;
    std::vector<float> x = random_floats(static_cast<size_t>(k), seed + 11, -3.0f, 3.0f);
    std::vector<uint8_t> xk(*quant::row_bytes(DType::kQ8_K, k));
    from_f32_q8_k(x.data(), xk.data(), k);
    std::vector<uint8_t> w5 = encode(DType::kQ5_K, random_floats(static_cast<size_t>(k), seed));
    const float own = own_q5_k(k, w5.data(), xk.data());
    const float gemv = dot_q5_k_q8_k_ggml_scalar(k, w5.data(), xk.data());
    const float tiled = dot_q5_k_q8_k_tiled_scalar(k, w5.data(), xk.data());
    ASSERT_NEAR(gemv, own, 1e-4f * (1.0f + std::fabs(own))) << "seed " << seed;
    ASSERT_NEAR(tiled, own, 1e-4f * (1.0f + std::fabs(own))) << "seed " << seed;
    differ_q5_k_gemv += gemv != own;
    differ_q5_k_tiled += tiled != own;
    differ_q5_k_pair += gemv != tiled;
  }
  EXPECT_GT(differ_q5_k_gemv, 5);
  EXPECT_GT(differ_q5_k_tiled, 5);
  EXPECT_GT(differ_q5_k_pair, 5);
  EXPECT_GT(differ_q6_k, 5);
  EXPECT_GT(differ_q4_0, 5);
  EXPECT_GT(differ_q4_k, 5);
  EXPECT_GT(differ_q5_0, 5);
}

// quantize_mat_q8_K_4x8's rows: the reference bytes, except that a block whose first
// largest-magnitude element is negative while +amax also occurs gets the negated scale.
TEST(VecDot, Q8KFourRowQuantizerDiffersFromReferenceOnlyOnASignedTie) {
  const int64_t k = 512;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::vector<float> x = random_floats(static_cast<size_t>(k), seed, -4.0f, 4.0f);
    std::vector<uint8_t> a(*quant::row_bytes(DType::kQ8_K, k)), b(a.size());
    from_f32_q8_k(x.data(), a.data(), k);
    from_f32_q8_k_mat4(x.data(), b.data(), k);
    ASSERT_EQ(a, b) << "seed " << seed;
  }
  std::vector<float> x = random_floats(static_cast<size_t>(k), 3, -1.0f, 1.0f);
  x[10] = -2.0f;  // block 0: −amax first ...
  x[200] = 2.0f;  // ... then +amax
  x[300] = 2.0f;  // block 1: +amax first
  x[400] = -2.0f;
  std::vector<uint8_t> a(*quant::row_bytes(DType::kQ8_K, k)), b(a.size());
  from_f32_q8_k(x.data(), a.data(), k);
  from_f32_q8_k_mat4(x.data(), b.data(), k);
  const auto* ra = reinterpret_cast<const quant::BlockQ8_K*>(a.data());
  const auto* rb = reinterpret_cast<const quant::BlockQ8_K*>(b.data());
  EXPECT_GT(ra[0].d, 0.0f);
  EXPECT_EQ(rb[0].d, -ra[0].d);
  for (int j = 0; j < 256; ++j) ASSERT_EQ(rb[0].qs[j], -ra[0].qs[j]) << j;
  for (int j = 0; j < 16; ++j) ASSERT_EQ(rb[0].bsums[j], -ra[0].bsums[j]) << j;
  EXPECT_EQ(std::memcmp(&ra[1], &rb[1], sizeof(quant::BlockQ8_K)), 0);  // no tie to break
}

// mul_mat under llamacpp numerics: a weight llama.cpp repacks (Q4_0 / Q4_K, rows % 8 == 0)
// takes the repack expression; Q4_K's batch rows in whole groups of 4 the GEMM order on
// 4-row activations, the rest (and decode) the GEMV order; a weight llama.cpp keeps
// (rows % 8 != 0, the token embedding, or repack off) the plain llamacpp kernel.
TEST(MulMat, LlamaCppNumericsFollowTheRepackBufferPerWeight_bitwise) {
  if (!have_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  struct Case {
    DType t;
    int64_t n;
    const char* name;
    bool repack;
    bool expect_repack;
  };
  const int64_t k = 512;
  const Case cases[] = {
      {DType::kQ4_0, 16, "blk.0.ffn_up.weight", true, true},
      {DType::kQ4_0, 12, "blk.0.ffn_up.weight", true, false},
      {DType::kQ4_0, 16, "token_embd.weight", true, false},
      {DType::kQ4_0, 16, "blk.0.ffn_up.weight", false, false},
      {DType::kQ4_K, 24, "blk.0.ffn_down.weight", true, true},
      {DType::kQ4_K, 20, "blk.0.ffn_down.weight", true, false},
      {DType::kQ6_K, 16, "blk.0.ffn_down.weight", true, false},  // tiled from 8 rows
      {DType::kQ5_K, 16, "blk.0.ffn_down.weight", true, false},  // tiled from 8 rows
  };
  for (const Case& cs : cases)
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{6}, int64_t{7}, int64_t{8}, int64_t{9}}) {
      SCOPED_TRACE(std::string(dtype_name(cs.t)) + " " + cs.name + " n " + std::to_string(cs.n) +
                   " m " + std::to_string(m) + (cs.repack ? " repack" : " norepack"));
      std::vector<float> w = random_floats(static_cast<size_t>(k * cs.n), 21);
      std::vector<uint8_t> wb = encode(cs.t, w);
      std::vector<float> x = random_floats(static_cast<size_t>(k * m), 22, -3.0f, 3.0f);
      CpuRig rig(CpuBackendOptions{.n_threads = 2,
                                   .isa = CpuIsa::kAvx2,
                                   .llamacpp_numerics = true,
                                   .llamacpp_repack = cs.repack});
      GraphBuilder b;
      NodeId wn = b.weight(cs.name, cs.t, {k, cs.n});
      NodeId xn = b.input("x", DType::kF32, {k, m});
      NodeId y = b.mul_mat(wn, xn);
      b.mark_output(y);
      const graph::ComputeGraph& g = rig.load(b.finish());
      rig.bind(cs.name, std::vector<uint8_t>(wb));
      rig.fill_f32(g, "x", x);
      ASSERT_TRUE(rig.run(g).ok());
      const std::vector<float> got = rig.read(g, y);
      const DType vdt = cs.t == DType::kQ4_0 ? DType::kQ8_0 : DType::kQ8_K;
      const uint64_t w_row = *quant::row_bytes(cs.t, k), x_row = *quant::row_bytes(vdt, k);
      const int64_t m_group = m - m % 4;
      for (int64_t j = 0; j < m; ++j) {
        std::vector<uint8_t> xq(x_row);
        const bool gemm_row = cs.t == DType::kQ4_K && cs.expect_repack && j < m_group;
        if (vdt == DType::kQ8_0) {
          from_f32_q8_0(x.data() + j * k, xq.data(), k);
        } else if (gemm_row) {
          from_f32_q8_k_mat4(x.data() + j * k, xq.data(), k);
        } else {
          from_f32_q8_k(x.data() + j * k, xq.data(), k);
        }
        for (int64_t i = 0; i < cs.n; ++i) {
          const uint8_t* wr = wb.data() + i * w_row;
          float want;
          if (cs.t == DType::kQ6_K) {  // ggml's GEMV below 8 rows, its tiled matmul from 8
            want = m >= 8 ? dot_q6_k_q8_k_tiled_scalar(k, wr, xq.data())
                          : avx2_dot_kernel(DType::kQ6_K).vec_dot(k, wr, xq.data());
          } else if (cs.t == DType::kQ5_K) {
            want = m >= 8 ? dot_q5_k_q8_k_tiled_scalar(k, wr, xq.data())
                          : dot_q5_k_q8_k_ggml_scalar(k, wr, xq.data());
          } else if (!cs.expect_repack) {
            want = llamacpp_dot_kernel(cs.t).vec_dot(k, wr, xq.data());
          } else if (cs.t == DType::kQ4_0) {
            want = dot_q4_0_q8_0_repack_scalar(k, wr, xq.data());
          } else {
            want = gemm_row ? dot_q4_k_q8_k_repack_gemm_scalar(k, wr, xq.data())
                            : dot_q4_k_q8_k_repack_gemv_scalar(k, wr, xq.data());
          }
          ASSERT_EQ(fp32_to_bits(want), fp32_to_bits(got[static_cast<size_t>(j * cs.n + i)]))
              << "row " << i << " activation " << j;
        }
      }
    }
}

}  // namespace
}  // namespace minfer::backend::cpu
