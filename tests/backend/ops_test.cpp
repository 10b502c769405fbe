// Stage 12 tests (kernels): every non-matmul op against an independent reference
// computed here (double where it helps), attention determinism over threads and
// prefill-vs-decode, and loud bounds. Bars: named tolerances or bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/cpu/attn_ggml_f16.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_dot.h"
#include "core/fp16.h"
#include "graph/builder.h"
#include "graph/fusion.h"
#include "harness.h"
#include "quant/quant.h"

namespace minfer::backend::cpu {
namespace {

using graph::GraphBuilder;
using graph::KvKind;
using graph::NodeId;
using testing::CpuRig;
using testing::encode;
using testing::random_floats;

// Float kernels vs double references: a few ulps of the largest term per element.
constexpr double kFloatRel = 1e-5;
// RoPE: float angle recurrence θ·base^(−2i/n) (ggml's) vs double pow, at positions < 100.
constexpr double kRopeAbs = 1e-4;
// Attention: float scores, exp and accumulation vs a double softmax.
constexpr double kAttnAbs = 1e-5;

TEST(Ops, ElementwiseAndNormsMatchReference) {
  CpuRig rig(2);
  GraphBuilder b;
  NodeId x = b.input("x", DType::kF32, {64, 3});  // F32 [64, 3]
  NodeId r = b.input("r", DType::kF32, {64, 1});  // F32 [64, 1] (row broadcast)
  NodeId s = b.input("s", DType::kF32, {1, 3});   // F32 [1, 3]  (scalar per row)
  NodeId add = b.add(x, r);
  NodeId mul = b.mul(x, s);
  NodeId sc = b.scale(x, 0.75f);
  NodeId si = b.silu(x);
  NodeId sw = b.swiglu(x, add);
  NodeId sm = b.softmax(x, 2.0f);
  NodeId rn = b.rms_norm(x, 1e-5f);
  NodeId rv = b.reshape(rn, {32, 6});
  NodeId ct = b.cont(b.view(x, {64, 2}, 64));  // rows 1..2 of x
  for (NodeId o : {add, mul, sc, si, sw, sm, rv, ct}) b.mark_output(o);
  const graph::ComputeGraph& g = rig.load(b.finish());
  auto vx = random_floats(192, 1, -3.0f, 3.0f), vr = random_floats(64, 2), vs = random_floats(3, 3);
  rig.fill_f32(g, "x", vx);
  rig.fill_f32(g, "r", vr);
  rig.fill_f32(g, "s", vs);
  ASSERT_TRUE(rig.run(g).ok());
  auto near = [](double got, double ref) {
    return std::fabs(got - ref) <= kFloatRel * (1 + std::fabs(ref));
  };
  auto o_add = rig.read(g, add), o_mul = rig.read(g, mul), o_sc = rig.read(g, sc),
       o_si = rig.read(g, si), o_sw = rig.read(g, sw), o_sm = rig.read(g, sm),
       o_rn = rig.read(g, rv), o_ct = rig.read(g, ct);
  for (int row = 0; row < 3; ++row) {
    double ss = 0.0, mx = -1e30, den = 0.0;
    for (int i = 0; i < 64; ++i) {
      const double v = vx[row * 64 + i];
      ss += v * v;
      mx = std::max(mx, 2.0 * v);
    }
    for (int i = 0; i < 64; ++i) den += std::exp(2.0 * vx[row * 64 + i] - mx);
    const double inv_rms = 1.0 / std::sqrt(ss / 64 + 1e-5);
    for (int i = 0; i < 64; ++i) {
      const int e = row * 64 + i;
      const double v = vx[e];
      const double sig = v / (1 + std::exp(-v));
      EXPECT_TRUE(near(o_add[e], v + vr[i])) << e;
      EXPECT_TRUE(near(o_mul[e], v * vs[row])) << e;
      EXPECT_TRUE(near(o_sc[e], v * 0.75)) << e;
      EXPECT_TRUE(near(o_si[e], sig)) << e;
      EXPECT_TRUE(near(o_sw[e], sig * (v + vr[i]))) << e;
      EXPECT_TRUE(near(o_sm[e], std::exp(2.0 * v - mx) / den)) << e;
      EXPECT_TRUE(near(o_rn[e], v * inv_rms)) << e;
    }
  }
  for (int e = 0; e < 128; ++e) EXPECT_EQ(o_ct[e], vx[64 + e]);
}

TEST(Ops, FusedRmsNormMulEqualsUnfusedPair_bitwise) {
  CpuRig rig(3);
  GraphBuilder b;
  NodeId x = b.input("x", DType::kF32, {96, 4});
  NodeId w = b.input("w", DType::kF32, {96});
  NodeId unfused = b.mul(b.rms_norm(x, 1e-6f), w);
  b.mark_output(unfused);
  graph::ComputeGraph g0 = b.finish();
  GraphBuilder b2;
  NodeId x2 = b2.input("x", DType::kF32, {96, 4});
  NodeId w2 = b2.input("w", DType::kF32, {96});
  NodeId fused_src = b2.mul(b2.rms_norm(x2, 1e-6f), w2);
  b2.mark_output(fused_src);
  graph::ComputeGraph g1 = b2.finish();
  graph::FusionFlags on;
  graph::run_fusion(g1, on);
  ASSERT_EQ(g1.node(g1.outputs()[0]).op, graph::Op::kRmsNormMul);
  const auto& a = rig.load(std::move(g0), 1);
  auto vx = random_floats(384, 5), vw = random_floats(96, 6);
  rig.fill_f32(a, "x", vx);
  rig.fill_f32(a, "w", vw);
  ASSERT_TRUE(rig.run(a).ok());
  auto ra = rig.read(a, a.outputs()[0]);
  const auto& f = rig.load(std::move(g1), 2);
  rig.fill_f32(f, "x", vx);
  rig.fill_f32(f, "w", vw);
  ASSERT_TRUE(rig.run(f).ok());
  auto rf = rig.read(f, f.outputs()[0]);
  EXPECT_EQ(0, std::memcmp(ra.data(), rf.data(), ra.size() * 4));
}

TEST(Ops, GetRowsDequantizesEveryTableType_bitwise) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K,
                  DType::kQ6_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    CpuRig rig(2);
    GraphBuilder b;
    NodeId tab = b.weight("tab", t, {256, 10});
    NodeId ids = b.input("ids", DType::kI32, {4});
    NodeId o = b.get_rows(tab, ids);
    b.mark_output(o);
    const auto& g = rig.load(b.finish());
    auto bytes = encode(t, random_floats(2560, 9));
    auto full = testing::decode(t, bytes, 2560);
    rig.bind("tab", bytes);
    const int32_t idv[4] = {9, 0, 3, 9};
    rig.fill_i32(g, "ids", idv);
    ASSERT_TRUE(rig.run(g).ok());
    auto out = rig.read(g, o);
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(0, std::memcmp(out.data() + r * 256, full.data() + idv[r] * 256, 1024)) << r;
    }
    const int32_t bad[4] = {0, 10, 1, 2};
    rig.fill_i32(g, "ids", bad);
    Status st = rig.run(g);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("id 10"), std::string::npos) << st.error().message;
  }
}

