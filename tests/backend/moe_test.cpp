// Stage 12 tests (kernels): the mixture-of-experts kernels against references written
// plainly here — top_k (ties, -inf, k = n), moe_weights (normalised routing weights),
// moe_sum (slot-ordered weighted sum) — and the grouped mul_mat_id against the
// per-element vec_dot reference for every weight type, ISA table, thread count and
// (n_expert, n_used, n_tokens) shape, including experts no row selects.
// Bars: bitwise everywhere — each kernel keeps its reference's order per element.
#include "backend/cpu/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/vec_dot.h"
#include "core/fp16.h"
#include "graph/builder.h"
#include "harness.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

using graph::GraphBuilder;
using graph::NodeId;
using testing::CpuRig;
using testing::encode;
using testing::random_floats;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- top_k ------------------------------------------------------------------------

// Plain selection: k times, the largest remaining value, the lowest index among equals.
// For n <= 16 this is ggml's argsort order exactly (std::sort is then an insertion sort,
// which is stable); for longer rows ties may come out in another order, so only the
// values are compared there.
std::vector<int32_t> top_k_plain(const std::vector<float>& x, int64_t k) {
  std::vector<bool> taken(x.size(), false);
  std::vector<int32_t> out;
  for (int64_t s = 0; s < k; ++s) {
    int32_t best = -1;
    for (size_t i = 0; i < x.size(); ++i) {
      if (taken[i]) continue;
      if (best < 0 || x[i] > x[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    taken[static_cast<size_t>(best)] = true;
    out.push_back(best);
  }
  return out;
}

std::vector<float> row_with_ties(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, 5);  // few distinct values: many ties
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    const int r = d(rng);
    v = r == 0 ? -std::numeric_limits<float>::infinity() : 0.25f * static_cast<float>(r);
  }
  return x;
}

TEST(MoeTopK, EqualsPlainSelectionWithTiesAndInfinities_bitwise) {
  std::vector<int32_t> scratch(256), got(256);
  for (int64_t n : {1, 2, 3, 7, 8, 16}) {
    for (int64_t k = 1; k <= n; ++k) {
      for (uint32_t seed = 0; seed < 8; ++seed) {
        const std::vector<float> x = row_with_ties(n, seed * 31 + static_cast<uint32_t>(n));
        top_k_row(n, x.data(), k, scratch.data(), got.data());
        const std::vector<int32_t> want = top_k_plain(x, k);
        for (int64_t s = 0; s < k; ++s) {
          ASSERT_EQ(got[static_cast<size_t>(s)], want[static_cast<size_t>(s)])
              << "n " << n << " k " << k << " seed " << seed << " slot " << s;
        }
      }
    }
  }
  // Rows longer than 16 (introsort): the k values, in descending order, distinct ids.
  for (int64_t n : {17, 64, 128}) {
    for (int64_t k : {int64_t{1}, int64_t{8}, n}) {
      const std::vector<float> x = row_with_ties(n, static_cast<uint32_t>(n + k));
      top_k_row(n, x.data(), k, scratch.data(), got.data());
      const std::vector<int32_t> want = top_k_plain(x, k);
      std::vector<bool> seen(static_cast<size_t>(n), false);
      for (int64_t s = 0; s < k; ++s) {
        const int32_t id = got[static_cast<size_t>(s)];
        ASSERT_TRUE(id >= 0 && id < n && !seen[static_cast<size_t>(id)]) << "n " << n;
        seen[static_cast<size_t>(id)] = true;
        ASSERT_EQ(fp32_to_bits(x[static_cast<size_t>(id)]),
                  fp32_to_bits(x[static_cast<size_t>(want[static_cast<size_t>(s)])]))
            << "n " << n << " k " << k << " slot " << s;
      }
    }
  }
}

// ---- moe_weights, moe_sum ---------------------------------------------------------

TEST(MoeWeights, EqualsNormalisedSelection_bitwise) {
  // w[s] = p[ids[s]] / max(Σ p[ids[s]] (summed in double, rounded once), 2^-14)
  for (int64_t k : {1, 2, 4, 8}) {
    for (uint32_t seed = 0; seed < 16; ++seed) {
      std::vector<float> p = random_floats(8, seed, 0.0f, 1.0f);
      if (seed == 0) std::fill(p.begin(), p.end(), 0.0f);   // zero sum: the clamp
      if (seed == 1) std::fill(p.begin(), p.end(), 1e-7f);  // tiny sum: the clamp
      std::vector<int32_t> ids(static_cast<size_t>(k));
      for (int64_t s = 0; s < k; ++s)
        ids[static_cast<size_t>(s)] = static_cast<int32_t>((s * 3 + seed) % 8);
      std::vector<float> got(static_cast<size_t>(k));
      moe_weights_row(p.data(), ids.data(), k, got.data());
      double sum = 0.0;
      for (int32_t id : ids) sum += p[static_cast<size_t>(id)];
      float den = static_cast<float>(sum);
      if (den < 6.103515625e-5f) den = 6.103515625e-5f;
      for (int64_t s = 0; s < k; ++s) {
        const float want = p[static_cast<size_t>(ids[static_cast<size_t>(s)])] / den;
        ASSERT_EQ(fp32_to_bits(got[static_cast<size_t>(s)]), fp32_to_bits(want))
            << "k " << k << " seed " << seed << " slot " << s;
      }
    }
  }
}

TEST(MoeSum, EqualsSlotOrderedWeightedSum_bitwise) {
  const int64_t n = 37;
  for (int64_t k : {1, 2, 3, 8}) {
    const std::vector<float> e = random_floats(static_cast<size_t>(n * k), 3, -4.0f, 4.0f);
    const std::vector<float> w = random_floats(static_cast<size_t>(k), 4, 0.0f, 1.0f);
    std::vector<float> got(static_cast<size_t>(n));
    moe_sum_row(n, e.data(), w.data(), k, got.data());
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int64_t s = 0; s < k; ++s) {
        const float prod = e[static_cast<size_t>(s * n + i)] * w[static_cast<size_t>(s)];
        acc = s == 0 ? prod : acc + prod;
      }
      ASSERT_EQ(fp32_to_bits(got[static_cast<size_t>(i)]), fp32_to_bits(acc)) << "k " << k;
    }
  }
}

