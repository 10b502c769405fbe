// Stage 12 tests (kernels): the F32 / F16 / BF16 weight kernels of default numerics (16
// fma lanes, ARCHITECTURE §6) — scalar, AVX2 and AVX-512 dots bitwise equal over odd
// lengths and within float accumulation of the exact sum; every GEMV / GEMM tile shape
// bitwise the single-row dot (invariant 8); mul_mat per ISA and thread count bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/vec_dot.h"
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

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// Cause: n fma roundings of the running lane sums and 4 of the tree, each at most 2^-24
// relative to the magnitude accumulated so far (≤ Σ|w·x|).
double accum_bound(int64_t n, double mag) {
  return (static_cast<double>(n) + 4.0) * 0x1p-24 * mag + 1e-30;
}

// n elements of one activation row in the type's activation format (its own type).
std::vector<uint8_t> act_row(const DotKernel& dk, const std::vector<float>& x, int64_t n) {
  std::vector<uint8_t> xa(*quant::row_bytes(dk.vec_dot_type, static_cast<uint64_t>(n)));
  dk.from_f32(x.data(), xa.data(), n);
  return xa;
}

TEST(FloatWeightDots, ScalarAvx2Avx512AgreeOverOddLengths_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const bool avx512 = detect_isa() == CpuIsa::kAvx512;
  for (DType t : kFloatTypes)
    for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 384, 896, 903, 4864}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n));
      const DotKernel ref = scalar_dot_kernel(t);
      const DotKernel a2 = avx2_dot_kernel(t);
      const DotKernel a5 = avx512 ? avx512_dot_kernel(t) : a2;
      ASSERT_NE(a2.gemm, nullptr);
      ASSERT_NE(a5.gemm, nullptr);
      for (uint32_t seed = 1; seed <= 8; ++seed) {
        std::vector<float> w = random_floats(static_cast<size_t>(n), seed, -2.0f, 2.0f);
        std::vector<float> x = random_floats(static_cast<size_t>(n), seed + 50, -3.0f, 3.0f);
        std::vector<uint8_t> wb = encode(t, w);
        std::vector<uint8_t> xa = act_row(ref, x, n);
        const float r = ref.vec_dot(n, wb.data(), xa.data());
        const float b2 = a2.vec_dot(n, wb.data(), xa.data());
        const float b5 = a5.vec_dot(n, wb.data(), xa.data());
        ASSERT_EQ(fp32_to_bits(r), fp32_to_bits(b2)) << r << " vs " << b2 << " seed " << seed;
        ASSERT_EQ(fp32_to_bits(r), fp32_to_bits(b5)) << r << " vs " << b5 << " seed " << seed;
        // The value: the exact sum of the products of the rounded operands, within the
        // float accumulation bound.
        std::vector<float> wd = decode(t, wb, static_cast<size_t>(n));
        std::vector<float> xd = decode(ref.vec_dot_type, xa, static_cast<size_t>(n));
        double exact = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          exact += double{wd[i]} * xd[i];
          mag += std::fabs(double{wd[i]} * xd[i]);
        }
        ASSERT_LE(std::fabs(double{r} - exact), accum_bound(n, mag)) << "seed " << seed;
      }
    }
}

// The documented order itself, on every ISA column: element i of the body goes to lane
// i % 16, lanes l and l + 8 meet first, the tail is fma'd on after the tree. Ties at 2^24
// round to even, so each grouping gives another value: 2^24 + 1 (element 16) is lost in
// lane 0, 1 + 1 (elements 8 and 24) survives in lane 8 and joins it exact (2^24 + 2),
// then the tail's two ones round to 2^24 + 4 — the 8-lane or the sequential order give
// 2^24.
TEST(FloatWeightDots, SixteenLanesThenTreeThenTail_bitwise) {
  const int64_t n = 34;
  std::vector<float> w(n, 0.0f), x(n, 1.0f);
  w[0] = 0x1p24f;
  for (int64_t i : {8, 16, 24, 32, 33}) w[static_cast<size_t>(i)] = 1.0f;
  std::vector<DotKernel> cols = {scalar_dot_kernel(DType::kF32)};
  if (detect_isa() != CpuIsa::kScalar) cols.push_back(avx2_dot_kernel(DType::kF32));
  if (detect_isa() == CpuIsa::kAvx512) cols.push_back(avx512_dot_kernel(DType::kF32));
  for (const DotKernel& dk : cols) {
    EXPECT_EQ(dk.vec_dot(n, w.data(), x.data()), 0x1p24f + 4.0f);
    // The tree pairs lanes (0 + 8) before (0 + 4): 1 + 2^-24 rounds to 1 in t0, the two
    // 2^-24 of lanes 4 and 12 make 2^-23 in t4, exact beside 1.
    std::vector<float> w2(16, 0.0f), x2(16, 1.0f);
    w2[0] = 1.0f;
    w2[4] = w2[8] = w2[12] = 0x1p-24f;
    EXPECT_EQ(dk.vec_dot(16, w2.data(), x2.data()), 1.0f + 0x1p-23f);
  }
}