double rope_ref_angle(int pos, int i, int n_rot, double base) {
  return pos * std::pow(base, -2.0 * i / n_rot);
}

TEST(Ops, RopeNormalAndNeoxMatchReference) {
  for (graph::RopeMode mode : {graph::RopeMode::kNormal, graph::RopeMode::kNeox}) {
    CpuRig rig(2);
    GraphBuilder b;
    const int hd = 16, nh = 3, nt = 4, n_rot = 12;
    NodeId x = b.input("x", DType::kF32, {hd, nh, nt});
    NodeId p = b.input("p", DType::kI32, {nt});
    NodeId o =
        b.rope(x, p, {.mode = mode, .n_rot = n_rot, .freq_base = 10000.0f, .freq_scale = 1.0f});
    b.mark_output(o);
    const auto& g = rig.load(b.finish());
    auto vx = random_floats(hd * nh * nt, 11);
    const int32_t pos[nt] = {0, 1, 17, 99};
    rig.fill_f32(g, "x", vx);
    rig.fill_i32(g, "p", pos);
    ASSERT_TRUE(rig.run(g).ok());
    auto out = rig.read(g, o);
    for (int t = 0; t < nt; ++t) {
      for (int h = 0; h < nh; ++h) {
        const float* xr = vx.data() + (t * nh + h) * hd;
        const float* orow = out.data() + (t * nh + h) * hd;
        for (int i = 0; i < n_rot / 2; ++i) {
          const double th = rope_ref_angle(pos[t], i, n_rot, 10000.0);
          const int a = mode == graph::RopeMode::kNeox ? i : 2 * i;
          const int c = mode == graph::RopeMode::kNeox ? i + n_rot / 2 : 2 * i + 1;
          EXPECT_NEAR(orow[a], xr[a] * std::cos(th) - xr[c] * std::sin(th), kRopeAbs);
          EXPECT_NEAR(orow[c], xr[a] * std::sin(th) + xr[c] * std::cos(th), kRopeAbs);
        }
        for (int i = n_rot; i < hd; ++i) EXPECT_EQ(orow[i], xr[i]);
      }
    }
  }
}

// ---- attention --------------------------------------------------------------------

struct AttnGraph {
  NodeId out;
};

// q [hd, nh, nt], new K/V rows for nt tokens stored at `cells`, window per token.
const graph::ComputeGraph& attn_graph(CpuRig& rig, int nt, int n_runs, uint32_t key, AttnGraph* ag,
                                      DType kv = DType::kF32, bool ggml_f16 = false, int hd = 8,
                                      int nh = 4, int nkv = 2,
                                      std::optional<DType> kv_v = std::nullopt) {
  const int n_ctx = 160;
  GraphBuilder b;
  NodeId q = b.input("q", DType::kF32, {hd, nh, nt});
  NodeId k = b.input("k", DType::kF32, {hd * nkv, nt});
  NodeId v = b.input("v", DType::kF32, {hd * nkv, nt});
  NodeId cells = b.input("cells", DType::kI32, {nt});
  NodeId win = b.input("win", DType::kI32, {2 * n_runs, nt});
  NodeId rk = b.kv_region(0, KvKind::kK, kv, {hd * nkv, n_ctx});
  NodeId rv = b.kv_region(0, KvKind::kV, kv_v.value_or(kv), {hd * nkv, n_ctx});
  NodeId ks = b.kv_store(rk, k, cells);
  NodeId vs = b.kv_store(rv, v, cells);
  ag->out = b.attention(q, ks, vs, win,
                        {.n_head = nh,
                         .n_head_kv = nkv,
                         .scale = 0.35f,
                         .causal = true,
                         .layer = 0,
                         .ggml_f16 = ggml_f16});
  b.mark_output(ag->out);
  return rig.load(b.finish(), key, n_ctx);
}

// T tokens at cells (and positions) 0..T-1, token t seeing cells 0..t: one window run each.
struct CausalRows {
  std::vector<int32_t> cells, win;
};
CausalRows causal_rows(int T) {
  CausalRows r{std::vector<int32_t>(T), std::vector<int32_t>(2 * T)};
  for (int t = 0; t < T; ++t) {
    r.cells[t] = t;
    r.win[2 * t] = 0;
    r.win[2 * t + 1] = t + 1;
  }
  return r;
}

// Query heads are taken two at a time per KV head where the ISA has a two-head score
// kernel (AVX-512), one at a time elsewhere: a group of 3 (a pair and a single) at head
// size 128 and 72 (an 8-lane body with and without a tail) gives the scalar kernels' bits
// on every ISA, for a 150-token prefill and a decode row.
TEST(Attention, HeadPairsGiveTheSingleHeadBitsOnEveryIsa_bitwise) {
  const int T = 150, nh = 6, nkv = 2;
  for (int hd : {128, 72}) {
    auto vq = random_floats(T * nh * hd, 31, -2.0f, 2.0f);
    auto vk = random_floats(T * nkv * hd, 32, -2.0f, 2.0f);
    auto vv = random_floats(T * nkv * hd, 33);
    const CausalRows rows = causal_rows(T);
    const std::vector<int32_t>& cells = rows.cells;
    const std::vector<int32_t>& win = rows.win;
    std::vector<std::vector<float>> outs;
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAuto}) {
      if (isa != CpuIsa::kScalar && detect_isa() == CpuIsa::kScalar) continue;
      CpuRig rig(2, isa);
      AttnGraph ag;
      const auto& g = attn_graph(rig, T, 1, 1, &ag, DType::kF32, false, hd, nh, nkv);
      rig.fill_f32(g, "q", vq);
      rig.fill_f32(g, "k", vk);
      rig.fill_f32(g, "v", vv);
      rig.fill_i32(g, "cells", cells);
      rig.fill_i32(g, "win", win);
      Status st = rig.run(g);
      ASSERT_TRUE(st.ok()) << st.error().message;
      outs.push_back(rig.read(g, ag.out));
    }
    for (size_t i = 1; i < outs.size(); ++i) {
      ASSERT_EQ(outs[0].size(), outs[i].size());
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * 4))
          << "hd " << hd << " isa #" << i;
    }
  }
}