// The three ops as graph nodes on the CPU backend, 1..3 threads, several rows.
TEST(MoeRouting, GraphOpsEqualTheRowFunctionsOnAnyThreadCount_bitwise) {
  const int64_t n_expert = 8, k = 2, rows = 9, n = 40;
  const std::vector<float> probs = random_floats(static_cast<size_t>(n_expert * rows), 21, 0, 1);
  const std::vector<float> experts = random_floats(static_cast<size_t>(n * k * rows), 22);
  for (int32_t threads : {1, 2, 3}) {
    CpuRig rig(threads);
    GraphBuilder b;
    NodeId p = b.input("p", DType::kF32, {n_expert, rows});
    NodeId e = b.input("e", DType::kF32, {n, k, rows});
    NodeId ids = b.top_k(p, k);
    NodeId w = b.moe_weights(p, ids);
    NodeId y = b.moe_sum(e, w);
    b.mark_output(ids);
    b.mark_output(w);
    b.mark_output(y);
    const graph::ComputeGraph& g = rig.load(b.finish());
    rig.fill_f32(g, "p", probs);
    rig.fill_f32(g, "e", experts);
    ASSERT_TRUE(rig.run(g).ok());
    const std::vector<float> got_ids_raw = rig.read(g, ids);
    const std::vector<float> got_w = rig.read(g, w);
    const std::vector<float> got_y = rig.read(g, y);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int32_t> scratch(static_cast<size_t>(n_expert)), want_ids(k);
      top_k_row(n_expert, probs.data() + r * n_expert, k, scratch.data(), want_ids.data());
      ASSERT_EQ(0, std::memcmp(got_ids_raw.data() + r * k, want_ids.data(), k * 4)) << r;
      std::vector<float> want_w(k), want_y(static_cast<size_t>(n));
      moe_weights_row(probs.data() + r * n_expert, want_ids.data(), k, want_w.data());
      ASSERT_EQ(0, std::memcmp(got_w.data() + r * k, want_w.data(), k * 4)) << r;
      moe_sum_row(n, experts.data() + r * k * n, want_w.data(), k, want_y.data());
      ASSERT_EQ(0, std::memcmp(got_y.data() + r * n, want_y.data(), static_cast<size_t>(n) * 4))
          << r;
    }
  }
}