// The F16C activation converter writes the reference's bytes: a sweep of bit patterns
// (normals, subnormals, overflow to inf, ties) plus NaN and infinities, at every offset.
TEST(FloatWeightDots, F16ActivationConverterEqualsReferenceBytes) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65521)
    x.push_back(fp32_from_bits(static_cast<uint32_t>(b)));
  for (uint32_t b : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc01234u, 0x477fe000u,
                     0x477ff000u, 0x33000000u, 0x33000001u, 0x387fc000u})
    x.push_back(fp32_from_bits(b));
  for (size_t off = 0; off < 9; ++off) {
    const auto n = static_cast<int64_t>(x.size() - off);
    std::vector<uint16_t> a(x.size()), b(x.size());
    from_f32_f16(x.data() + off, a.data(), n);
    from_f32_f16_avx2(x.data() + off, b.data(), n);
    ASSERT_EQ(a, b) << off;
  }
}

// Every GEMM tile shape and remainder (weight rows, activation rows, k % 16) equals the
// scalar single-row dot bit for bit — prefill equals decode.
TEST(FloatWeightGemm, EqualsSingleRowDotOverOddShapes_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  int n_checked = 0;
  for (DType t : kFloatTypes)
    for (bool avx512 : {false, true}) {
      if (avx512 && detect_isa() != CpuIsa::kAvx512) continue;
      const DotKernel dk = avx512 ? avx512_dot_kernel(t) : avx2_dot_kernel(t);
      const DotKernel ref = scalar_dot_kernel(t);
      ASSERT_NE(dk.gemm, nullptr);
      for (int64_t k : {1, 15, 16, 33, 100, 531, 1024, 1100, 2070}) {  // K blocks past 1024
        const uint64_t row = *quant::row_bytes(t, static_cast<uint64_t>(k));
        for (int64_t n_w : {1, 3, 4, 5, 7, 9, 13})
          for (int64_t n_x : {1, 2, 3, 5, 6, 7, 13}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + (avx512 ? " avx512" : " avx2") + " k " +
                         std::to_string(k) + " n_w " + std::to_string(n_w) + " n_x " +
                         std::to_string(n_x));
            std::vector<uint8_t> wb = encode(
                t, random_floats(static_cast<size_t>(k * n_w), 17 + static_cast<uint32_t>(k)));
            std::vector<float> x = random_floats(static_cast<size_t>(k * n_x), 3);
            std::vector<uint8_t> xq;
            const std::vector<float> y = run_gemm(dk, k, wb, row, n_w, x, row, n_x, xq);
            for (int64_t j = 0; j < n_x; ++j)
              for (int64_t i = 0; i < n_w; ++i) {
                const float v = ref.vec_dot(k, wb.data() + i * row, xq.data() + j * row);
                ASSERT_EQ(fp32_to_bits(v), fp32_to_bits(y[static_cast<size_t>(j * n_w + i)]))
                    << "i " << i << " j " << j;
              }
            ++n_checked;
          }
      }
    }
  EXPECT_GE(n_checked, 3 * 9 * 7 * 7);
}