// Prefill of T tokens at cells/positions 0..T-1 (causal), then the same T tokens decoded
// one at a time into a fresh rig: every (token, head) output is bitwise equal, and
// equal across thread counts; both match a double softmax reference.
// Decodes tokens 0..T-1 one at a time (a decode graph, nt = 1, the KV region persisting
// in the rig; token t sees cells 0..t) and expects each output to be its row of `ref`
// ([T, nh, hd], a prefill's) bit for bit.
void expect_token_by_token_equals(const std::vector<float>& vq, const std::vector<float>& vk,
                                  const std::vector<float>& vv, const std::vector<float>& ref,
                                  int T, DType kv = DType::kF32, int hd = 8, int nh = 4,
                                  int nkv = 2) {
  CpuRig rig(2);
  AttnGraph ag;
  const auto& g = attn_graph(rig, 1, 1, 1, &ag, kv, false, hd, nh, nkv);
  for (int t = 0; t < T; ++t) {
    rig.fill_f32(g, "q", std::span<const float>(vq.data() + t * nh * hd, nh * hd));
    rig.fill_f32(g, "k", std::span<const float>(vk.data() + t * nkv * hd, nkv * hd));
    rig.fill_f32(g, "v", std::span<const float>(vv.data() + t * nkv * hd, nkv * hd));
    const int32_t c1[1] = {t};
    const int32_t w1[2] = {0, t + 1};
    rig.fill_i32(g, "cells", c1);
    rig.fill_i32(g, "win", w1);
    ASSERT_TRUE(rig.run(g).ok());
    auto o = rig.read(g, ag.out);
    ASSERT_EQ(0, std::memcmp(o.data(), ref.data() + t * nh * hd, o.size() * 4)) << "token " << t;
  }
}

TEST(Attention, PrefillEqualsTokenByTokenDecodeAndThreadCounts_bitwise) {
  const int T = 150, hd = 8, nh = 4, nkv = 2;  // T > 2 chunks of 64 cells
  auto vq = random_floats(T * nh * hd, 21, -2.0f, 2.0f);
  auto vk = random_floats(T * nkv * hd, 22, -2.0f, 2.0f);
  auto vv = random_floats(T * nkv * hd, 23);
  const CausalRows rows = causal_rows(T);
  const std::vector<int32_t>& cells = rows.cells;
  const std::vector<int32_t>& win = rows.win;
  std::vector<std::vector<float>> prefill;
  for (int32_t threads : {1, 3}) {
    CpuRig rig(threads);
    AttnGraph ag;
    const auto& g = attn_graph(rig, T, 1, 1, &ag);
    rig.fill_f32(g, "q", vq);
    rig.fill_f32(g, "k", vk);
    rig.fill_f32(g, "v", vv);
    rig.fill_i32(g, "cells", cells);
    rig.fill_i32(g, "win", win);
    Status st = rig.run(g);
    ASSERT_TRUE(st.ok()) << st.error().message;
    prefill.push_back(rig.read(g, ag.out));
  }
  ASSERT_EQ(0, std::memcmp(prefill[0].data(), prefill[1].data(), prefill[0].size() * 4));
  const auto& out = prefill[0];
  // double reference
  for (int t = 0; t < T; t += 7) {
    for (int h = 0; h < nh; ++h) {
      const int kvh = h / (nh / nkv);
      std::vector<double> s(t + 1);
      double mx = -1e300;
      for (int c = 0; c <= t; ++c) {
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += double{vq[(t * nh + h) * hd + i]} * vk[(c * nkv + kvh) * hd + i];
        s[c] = 0.35 * d;
        mx = std::max(mx, s[c]);
      }
      double den = 0;
      for (int c = 0; c <= t; ++c) den += std::exp(s[c] - mx);
      for (int i = 0; i < hd; ++i) {
        double ref = 0;
        for (int c = 0; c <= t; ++c)
          ref += std::exp(s[c] - mx) / den * vv[(c * nkv + kvh) * hd + i];
        ASSERT_NEAR(out[(t * nh + h) * hd + i], ref, kAttnAbs) << t << " " << h << " " << i;
      }
    }
  }
  expect_token_by_token_equals(vq, vk, vv, out, T);
}