// ---- mul_mat_id -------------------------------------------------------------------

const DType kMulMatIdTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                                DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                                DType::kQ5_K, DType::kQ6_K};

struct DotTable {
  const char* name;
  DotKernel (*get)(DType);
};

std::vector<DotTable> dot_tables() {
  std::vector<DotTable> t = {{"scalar", scalar_dot_kernel}};
  const CpuIsa isa = detect_isa();
  if (isa != CpuIsa::kScalar) {
    t.push_back({"avx2", avx2_dot_kernel});
    t.push_back({"llamacpp", llamacpp_dot_kernel});
  }
  if (isa == CpuIsa::kAvx512) t.push_back({"avx512", avx512_dot_kernel});
  return t;
}

struct IdShape {
  int64_t n_expert, n_used, n_tokens, n_b;
  bool crowd;  // every row picks from experts {1, 5} only: the others idle
};

// ids I32 [n_used, n_tokens]: distinct experts per token, as top_k gives.
std::vector<int32_t> make_ids(const IdShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    std::vector<int32_t> pool;
    if (s.crowd) {
      pool = {1, 5};
    } else {
      for (int32_t e = 0; e < s.n_expert; ++e) pool.push_back(e);
    }
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t u = 0; u < s.n_used; ++u) ids.push_back(pool[static_cast<size_t>(u)]);
  }
  return ids;
}

TEST(MulMatId, GroupedEqualsPerElementVecDotForEveryTypeAndShape_bitwise) {
  // k 256 (a k-quant super-block), n_out 70: a full 64-row tile and a remainder.
  const int64_t k_dim = 256, n_out = 70;
  const IdShape shapes[] = {
      {8, 2, 1, 1, false},    // decode: one row per chosen expert
      {8, 2, 5, 1, false},    // a small batch sharing the activation row per slot
      {8, 2, 6, 2, false},    // one activation row per slot (the down projection)
      {4, 4, 7, 1, false},    // k = n_expert: every expert active
      {16, 4, 33, 4, false},  // wide batch: groups above the GEMM's one-pass rows
      {8, 1, 3, 1, false},    // top-1
      {8, 2, 12, 2, true},    // two crowded experts, six never selected
  };
  for (const DotTable& table : dot_tables()) {
    for (DType t : kMulMatIdTypes) {
      const DotKernel dk = table.get(t);
      if (dk.vec_dot == nullptr) continue;
      for (const IdShape& s : shapes) {
        SCOPED_TRACE(std::string(table.name) + " " + std::string(dtype_name(t)) + " experts " +
                     std::to_string(s.n_expert) + " used " + std::to_string(s.n_used) + " tokens " +
                     std::to_string(s.n_tokens) + " n_b " + std::to_string(s.n_b));
        const std::vector<uint8_t> w = encode(
            t, random_floats(static_cast<size_t>(k_dim * n_out * s.n_expert), 100 + s.n_tokens));
        const std::vector<float> x =
            random_floats(static_cast<size_t>(k_dim * s.n_b * s.n_tokens), 200 + s.n_used);
        const std::vector<int32_t> ids = make_ids(s, 300 + static_cast<uint32_t>(s.n_tokens));
        const size_t n_y = static_cast<size_t>(n_out * s.n_used * s.n_tokens);
        MulMatIdArgs a{.w_type = t,
                       .k_dim = k_dim,
                       .n_out = n_out,
                       .n_expert = s.n_expert,
                       .n_used = s.n_used,
                       .n_b = s.n_b,
                       .n_tokens = s.n_tokens,
                       .w = w.data(),
                       .x = x.data(),
                       .ids = ids.data()};
        std::vector<float> want(n_y, -1.0f);
        a.y = want.data();
        mul_mat_id_reference(dk, a);
        for (int32_t threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          Scratch scratch;
          std::vector<float> got(n_y, -2.0f);
          a.y = got.data();
          mul_mat_id_grouped(dk, a, pool, scratch);
          ASSERT_TRUE(same_bits(got, want)) << threads << " threads";
        }
        // Invariant 8: each token alone gives its rows of the batch, bit for bit.
        ThreadPool pool(2);
        Scratch scratch;
        for (int64_t tok = 0; tok < s.n_tokens; ++tok) {
          MulMatIdArgs one = a;
          one.n_tokens = 1;
          one.x = x.data() + tok * s.n_b * k_dim;
          one.ids = ids.data() + tok * s.n_used;
          std::vector<float> got(static_cast<size_t>(n_out * s.n_used));
          one.y = got.data();
          mul_mat_id_grouped(dk, one, pool, scratch);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data() + tok * s.n_used * n_out,
                                   got.size() * sizeof(float)))
              << "token " << tok;
        }
      }
    }
  }
}