// F32 weight rows are read in place when they start on the kernel's load width and packed
// when they do not (a GGUF's 32-byte tensor alignment), activation rows likewise on their
// own: the same bits every way, equal to the single-row dot (weight rows at byte offsets
// 0, 16, 32 and 48 from a cache line, activation rows at 0 and 32).
TEST(FloatWeightGemm, F32RowsOnAndOffCacheLinesGiveTheSameBits_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const DotKernel ref = scalar_dot_kernel(DType::kF32);
  for (bool avx512 : {false, true}) {
    if (avx512 && detect_isa() != CpuIsa::kAvx512) continue;
    const DotKernel dk = avx512 ? avx512_dot_kernel(DType::kF32) : avx2_dot_kernel(DType::kF32);
    for (int64_t k : {384, 1536, 1100}) {
      const int64_t n_w = 9, n_x = 13;
      const uint64_t row = static_cast<uint64_t>(k) * 4;
      const std::vector<float> w = random_floats(static_cast<size_t>(k * n_w), 5);
      const std::vector<float> xv = random_floats(static_cast<size_t>(k * n_x), 6);
      std::vector<float> first;
      for (size_t off : {0, 16, 32, 48})
        for (size_t x_off : {0, 32}) {
          SCOPED_TRACE((avx512 ? "avx512 k " : "avx2 k ") + std::to_string(k) + " offset " +
                       std::to_string(off) + " activation offset " + std::to_string(x_off));
          // 64-byte-aligned arenas, the rows placed `off` (`x_off`) bytes past a line
          std::vector<uint8_t> arena(w.size() * 4 + 128), x_arena(xv.size() * 4 + 128);
          auto* base = reinterpret_cast<uint8_t*>(
              (reinterpret_cast<uintptr_t>(arena.data()) + 63) / 64 * 64 + off);
          std::memcpy(base, w.data(), w.size() * 4);
          auto* x = reinterpret_cast<float*>(
              (reinterpret_cast<uintptr_t>(x_arena.data()) + 63) / 64 * 64 + x_off);
          std::memcpy(x, xv.data(), xv.size() * 4);
          std::vector<float> y(static_cast<size_t>(n_w * n_x), -1.0f);
          dk.gemm(GemmArgs{.k = k,
                           .w = base,
                           .w_stride = row,
                           .n_w = n_w,
                           .x = x,
                           .x_stride = row,
                           .n_x = n_x,
                           .y = y.data(),
                           .y_stride = n_w});
          for (int64_t j = 0; j < n_x; ++j)
            for (int64_t i = 0; i < n_w; ++i) {
              const float v = ref.vec_dot(k, base + i * row, x + j * k);
              ASSERT_EQ(fp32_to_bits(v), fp32_to_bits(y[static_cast<size_t>(j * n_w + i)]))
                  << "i " << i << " j " << j;
            }
          if (first.empty()) first = y;
          EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * 4));
        }
    }
  }
}

// mul_mat over float weights: the same bits on every ISA column (scalar, AVX2, AVX-512),
// for 1 and 2 threads, and a row alone equals its row of the batch.
TEST(FloatWeightGemm, MulMatSameBitsAcrossIsaThreadsAndBatch_bitwise) {
  const int64_t k = 531, n = 75, m = 13;
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (detect_isa() != CpuIsa::kScalar) isas.push_back(CpuIsa::kAvx2);
  if (detect_isa() == CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  for (DType t : kFloatTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint8_t> wb = encode(t, random_floats(static_cast<size_t>(k * n), 9));
    const std::vector<float> x = random_floats(static_cast<size_t>(k * m), 10);
    auto run = [&](CpuIsa isa, int32_t threads, int64_t rows, const float* xs) {
      CpuRig rig(threads, isa);
      GraphBuilder b;
      NodeId wn = b.weight("w", t, {k, n});              // F32/F16/BF16 [k, n]
      NodeId xn = b.input("x", DType::kF32, {k, rows});  // F32 [k, rows]
      NodeId y = b.mul_mat(wn, xn);                      // F32 [n, rows]
      b.mark_output(y);
      const graph::ComputeGraph& g = rig.load(b.finish());
      rig.bind("w", std::vector<uint8_t>(wb));
      rig.fill_f32(g, "x", std::span<const float>(xs, static_cast<size_t>(k * rows)));
      EXPECT_TRUE(rig.run(g).ok());
      return rig.read(g, y);
    };
    const std::vector<float> base = run(CpuIsa::kScalar, 1, m, x.data());
    for (CpuIsa isa : isas)
      for (int32_t threads : {1, 2}) {
        const std::vector<float> y = run(isa, threads, m, x.data());
        ASSERT_EQ(0, std::memcmp(base.data(), y.data(), base.size() * 4))
            << "isa " << static_cast<int>(isa) << " threads " << threads;
      }
    for (int64_t j : {int64_t{0}, m - 1}) {
      const std::vector<float> y1 = run(isas.back(), 2, 1, x.data() + j * k);
      ASSERT_EQ(0, std::memcmp(y1.data(), base.data() + j * n, static_cast<size_t>(n) * 4)) << j;
    }
  }
}

}  // namespace
}  // namespace minfer::backend::cpu