// What kv_store writes for a row of a quantized cache: q8_0 by ggml's x86 quantizer
// (from_f32_q8_0), q4_0 by the reference one.
void quantize_kv(DType type, const std::vector<float>& x, std::vector<uint8_t>& blocks) {
  if (type == DType::kQ8_0) {
    backend::cpu::from_f32_q8_0(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  } else {
    EXPECT_TRUE(quant::quantize(type, x, blocks).ok());
  }
}

// Prefill of T causal tokens (token t sees cells 0..t) over a K / V cache of the given
// types on a backend made from `options`: outputs [T, nh, hd]. q, k, v hold T tokens.
std::vector<float> causal_attention(const CpuBackendOptions& options, DType kt, DType vt,
                                    bool ggml_f16, int hd, int nh, int nkv, int T,
                                    const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v) {
  const CausalRows rows = causal_rows(T);
  CpuRig rig(options);
  AttnGraph ag;
  const auto& g = attn_graph(rig, T, 1, 1, &ag, kt, ggml_f16, hd, nh, nkv, vt);
  rig.fill_f32(g, "q", std::span<const float>(q.data(), static_cast<size_t>(T * nh * hd)));
  rig.fill_f32(g, "k", std::span<const float>(k.data(), static_cast<size_t>(T * nkv * hd)));
  rig.fill_f32(g, "v", std::span<const float>(v.data(), static_cast<size_t>(T * nkv * hd)));
  rig.fill_i32(g, "cells", rows.cells);
  rig.fill_i32(g, "win", rows.win);
  Status st = rig.run(g);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return rig.read(g, ag.out);
}

// Prefill of T causal tokens with the given cache / numerics, outputs [T, nh, hd].
std::vector<float> attn_prefill(int32_t threads, DType kv, bool ggml_f16,
                                const std::vector<float>& vq, const std::vector<float>& vk,
                                const std::vector<float>& vv, int T) {
  const CausalRows rows = causal_rows(T);
  const std::vector<int32_t>& cells = rows.cells;
  const std::vector<int32_t>& win = rows.win;
  CpuRig rig(threads);
  AttnGraph ag;
  const auto& g = attn_graph(rig, T, 1, 1, &ag, kv, ggml_f16);
  const size_t nq = static_cast<size_t>(T) * 4 * 8, nk = static_cast<size_t>(T) * 2 * 8;
  rig.fill_f32(g, "q", std::span<const float>(vq.data(), nq));  // the first T tokens
  rig.fill_f32(g, "k", std::span<const float>(vk.data(), nk));
  rig.fill_f32(g, "v", std::span<const float>(vv.data(), nk));
  rig.fill_i32(g, "cells", cells);
  rig.fill_i32(g, "win", win);
  Status st = rig.run(g);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return rig.read(g, ag.out);
}

std::vector<float> round_to_f16(std::vector<float> v) {
  for (float& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
  return v;
}

// An f16 cache with f32 numerics is the f32 computation on f16-rounded K and V: the
// store rounds to nearest-even and the read widens exactly.
TEST(Attention, F16CacheEqualsF32AttentionOverRoundedKV_bitwise) {
  const int T = 100, hd = 8, nh = 4, nkv = 2;
  auto vq = random_floats(T * nh * hd, 31, -2.0f, 2.0f);
  auto vk = random_floats(T * nkv * hd, 32, -2.0f, 2.0f);
  auto vv = random_floats(T * nkv * hd, 33);
  const auto f16 = attn_prefill(2, DType::kF16, false, vq, vk, vv, T);
  const auto ref = attn_prefill(2, DType::kF32, false, vq, round_to_f16(vk), round_to_f16(vv), T);
  ASSERT_EQ(f16.size(), ref.size());
  EXPECT_EQ(0, std::memcmp(f16.data(), ref.data(), f16.size() * 4));
}

// A q8_0 / q4_0 cache is the f32 computation on the values its blocks decode to (the
// store quantizes with llama.cpp's reference quantizer, the read decodes d·q exactly),
// for a prefill on 1 and 3 threads and for the same tokens decoded one at a time.
TEST(Attention, QuantizedCacheEqualsF32AttentionOverDequantizedKV_bitwise) {
  const int T = 100, hd = 32, nh = 4, nkv = 2;
  auto vq = random_floats(T * nh * hd, 41, -2.0f, 2.0f);
  auto vk = random_floats(T * nkv * hd, 42, -2.0f, 2.0f);
  auto vv = random_floats(T * nkv * hd, 43);
  auto prefill = [&](DType kv, int32_t threads, const std::vector<float>& k,
                     const std::vector<float>& v) {
    return causal_attention({.n_threads = threads}, kv, kv, false, hd, nh, nkv, T, vq, k, v);
  };
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    auto decoded = [&](const std::vector<float>& x) {
      auto bytes = quant::row_bytes(type, x.size());
      EXPECT_TRUE(bytes.ok());
      std::vector<uint8_t> blocks(*bytes);
      std::vector<float> out(x.size());
      quantize_kv(type, x, blocks);
      EXPECT_TRUE(quant::dequantize(type, blocks, out).ok());
      return out;
    };
    const auto dk = decoded(vk), dv = decoded(vv);
    ASSERT_NE(0, std::memcmp(dk.data(), vk.data(), dk.size() * 4));  // the cache is lossy
    const auto ref = prefill(DType::kF32, 2, dk, dv);
    const auto q1 = prefill(type, 1, vk, vv);
    const auto q3 = prefill(type, 3, vk, vv);
    ASSERT_EQ(q1.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(q1.data(), ref.data(), ref.size() * 4));
    EXPECT_EQ(0, std::memcmp(q3.data(), ref.data(), ref.size() * 4));
    expect_token_by_token_equals(vq, vk, vv, ref, T, type, hd, nh, nkv);
  }
}

// K and V of different types (-ctk / -ctv) are each stored and read in their own format:
// the f32 computation over each one's decoded values, on 1 and 3 threads.
TEST(Attention, MixedKAndVCacheTypesEqualF32AttentionOverEachDecoded_bitwise) {
  const int T = 70, hd = 32, nh = 4, nkv = 2;
  auto vq = random_floats(T * nh * hd, 61, -2.0f, 2.0f);
  auto vk = random_floats(T * nkv * hd, 62, -2.0f, 2.0f);
  auto vv = random_floats(T * nkv * hd, 63);
  auto prefill = [&](DType kt, DType vt, int32_t threads, const std::vector<float>& k,
                     const std::vector<float>& v) {
    return causal_attention({.n_threads = threads}, kt, vt, false, hd, nh, nkv, T, vq, k, v);
  };
  auto decoded = [](DType type, const std::vector<float>& x) {
    if (type == DType::kF32) return x;
    if (type == DType::kF16) return round_to_f16(x);
    std::vector<uint8_t> blocks(*quant::row_bytes(type, x.size()));
    std::vector<float> out(x.size());
    quantize_kv(type, x, blocks);
    EXPECT_TRUE(quant::dequantize(type, blocks, out).ok());
    return out;
  };
  const std::pair<DType, DType> pairs[] = {{DType::kQ8_0, DType::kF16},
                                           {DType::kF16, DType::kQ4_0},
                                           {DType::kF32, DType::kQ8_0},
                                           {DType::kQ4_0, DType::kF32}};
  for (const auto& [kt, vt] : pairs) {
    SCOPED_TRACE(std::string(dtype_name(kt)) + "/" + std::string(dtype_name(vt)));
    const auto ref = prefill(DType::kF32, DType::kF32, 2, decoded(kt, vk), decoded(vt, vv));
    const auto a = prefill(kt, vt, 1, vk, vv);
    const auto b = prefill(kt, vt, 3, vk, vv);
    ASSERT_EQ(a.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(a.data(), ref.data(), ref.size() * 4));
    EXPECT_EQ(0, std::memcmp(b.data(), ref.data(), ref.size() * 4));
    // and not the same-type cache's bits: the V type really is its own
    const auto same = prefill(kt, kt, 2, vk, vv);
    EXPECT_NE(0, std::memcmp(a.data(), same.data(), ref.size() * 4));
  }
}

// llama.cpp's flash attention over quantized or mixed K / V cells (--numerics llamacpp
// with -ctk / -ctv q8_0, q4_0): its per-row kernel, for every batch (never tiled, never
// split-KV), rebuilt here from its rounding points — Q to K's activation format (q8_0, or
// f16 for an f16 K), scores by K's llama.cpp dot, per-cell online softmax, an f16 V into
// the f16 accumulator (f32 arithmetic, the x86 build without AVX512-FP16), a quantized V
// decoded and fma'd into an f32 one — equal bit for bit on 1 and 3 threads and whatever
// the batch's height.
TEST(Attention, GgmlNumericsOverQuantizedCellsFollowLlamaCppsPerRowKernel_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const int T = 70, hd = 64, nh = 4, nkv = 2, group = nh / nkv;
  const float scale = 0.35f;  // attn_graph's
  auto vq = random_floats(T * nh * hd, 71, -2.0f, 2.0f);
  auto vk = random_floats(T * nkv * hd, 72, -2.0f, 2.0f);
  auto vv = random_floats(T * nkv * hd, 73);
  const CpuBackendOptions ll{.n_threads = 1, .isa = CpuIsa::kAvx2, .llamacpp_numerics = true};
  auto run = [&](DType kt, DType vt, int32_t threads, int n_tok) {
    CpuBackendOptions o = ll;
    o.n_threads = threads;
    return causal_attention(o, kt, vt, true, hd, nh, nkv, n_tok, vq, vk, vv);
  };
  // The cache as kv_store writes it: one row of nkv heads per token.
  auto store = [&](DType type, const std::vector<float>& x) {
    std::vector<uint8_t> bytes;
    if (type == DType::kF16) {
      bytes.resize(x.size() * 2);
      from_f32_f16(x.data(), bytes.data(), static_cast<int64_t>(x.size()));
    } else {
      bytes.resize(*quant::row_bytes(type, x.size()));
      quantize_kv(type, x, bytes);
    }
    return bytes;
  };
  auto head_bytes = [&](DType type) {
    return type == DType::kF16 ? hd * 2 : static_cast<int>(*quant::row_bytes(type, hd));
  };
  const std::pair<DType, DType> pairs[] = {{DType::kQ8_0, DType::kQ8_0},
                                           {DType::kQ4_0, DType::kQ4_0},
                                           {DType::kQ8_0, DType::kF16},
                                           {DType::kF16, DType::kQ4_0}};
  for (const auto& [kt, vt] : pairs) {
    SCOPED_TRACE(std::string(dtype_name(kt)) + "/" + std::string(dtype_name(vt)));
    const std::vector<uint8_t> kc = store(kt, vk), vc = store(vt, vv);
    const int kb = head_bytes(kt), vb = head_bytes(vt);
    const DotKernel kdot = llamacpp_dot_kernel(kt);
    std::vector<float> ref(static_cast<size_t>(T * nh * hd));
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < nh; ++h) {
        const int kvh = h / group;
        const float* qr = vq.data() + (t * nh + h) * hd;
        std::vector<uint8_t> qq(static_cast<size_t>(hd * 2));
        if (kt == DType::kF16) {
          from_f32_f16(qr, qq.data(), hd);
        } else {
          from_f32_q8_0(qr, qq.data(), hd);
        }
        std::vector<uint16_t> acc16(hd, 0);
        std::vector<float> acc(hd, 0.0f), vrow(hd);
        float m = -INFINITY, l = 0.0f;
        for (int cell = 0; cell <= t; ++cell) {
          const uint8_t* kr = kc.data() + (cell * nkv + kvh) * kb;
          const uint8_t* vr = vc.data() + (cell * nkv + kvh) * vb;
          const float sc = (kt == DType::kF16 ? ggml_dot_f16_vec_scalar(
                                                    hd, reinterpret_cast<const uint16_t*>(kr),
                                                    reinterpret_cast<const uint16_t*>(qq.data()))
                                              : kdot.vec_dot(hd, kr, qq.data())) *
                           scale;
          float ms = 1.0f, vs = 1.0f;
          if (sc > m) {
            ms = std::exp(m - sc);
            m = sc;
            if (vt == DType::kF16) {
              ggml_scale_f16_f32arith_scalar(hd, acc16.data(), ms);
            } else {
              for (float& a : acc) a *= ms;
            }
          } else {
            vs = std::exp(sc - m);
          }
          if (vt == DType::kF16) {
            ggml_mad_f16_f32arith_scalar(hd, acc16.data(), reinterpret_cast<const uint16_t*>(vr),
                                         vs);
          } else {
            quant::traits(vt)->dequantize(vr, vrow.data(), hd);
            for (int i = 0; i < hd; ++i) acc[i] = std::fma(vrow[i], vs, acc[i]);
          }
          l = std::fma(l, ms, vs);
        }
        for (int i = 0; i < hd; ++i) {
          ref[(t * nh + h) * hd + i] =
              (vt == DType::kF16 ? fp16_to_fp32(acc16[i]) : acc[i]) * (1.0f / l);
        }
      }
    }
    const auto a = run(kt, vt, 1, T);
    const auto b = run(kt, vt, 3, T);
    ASSERT_EQ(a.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(a.data(), ref.data(), ref.size() * 4));
    EXPECT_EQ(0, std::memcmp(b.data(), ref.data(), ref.size() * 4));
    // a row's bits do not depend on the batch's height (no tiled kernel for a tall
    // batch here): row t of the 70-row batch is the last row of a (t + 1)-row one
    for (int t = 0; t < T; t += 9) {
      const auto o = run(kt, vt, 2, t + 1);
      ASSERT_EQ(0, std::memcmp(o.data() + t * nh * hd, ref.data() + t * nh * hd, nh * hd * 4))
          << "token " << t;
    }
  }
}