// The reference itself against exact math on the dequantized weights (so the twin test
// above cannot pass with a wrong expert or row): within the activation rounding of the
// vec_dot_type (Q8 blocks: half a step of amax/127; f16/bf16: relative 2^-11 / 2^-8).
TEST(MulMatId, ReferencePicksTheRightExpertRows_WithinActivationQuantBound) {
  const int64_t k_dim = 256, n_out = 9;
  const IdShape s{8, 2, 4, 1, false};
  for (DType t : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const DotKernel dk = scalar_dot_kernel(t);
    const std::vector<float> wf = random_floats(static_cast<size_t>(k_dim * n_out * s.n_expert), 5);
    const std::vector<uint8_t> w = encode(t, wf);
    std::vector<float> wd(wf.size());
    ASSERT_TRUE(quant::dequantize(t, w, wd).ok());
    const std::vector<float> x = random_floats(static_cast<size_t>(k_dim * s.n_tokens), 6);
    const std::vector<int32_t> ids = make_ids(s, 7);
    std::vector<float> y(static_cast<size_t>(n_out * s.n_used * s.n_tokens));
    mul_mat_id_reference(dk, MulMatIdArgs{.w_type = t,
                                          .k_dim = k_dim,
                                          .n_out = n_out,
                                          .n_expert = s.n_expert,
                                          .n_used = s.n_used,
                                          .n_b = 1,
                                          .n_tokens = s.n_tokens,
                                          .w = w.data(),
                                          .x = x.data(),
                                          .ids = ids.data(),
                                          .y = y.data()});
    for (int64_t tok = 0; tok < s.n_tokens; ++tok) {
      for (int64_t u = 0; u < s.n_used; ++u) {
        const int64_t e = ids[static_cast<size_t>(tok * s.n_used + u)];
        for (int64_t r = 0; r < n_out; ++r) {
          double ref = 0.0, mag = 0.0;
          for (int64_t i = 0; i < k_dim; ++i) {
            const double wv = wd[static_cast<size_t>((e * n_out + r) * k_dim + i)];
            ref += wv * x[static_cast<size_t>(tok * k_dim + i)];
            mag += std::fabs(wv);
          }
          // |x| <= 1: Q8 rounding moves each activation by <= 1/254 (+ its fp16 scale).
          const double tol = t == DType::kF32 ? 1e-4 : mag * (0.5 / 127.0 + 1.0 / 2048) + 1e-4;
          ASSERT_NEAR(y[static_cast<size_t>((tok * s.n_used + u) * n_out + r)], ref, tol)
              << "token " << tok << " slot " << u << " row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace minfer::backend::cpu