// The AVX2 decoders of quantized KV rows give quant::dequantize's bits (every int8 and
// nibble value, scales of every magnitude).
TEST(Attention, QuantizedRowDecodersEqualDequantize_bitwise) {
  if (backend::cpu::detect_isa() == backend::cpu::CpuIsa::kScalar) GTEST_SKIP() << "no AVX2";
  const int64_t n = 32 * 64;
  auto x = random_floats(n, 51, -3.0f, 3.0f);
  for (int64_t i = 0; i < n; i += 97) x[i] *= 1e4f;  // a few blocks with a large scale
  for (int64_t i = 0; i < 32; ++i) x[i] = 0.0f;      // an all-zero block (d = 0)
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    std::vector<uint8_t> blocks(*quant::row_bytes(type, n));
    ASSERT_TRUE(quant::quantize(type, x, blocks).ok());
    std::vector<float> ref(n), got(n);
    ASSERT_TRUE(quant::dequantize(type, blocks, ref).ok());
    (type == DType::kQ8_0 ? backend::cpu::q8_0_to_f32_avx2 : backend::cpu::q4_0_to_f32_avx2)(
        blocks.data(), got.data(), n);
    EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), n * 4)) << dtype_name(type);
  }
}

// llama.cpp's flash-attention rounding (f16 Q, f16 V accumulator): independent of the
// thread count; below 64 rows (its per-row vector kernel) also of prefill vs
// token-by-token decode — from 64 rows llama.cpp, and so this mode, takes its tiled
// kernel, whose bits differ from the per-row ones; within the f16 accumulator's error of
// the exact softmax either way.
TEST(Attention, GgmlF16NumericsAreThreadInvariantBatchInvariantUnder64RowsAndNearExact) {
  const int T = 130, hd = 8, nh = 4, nkv = 2;
  auto vq = random_floats(T * nh * hd, 41, -2.0f, 2.0f);
  auto vk = random_floats(T * nkv * hd, 42, -2.0f, 2.0f);
  auto vv = random_floats(T * nkv * hd, 43);
  const auto a = attn_prefill(1, DType::kF16, true, vq, vk, vv, T);  // tiled (>= 64 rows)
  const auto b = attn_prefill(3, DType::kF16, true, vq, vk, vv, T);
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  const int T_row = 63;  // the per-row kernel
  const auto r = attn_prefill(2, DType::kF16, true, vq, vk, vv, T_row);
  for (int t = 0; t < T_row; t += 3) {  // token t alone, after the cells before it
    const auto one = attn_prefill(2, DType::kF16, true, vq, vk, vv, t + 1);
    ASSERT_EQ(0, std::memcmp(one.data() + t * nh * hd, r.data() + t * nh * hd, nh * hd * 4))
        << "token " << t;
  }
  const auto exact = attn_prefill(1, DType::kF32, false, vq, vk, vv, T);
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - exact[i]));
  }
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 5e-3);  // f16 inputs (2^-11) and ~T f16 accumulations of |v| <= 1
}

// llama.cpp's f16 flash attention (ggml_f16) on `rig` for head size `hd`: 9 tokens
// causal over an f16 cache, 2 query heads on 1 KV head, scale 1/16, Q K V from seeds
// `seed`, +1, +2. Beside the kernel's output, the two reference loops over llama.cpp's
// rounding points — Q rounded to f16, scores from ggml_dot_f16_vec_scalar, the V
// accumulator in f16 — one per form of ggml's f16 helpers:
//   f16_arith: over the 128-element steps (i < hd & ~127) one fused f16 multiply-add
//     per element with the weight rounded to f16 and rescaling by an f16 factor, f32
//     arithmetic over the leftovers (an AVX512-FP16 build);
//   f32_arith: every element as f16(fma(v, w, acc)) and rescaled as f16(acc · ms), the
//     weight never rounded to f16 (x86 builds without AVX512-FP16).
struct GgmlF16Attention {
  static constexpr int kT = 9, kNh = 2;
  bool ran = false;              // the graph executed
  std::vector<float> got;        // F32 [hd, kNh, kT], the kernel's output
  std::vector<float> f16_arith;  // F32 [hd, kNh, kT]
  std::vector<float> f32_arith;  // F32 [hd, kNh, kT]
};

GgmlF16Attention ggml_f16_attention(CpuRig& rig, int hd, uint32_t seed) {
  const int T = GgmlF16Attention::kT, nh = GgmlF16Attention::kNh, nkv = 1, n_ctx = 16;
  GraphBuilder b;
  NodeId q = b.input("q", DType::kF32, {hd, nh, T});
  NodeId k = b.input("k", DType::kF32, {hd * nkv, T});
  NodeId v = b.input("v", DType::kF32, {hd * nkv, T});
  NodeId cells = b.input("cells", DType::kI32, {T});
  NodeId win = b.input("win", DType::kI32, {2, T});
  NodeId rk = b.kv_region(0, KvKind::kK, DType::kF16, {hd * nkv, n_ctx});
  NodeId rv = b.kv_region(0, KvKind::kV, DType::kF16, {hd * nkv, n_ctx});
  NodeId out = b.attention(q, b.kv_store(rk, k, cells), b.kv_store(rv, v, cells), win,
                           {.n_head = nh,
                            .n_head_kv = nkv,
                            .scale = 0.0625f,
                            .causal = true,
                            .layer = 0,
                            .ggml_f16 = true});
  b.mark_output(out);
  const auto& g = rig.load(b.finish(), 1, n_ctx);
  const auto vq = random_floats(T * nh * hd, seed, -3.0f, 3.0f);
  const auto vk = random_floats(T * nkv * hd, seed + 1, -3.0f, 3.0f);
  const auto vv = random_floats(T * nkv * hd, seed + 2, -8.0f, 8.0f);
  std::vector<int32_t> cl(T), wl(2 * T);
  for (int t = 0; t < T; ++t) {
    cl[t] = t;
    wl[2 * t] = 0;
    wl[2 * t + 1] = t + 1;
  }
  rig.fill_f32(g, "q", vq);
  rig.fill_f32(g, "k", vk);
  rig.fill_f32(g, "v", vv);
  rig.fill_i32(g, "cells", cl);
  rig.fill_i32(g, "win", wl);
  GgmlF16Attention r;
  r.ran = rig.run(g).ok();
  if (!r.ran) return r;
  r.got = rig.read(g, out);
  r.f16_arith.resize(r.got.size());
  r.f32_arith.resize(r.got.size());
  const int np = hd & ~127;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < nh; ++h) {
      std::vector<uint16_t> q16(hd), acc16(hd, 0), acc32(hd, 0);
      for (int i = 0; i < hd; ++i) q16[i] = fp32_to_fp16(vq[(t * nh + h) * hd + i]);
      float m = -INFINITY, l = 0.0f;
      for (int c = 0; c <= t; ++c) {
        std::vector<uint16_t> k16(hd), v16(hd);
        for (int i = 0; i < hd; ++i) {
          k16[i] = fp32_to_fp16(vk[c * hd + i]);
          v16[i] = fp32_to_fp16(vv[c * hd + i]);
        }
        const float sc = ggml_dot_f16_vec_scalar(hd, k16.data(), q16.data()) * 0.0625f;
        float ms = 1.0f, vs = 1.0f;
        if (sc > m) {
          ms = std::exp(m - sc);
          m = sc;
          for (int i = 0; i < hd; ++i) {
            const float f16_ms = i < np ? fp16_to_fp32(fp32_to_fp16(ms)) : ms;
            acc16[i] = fp32_to_fp16(fp16_to_fp32(acc16[i]) * f16_ms);
            acc32[i] = fp32_to_fp16(fp16_to_fp32(acc32[i]) * ms);
          }
        } else {
          vs = std::exp(sc - m);
        }
        for (int i = 0; i < hd; ++i) {
          acc16[i] = i < np
                         ? fma_f16_exact(v16[i], fp32_to_fp16(vs), acc16[i])
                         : fp32_to_fp16(std::fma(fp16_to_fp32(v16[i]), vs, fp16_to_fp32(acc16[i])));
          acc32[i] = fp32_to_fp16(std::fma(fp16_to_fp32(v16[i]), vs, fp16_to_fp32(acc32[i])));
        }
        l = std::fma(l, ms, vs);
      }
      for (int i = 0; i < hd; ++i) {
        r.f16_arith[(t * nh + h) * hd + i] = fp16_to_fp32(acc16[i]) * (1.0f / l);
        r.f32_arith[(t * nh + h) * hd + i] = fp16_to_fp32(acc32[i]) * (1.0f / l);
      }
    }
  }
  return r;
}

// llama.cpp's f16 flash attention as its native build runs it on an AVX512-FP16 CPU:
// ggml's f16 helpers work in f16 arithmetic over 128-element steps (V accumulation as
// one fused f16 multiply-add per element with the weight rounded to f16, rescaling by
// an f16 factor) and in f32 over the leftovers. Head sizes 256 (Gemma 3: all steps),
// 160 (one step + 32 leftovers) and 64 (all leftovers), against a reference loop over
// the same rounding points (scores from ggml_dot_f16_vec_scalar, Q rounded to f16).
TEST(Attention, GgmlF16NumericsUseF16ArithmeticOver128ElementSteps_bitwise) {
  for (const int hd : {256, 160, 64}) {
    CpuRig rig(2);
    const GgmlF16Attention a = ggml_f16_attention(rig, hd, 51);
    ASSERT_TRUE(a.ran) << "hd " << hd;
    const int T = GgmlF16Attention::kT, nh = GgmlF16Attention::kNh;
    const int np = hd & ~127;
    int differ_from_f32_steps = 0;
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < nh; ++h) {
        for (int i = 0; i < hd; ++i) {
          const size_t at = (t * nh + h) * hd + i;
          ASSERT_EQ(fp32_to_bits(a.got[at]), fp32_to_bits(a.f16_arith[at]))
              << "hd " << hd << " t " << t << " h " << h << " i " << i;
          differ_from_f32_steps += a.f16_arith[at] != a.f32_arith[at];
        }
      }
    }
    if (np > 0) {
      EXPECT_GT(differ_from_f32_steps, 0) << "hd " << hd;  // the f16 steps are another order
    } else {
      EXPECT_EQ(differ_from_f32_steps, 0);
    }
  }
}

// The x86 twins of llama.cpp's flash-attention f16 helpers (attn_ggml_f16.h) give the
// scalar references' bits: the Q·K dot (AVX2) and, on an AVX512-FP16 CPU, the f16
// multiply-add and rescale (llama.cpp's own instructions), over lengths with and
// without f16 steps and ragged tails, weights 0, 1 and in between.
TEST(Attention, GgmlF16HelpersTwinsEqualScalar_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const bool fp16 = cpu_has_avx512fp16();
  int seed = 60;
  for (const int64_t n : {64, 100, 128, 160, 256, 300}) {
    std::vector<uint16_t> x(n), y(n);
    const auto fx = random_floats(n, ++seed, -30.0f, 30.0f);
    const auto fy = random_floats(n, ++seed, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = fp32_to_fp16(fx[i]);
      y[i] = fp32_to_fp16(fy[i]);
    }
    EXPECT_EQ(fp32_to_bits(ggml_dot_f16_vec_avx2_fa(n, x.data(), y.data())),
              fp32_to_bits(ggml_dot_f16_vec_scalar(n, x.data(), y.data())))
        << n;
    // the Q·K dot of llama.cpp's AVX2-only build (8 lanes, steps of 32)
    EXPECT_EQ(fp32_to_bits(ggml_dot_f16_vec8_avx2(n, x.data(), y.data())),
              fp32_to_bits(ggml_dot_f16_vec8_scalar(n, x.data(), y.data())))
        << n;
    if (!fp16) continue;
    for (const float v : {0.0f, 1.0f, 0.3377f, 0.04802655f, 0.999f}) {
      std::vector<uint16_t> a = y, b = y;
      for (int rep = 0; rep < 20; ++rep) {  // accumulate, as over cells
        ggml_mad_f16_scalar(n, a.data(), x.data(), v);
        ggml_mad_f16_avx512fp16(n, b.data(), x.data(), v);
        ggml_scale_f16_scalar(n, a.data(), 0.93f);
        ggml_scale_f16_avx512fp16(n, b.data(), 0.93f);
      }
      ASSERT_EQ(a, b) << "n " << n << " v " << v;
    }
  }
  if (!fp16) GTEST_SKIP() << "dot checked; CPU lacks AVX512-FP16 for the f16 helpers";
}

// The f32-arithmetic form of llama.cpp's flash-attention f16 helpers (every x86 build
// without __AVX512FP16__): the AVX2 twins give the scalar references' bits, over
// lengths with and without 8-lane tails, weights 0, 1 and in between; and the form is
// not the f16-arithmetic one from 128 elements on (the weight is not rounded to f16).
TEST(Attention, GgmlF16F32ArithHelpersAvx2TwinsEqualScalar_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  int seed = 80;
  int differ_from_f16_arith = 0;
  for (const int64_t n : {7, 64, 100, 128, 256, 300}) {
    std::vector<uint16_t> x(n), y(n);
    const auto fx = random_floats(n, ++seed, -30.0f, 30.0f);
    const auto fy = random_floats(n, ++seed, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = fp32_to_fp16(fx[i]);
      y[i] = fp32_to_fp16(fy[i]);
    }
    for (const float v : {0.0f, 1.0f, 0.3377f, 0.04802655f, 0.999f}) {
      std::vector<uint16_t> a = y, b = y, c = y;
      for (int rep = 0; rep < 20; ++rep) {  // accumulate, as over cells
        ggml_mad_f16_f32arith_scalar(n, a.data(), x.data(), v);
        ggml_mad_f16_f32arith_avx2(n, b.data(), x.data(), v);
        ggml_mad_f16_scalar(n, c.data(), x.data(), v);
        ggml_scale_f16_f32arith_scalar(n, a.data(), 0.93f);
        ggml_scale_f16_f32arith_avx2(n, b.data(), 0.93f);
        ggml_scale_f16_scalar(n, c.data(), 0.93f);
      }
      ASSERT_EQ(a, b) << "n " << n << " v " << v;
      if (n >= 128) differ_from_f16_arith += a != c;
      if (n < 128) {
        ASSERT_EQ(a, c) << "n " << n << " v " << v;  // no f16 steps: the two forms agree
      }
    }
  }
  EXPECT_GT(differ_from_f16_arith, 0);
}

// --numerics llamacpp's attention (the llamacpp kernel table, f16 helpers in f32
// arithmetic): for head sizes 256 (Gemma 3), 160 and 64 every output is the reference
// loop's over llama.cpp's rounding points — Q rounded to f16, scores from
// ggml_dot_f16_vec_scalar, the V accumulator in f16 updated as f16(fma(v, w, acc)) and
// rescaled as f16(acc · ms), the weight never rounded to f16 — and for 256 some differ
// from the f16-arithmetic form (llamacpp-avx512fp16).
TEST(Attention, LlamaCppNumericsAccumulateHalvesInF32Arithmetic_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  for (const int hd : {256, 160, 64}) {
    CpuRig rig(CpuBackendOptions{.n_threads = 2,
                                 .isa = CpuIsa::kAvx2,
                                 .llamacpp_numerics = true,
                                 .llamacpp_fa_f16_arith = false});
    const GgmlF16Attention a = ggml_f16_attention(rig, hd, 71);
    ASSERT_TRUE(a.ran) << "hd " << hd;
    const int T = GgmlF16Attention::kT, nh = GgmlF16Attention::kNh;
    const int np = hd & ~127;
    int differ_from_f16_arith = 0;
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < nh; ++h) {
        for (int i = 0; i < hd; ++i) {
          const size_t at = (t * nh + h) * hd + i;
          ASSERT_EQ(fp32_to_bits(a.got[at]), fp32_to_bits(a.f32_arith[at]))
              << "hd " << hd << " t " << t << " h " << h << " i " << i;
          differ_from_f16_arith += a.f32_arith[at] != a.f16_arith[at];
        }
      }
    }
    if (np > 0) {
      EXPECT_GT(differ_from_f16_arith, 0) << "hd " << hd;
    } else {
      EXPECT_EQ(differ_from_f16_arith, 0);
    }
  }
}

// llama.cpp's split-KV decode under --numerics llamacpp: one query row over 300 cells
// (llama.cpp's KV view: 300 padded to 512, >= 512) is cut into one chunk per thread —
// with 2 threads cells [0, 256) and [256, 300) — each walked from scratch in f16 and
// combined in f32 as fma(acc, e^(M - M'), chunk · e^(m - M')); with 1 thread it is the
// one walk. Both bitwise against reference loops here; the two differ (head size 256).
TEST(Attention, LlamaCppNumericsSplitDecodeKvWalkPerThreadAsLlamaCpp_bitwise) {
  if (detect_isa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const int hd = 256, nh = 2, nkv = 1, n_cells = 300, n_ctx = 320;
  const auto vq = random_floats(nh * hd, 91, -3.0f, 3.0f);
  const auto vk = random_floats(n_cells * nkv * hd, 92, -3.0f, 3.0f);
  const auto vv = random_floats(n_cells * nkv * hd, 93, -8.0f, 8.0f);
  // The reference: the f32-arithmetic walk over cells [lo, hi) of one head.
  struct Part {
    std::vector<uint16_t> acc;
    float m, l;
  };
  auto walk = [&](int h, int lo, int hi) {
    Part p{std::vector<uint16_t>(hd, 0), -INFINITY, 0.0f};
    std::vector<uint16_t> q16(hd), k16(hd), v16(hd);
    for (int i = 0; i < hd; ++i) q16[i] = fp32_to_fp16(vq[h * hd + i]);
    for (int c = lo; c < hi; ++c) {
      for (int i = 0; i < hd; ++i) {
        k16[i] = fp32_to_fp16(vk[c * hd + i]);
        v16[i] = fp32_to_fp16(vv[c * hd + i]);
      }
      const float sc = ggml_dot_f16_vec_scalar(hd, k16.data(), q16.data()) * 0.0625f;
      float ms = 1.0f, vs = 1.0f;
      if (sc > p.m) {
        ms = std::exp(p.m - sc);
        p.m = sc;
        for (auto& a : p.acc) a = fp32_to_fp16(fp16_to_fp32(a) * ms);
      } else {
        vs = std::exp(sc - p.m);
      }
      for (int i = 0; i < hd; ++i) {
        p.acc[i] = fp32_to_fp16(std::fma(fp16_to_fp32(v16[i]), vs, fp16_to_fp32(p.acc[i])));
      }
      p.l = std::fma(p.l, ms, vs);
    }
    return p;
  };
  int differ = 0;
  for (const int threads : {2, 1}) {
    GraphBuilder b;
    NodeId q = b.input("q", DType::kF32, {hd, nh, 1});
    NodeId k = b.input("k", DType::kF32, {hd * nkv, n_cells});
    NodeId v = b.input("v", DType::kF32, {hd * nkv, n_cells});
    NodeId cells = b.input("cells", DType::kI32, {n_cells});
    NodeId win = b.input("win", DType::kI32, {2, 1});
    NodeId rk = b.kv_region(0, KvKind::kK, DType::kF16, {hd * nkv, n_ctx});
    NodeId rv = b.kv_region(0, KvKind::kV, DType::kF16, {hd * nkv, n_ctx});
    NodeId out = b.attention(q, b.kv_store(rk, k, cells), b.kv_store(rv, v, cells), win,
                             {.n_head = nh,
                              .n_head_kv = nkv,
                              .scale = 0.0625f,
                              .causal = true,
                              .layer = 0,
                              .ggml_f16 = true});
    b.mark_output(out);
    CpuRig rig(CpuBackendOptions{.n_threads = threads,
                                 .isa = CpuIsa::kAvx2,
                                 .llamacpp_numerics = true,
                                 .llamacpp_fa_f16_arith = false});
    const auto& g = rig.load(b.finish(), 1, n_ctx);
    std::vector<int32_t> cl(n_cells);
    for (int c = 0; c < n_cells; ++c) cl[c] = c;
    const int32_t wl[2] = {0, n_cells};
    rig.fill_f32(g, "q", vq);
    rig.fill_f32(g, "k", vk);
    rig.fill_f32(g, "v", vv);
    rig.fill_i32(g, "cells", cl);
    rig.fill_i32(g, "win", wl);
    ASSERT_TRUE(rig.run(g).ok());
    const auto got = rig.read(g, out);
    for (int h = 0; h < nh; ++h) {
      const Part whole = walk(h, 0, n_cells);
      std::vector<float> want(hd);
      if (threads == 1) {
        for (int i = 0; i < hd; ++i) want[i] = fp16_to_fp32(whole.acc[i]) * (1.0f / whole.l);
      } else {
        const Part a = walk(h, 0, 256), c = walk(h, 256, n_cells);
        const float mm = std::fmax(a.m, c.m);
        const float sa = std::exp(a.m - mm), sc = std::exp(c.m - mm);
        const float l = std::fma(a.l, sa, c.l * sc);
        for (int i = 0; i < hd; ++i) {
          want[i] = std::fma(fp16_to_fp32(a.acc[i]), sa, fp16_to_fp32(c.acc[i]) * sc) * (1.0f / l);
          differ += want[i] != fp16_to_fp32(whole.acc[i]) * (1.0f / whole.l);
        }
      }
      for (int i = 0; i < hd; ++i) {
        ASSERT_EQ(fp32_to_bits(got[h * hd + i]), fp32_to_bits(want[i]))
            << "threads " << threads << " h " << h << " i " << i;
      }
    }
  }
  EXPECT_GT(differ, 0);  // the split is another order than the one walk
}

TEST(Attention, WindowRunsAndLoudBounds) {
  CpuRig rig(2);
  AttnGraph ag;
  const int nt = 2;
  const auto& g = attn_graph(rig, nt, 2, 1, &ag);
  rig.fill_f32(g, "q", random_floats(nt * 32, 1));
  rig.fill_f32(g, "k", random_floats(nt * 16, 2));
  rig.fill_f32(g, "v", random_floats(nt * 16, 3));
  const int32_t cells[2] = {5, 160};  // 160 == n_ctx: out of range
  const int32_t win[8] = {0, 6, 0, 0, 0, 3, 5, 1};
  rig.fill_i32(g, "cells", cells);
  rig.fill_i32(g, "win", win);
  Status st = rig.run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("cell 160"), std::string::npos) << st.error().message;
  const int32_t ok_cells[2] = {5, 6};
  const int32_t bad_win[8] = {0, 6, 0, 0, 150, 11, 0, 0};
  rig.fill_i32(g, "cells", ok_cells);
  rig.fill_i32(g, "win", bad_win);
  st = rig.run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("window run 0 of query 1"), std::string::npos)
      << st.error().message;
  rig.fill_i32(g, "win", win);
  st = rig.run(g);
  EXPECT_TRUE(st.ok()) << st.error().message;
}

}  // namespace
}  // namespace minfer::backend::cpu
