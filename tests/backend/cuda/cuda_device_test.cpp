// Tests (CUDA backend, on a GPU): each kernel against the CPU kernel on random data over
// the shapes of SmolLM2-135M and Qwen2.5-0.5B, a whole model's greedy tokens against the
// CPU with every layer on the GPU, and CUDA-graph replay against direct launches. Each
// test skips with "no CUDA device" where the runtime finds none (they compile, link and
// skip on a machine without a GPU or driver); the registry test runs everywhere.
// Bars: "bitwise" where the GPU rounds exactly where the CPU does (copies, one product or
// sum per element, dequantization); kNmseReordered where a sum runs in another fixed
// order (a warp's butterfly, a block's tree) or CUDA's expf / sinf / cosf / tanhf replace
// glibc's and the CPU's polynomial (a few ulp per element), as llama.cpp's
// test-backend-ops bounds its backends against its CPU by NMSE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/registry.h"
#include "engine/engine.h"
#include "graph/builder.h"
#include "quant/quant.h"

namespace minfer::backend::cuda {
namespace {

using graph::ComputeGraph;
using graph::GraphBuilder;
using graph::Node;
using graph::NodeId;
using graph::Op;

// NMSE = Σ(gpu − cpu)² / Σ cpu²: a few ulp per element is ~1e-13; 1e-10 leaves room for
// the rare element whose reordered sum rounds the other way, and fails any wrong index.
constexpr double kNmseReordered = 1e-10;

#define REQUIRE_GPU()                                                            \
  if (!device_count().ok()) {                                                    \
    GTEST_SKIP() << "no CUDA device (" << device_count().error().message << ")"; \
  }

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> as_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> as_bytes(const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(int32_t));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> encode(DType type, const std::vector<float>& values) {
  auto rb = quant::row_bytes(type, values.size());
  EXPECT_TRUE(rb.ok());
  std::vector<uint8_t> out(*rb);
  EXPECT_TRUE(quant::quantize(type, values, out).ok());
  return out;
}

using Leaves = std::map<NodeId, std::vector<uint8_t>>;
using Outputs = std::map<NodeId, std::vector<uint8_t>>;

// Runs every node of `g` on `b` alone: one buffer of b's memory per node (kv_store
// aliases its region), the leaves set from `leaves`, the outputs read back with get.
Result<Outputs> run_on(Backend& b, const ComputeGraph& g, const Leaves& leaves) {
  std::vector<std::byte*> ptr(g.size(), nullptr);
  std::vector<std::pair<void*, uint64_t>> owned;
  auto free_all = [&] {
    for (auto& [p, n] : owned) b.free_buffer(p, n);
  };
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op == Op::kKvStore) {
      ptr[i] = ptr[static_cast<size_t>(n.src[0])];
      continue;
    }
    const uint64_t bytes = graph::tensor_bytes(n.dtype, n.shape);
    auto p = b.alloc_buffer(bytes, 64);
    if (!p.ok()) {
      free_all();
      return p.error();
    }
    owned.emplace_back(*p, bytes);
    ptr[i] = static_cast<std::byte*>(*p);
  }
  Outputs out;
  Status st = Ok{};
  for (const auto& [id, bytes] : leaves) {
    if (st.ok()) st = b.set(ptr[static_cast<size_t>(id)], bytes.data(), bytes.size());
  }
  std::vector<NodeId> ids(g.size());
  for (size_t i = 0; i < g.size(); ++i) ids[i] = static_cast<NodeId>(i);
  if (st.ok()) st = b.execute(g, ids, NodeData{.ptr = ptr});
  if (st.ok()) st = b.synchronize();
  for (NodeId id : g.outputs()) {
    if (!st.ok()) break;
    const Node& n = g.node(id);
    std::vector<uint8_t> v(graph::tensor_bytes(n.dtype, n.shape));
    st = b.get(v.data(), ptr[static_cast<size_t>(id)], v.size());
    out[id] = std::move(v);
  }
  free_all();
  if (!st.ok()) return st.error();
  return out;
}

std::unique_ptr<CudaBackend> gpu(bool graphs = true) {
  auto b = CudaBackend::create({.device = 0, .id = 1, .graphs = graphs});
  EXPECT_TRUE(b.ok()) << (b.ok() ? "" : b.error().message);
  return b.ok() ? std::move(*b) : nullptr;
}
std::unique_ptr<cpu::CpuBackend> cpu_backend() {
  auto b = cpu::CpuBackend::create({.n_threads = 2});
  EXPECT_TRUE(b.ok());
  return std::move(*b);
}

std::vector<float> floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return den == 0.0 ? num : num / den;
}

// Runs `g` on the CPU and on the GPU; compares every output bitwise or within `bound`.
void compare(const ComputeGraph& g, const Leaves& leaves, double bound /* < 0: bitwise */) {
  auto c = cpu_backend();
  auto d = gpu();
  ASSERT_NE(d, nullptr);
  // The node set must be the GPU's (supports_op) before its results mean anything.
  for (const Node& n : g.nodes()) {
    if (n.is_leaf()) continue;
    std::vector<DType> dts;
    for (int k = 0; k < n.n_src; ++k) dts.push_back(g.node(n.src[k]).dtype);
    ASSERT_TRUE(d->supports_op(n, dts)) << n.name << " " << graph::op_name(n.op);
  }
  auto want = run_on(*c, g, leaves);
  ASSERT_TRUE(want.ok()) << want.error().message;
  auto got = run_on(*d, g, leaves);
  ASSERT_TRUE(got.ok()) << got.error().message;
  for (const auto& [id, w] : *want) {
    const std::vector<uint8_t>& o = got->at(id);
    ASSERT_EQ(o.size(), w.size());
    if (bound < 0) {
      const auto a = floats(o), b = floats(w);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0)
            << g.node(id).name << " element " << i << ": gpu " << a[i] << " cpu " << b[i];
      }
    } else {
      EXPECT_LE(nmse(floats(o), floats(w)), bound) << g.node(id).name;
    }
  }
}

const DType kTableTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                             DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0};

TEST(CudaOps, GetRowsOfEveryTableTypeEqualsTheCpu_bitwise) {
  REQUIRE_GPU();
  for (DType t : kTableTypes) {
    SCOPED_TRACE(dtype_name(t));
    GraphBuilder b;
    const NodeId table = b.input("table", t, {576, 300});  // SmolLM2's n_embd
    const NodeId ids = b.input("ids", DType::kI32, {7});
    b.mark_output(b.get_rows(table, ids));
    const ComputeGraph g = b.finish();
    compare(g,
            {{table, encode(t, random_floats(576 * 300, 1))},
             {ids, as_bytes(std::vector<int32_t>{0, 299, 5, 5, 17, 123, 42})}},
            -1);
  }
}

TEST(CudaOps, AddMulScaleWithBroadcastEqualTheCpu_bitwise) {
  REQUIRE_GPU();
  GraphBuilder b;
  const NodeId x = b.input("x", DType::kF32, {896, 7});  // Qwen2.5-0.5B's n_embd
  const NodeId y = b.input("y", DType::kF32, {896, 7});
  const NodeId w = b.input("w", DType::kF32, {896});
  b.mark_output(b.add(x, y));
  b.mark_output(b.mul(x, w));
  b.mark_output(b.scale(x, 0.125f));
  const ComputeGraph g = b.finish();
  compare(g,
          {{x, as_bytes(random_floats(896 * 7, 2))},
           {y, as_bytes(random_floats(896 * 7, 3))},
           {w, as_bytes(random_floats(896, 4))}},
          -1);
}

TEST(CudaOps, RmsNormSoftmaxSiluSwigluGegluGeluTanhWithinNmse1e10) {
  REQUIRE_GPU();
  GraphBuilder b;
  const NodeId x = b.input("x", DType::kF32, {896, 7});
  const NodeId w = b.input("w", DType::kF32, {896});
  const NodeId gate = b.input("gate", DType::kF32, {4864, 3});  // Qwen2.5-0.5B's n_ff
  const NodeId up = b.input("up", DType::kF32, {4864, 3});
  b.mark_output(b.rms_norm(x, 1e-6f));
  b.mark_output(b.mul(b.rms_norm(x, 1e-5f), w));
  b.mark_output(b.softmax(x, 0.5f));
  b.mark_output(b.silu(gate));
  b.mark_output(b.swiglu(gate, up));
  b.mark_output(b.geglu(gate, up));
  b.mark_output(b.gelu(gate));
  b.mark_output(b.tanh(x));
  const ComputeGraph g = b.finish();
  compare(g,
          {{x, as_bytes(random_floats(896 * 7, 5, -4, 4))},
           {w, as_bytes(random_floats(896, 6))},
           {gate, as_bytes(random_floats(4864 * 3, 7, -6, 6))},
           {up, as_bytes(random_floats(4864 * 3, 8))}},
          kNmseReordered);
}

TEST(CudaOps, RopeNormalAndNeoxWithinNmse1e10) {
  REQUIRE_GPU();
  for (graph::RopeMode mode : {graph::RopeMode::kNormal, graph::RopeMode::kNeox}) {
    GraphBuilder b;
    const NodeId x = b.input("x", DType::kF32, {64, 14, 5});
    const NodeId pos = b.input("pos", DType::kI32, {5});
    b.mark_output(b.rope(x, pos, {.mode = mode, .n_rot = 64, .freq_base = 1e6f}));
    const ComputeGraph g = b.finish();
    compare(g,
            {{x, as_bytes(random_floats(64 * 14 * 5, 9))},
             {pos, as_bytes(std::vector<int32_t>{0, 1, 77, 4095, 30000})}},
            kNmseReordered);
  }
}

// A layer's KV store then attention over windows that span runs and chunk boundaries
// (GQA 14 / 2 heads of 64, Qwen2.5-0.5B), with f32 and f16 cells; a padding row (cell
// −1, empty window) included.
TEST(CudaOps, KvStoreEqualsTheCpu_bitwiseAndAttentionWithinNmse1e10) {
  REQUIRE_GPU();
  for (DType cell : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(dtype_name(cell));
    constexpr int64_t kCells = 256, kTok = 3, kRow = 128;
    GraphBuilder b;
    const NodeId kr = b.kv_region(0, graph::KvKind::kK, cell, {kRow, kCells});
    const NodeId vr = b.kv_region(0, graph::KvKind::kV, cell, {kRow, kCells});
    const NodeId krows = b.input("k_rows", DType::kF32, {kRow, kTok});
    const NodeId vrows = b.input("v_rows", DType::kF32, {kRow, kTok});
    const NodeId cells = b.input("cells", DType::kI32, {kTok});
    const NodeId q = b.input("q", DType::kF32, {64, 14, kTok});
    const NodeId win = b.input("win", DType::kI32, {4, kTok});
    const NodeId ks = b.kv_store(kr, krows, cells);
    const NodeId vs = b.kv_store(vr, vrows, cells);
    b.mark_output(ks);
    b.mark_output(
        b.attention(q, ks, vs, win, {.n_head = 14, .n_head_kv = 2, .scale = 0.125f, .layer = 0}));
    const ComputeGraph g = b.finish();
    const int64_t region_bytes = kRow * kCells * (cell == DType::kF16 ? 2 : 4);
    std::vector<float> kinit = random_floats(static_cast<size_t>(kRow * kCells), 10);
    std::vector<float> vinit = random_floats(static_cast<size_t>(kRow * kCells), 11);
    auto region = [&](const std::vector<float>& v) {
      return cell == DType::kF16 ? encode(DType::kF16, v) : as_bytes(v);
    };
    ASSERT_EQ(static_cast<int64_t>(region(kinit).size()), region_bytes);
    compare(g,
            {{kr, region(kinit)},
             {vr, region(vinit)},
             {krows, as_bytes(random_floats(kRow * kTok, 12))},
             {vrows, as_bytes(random_floats(kRow * kTok, 13))},
             {cells, as_bytes(std::vector<int32_t>{70, 200, -1})},
             {q, as_bytes(random_floats(64 * 14 * kTok, 14, -3, 3))},
             // runs (first, n): 71 cells then 30 (chunks cut inside the first run);
             // one run of 201; the padding row's empty window
             {win, as_bytes(std::vector<int32_t>{0, 71, 150, 30, 0, 201, 0, 0, 0, 0, 0, 0})}},
            kNmseReordered);
  }
}

// A long window (1500 cells of a 2048-cell f16 region: 3 splits of 512) for n_tok query
// rows that all see it; the K/V stores write nothing (cell −1).
struct LongWindow {
  ComputeGraph g;
  Leaves leaves;
};
LongWindow long_window(int64_t n_tok) {
  constexpr int64_t kCells = 2048, kRow = 128;
  GraphBuilder b;
  const NodeId kr = b.kv_region(0, graph::KvKind::kK, DType::kF16, {kRow, kCells});
  const NodeId vr = b.kv_region(0, graph::KvKind::kV, DType::kF16, {kRow, kCells});
  const NodeId rows = b.input("rows", DType::kF32, {kRow, 1});
  const NodeId cells = b.input("cells", DType::kI32, {1});
  const NodeId q = b.input("q", DType::kF32, {64, 14, n_tok});
  const NodeId win = b.input("win", DType::kI32, {2, n_tok});
  const NodeId ks = b.kv_store(kr, rows, cells);
  const NodeId vs = b.kv_store(vr, rows, cells);
  b.mark_output(
      b.attention(q, ks, vs, win, {.n_head = 14, .n_head_kv = 2, .scale = 0.125f, .layer = 0}));
  LongWindow out{.g = b.finish()};
  std::vector<int32_t> w;
  for (int64_t t = 0; t < n_tok; ++t) w.insert(w.end(), {0, 1500});
  // row 0's query is the same in every batch; the others differ
  std::vector<float> qs = random_floats(static_cast<size_t>(64 * 14 * n_tok), 21, -3, 3);
  const std::vector<float> q0 = random_floats(64 * 14, 22, -3, 3);
  std::copy(q0.begin(), q0.end(), qs.begin());
  out.leaves = {{kr, encode(DType::kF16, random_floats(kRow * kCells, 23))},
                {vr, encode(DType::kF16, random_floats(kRow * kCells, 24))},
                {rows, as_bytes(random_floats(kRow, 25))},
                {cells, as_bytes(std::vector<int32_t>{-1})},
                {q, as_bytes(qs)},
                {win, as_bytes(w)}};
  return out;
}

// A decode row (14 (token, head) rows: one block per split, then the combine kernel)
// against the CPU, and against the same row in a batch of 20 tokens (280 rows: one block
// per row walking its splits) — the two launch modes run the same operations.
TEST(CudaOps, LongWindowAttentionWithinNmse1e10AndTheSameBitsAloneOrInABatch) {
  REQUIRE_GPU();
  ASSERT_GT(attention_split_bytes(1, 14, 64, 2048, 1), 0u);   // split blocks
  ASSERT_EQ(attention_split_bytes(20, 14, 64, 2048, 1), 0u);  // one block per row
  const LongWindow one = long_window(1);
  compare(one.g, one.leaves, kNmseReordered);
  auto d = gpu();
  ASSERT_NE(d, nullptr);
  auto alone = run_on(*d, one.g, one.leaves);
  ASSERT_TRUE(alone.ok()) << alone.error().message;
  const LongWindow many = long_window(20);
  auto batch = run_on(*d, many.g, many.leaves);
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  const auto a = floats(alone->begin()->second);
  const auto b = floats(batch->begin()->second);
  ASSERT_EQ(a.size(), 64u * 14);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                              DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

bool super_blocks(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

TEST(CudaOps, MulMatOfEveryWeightTypeWithinNmse1e10) {
  REQUIRE_GPU();
  for (DType t : kWeightTypes) {
    for (int64_t m : {1, 5}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " m=" + std::to_string(m));
      // K = 896 (Qwen2.5-0.5B's n_embd); 1536 (SmolLM2's n_ff) for the 256-element K-quants
      const int64_t k = super_blocks(t) ? 1536 : 896;
      GraphBuilder b;
      const NodeId w = b.input("w", t, {k, 320});
      const NodeId x = b.input("x", DType::kF32, {k, m});
      b.mark_output(b.mul_mat(w, x));
      const ComputeGraph g = b.finish();
      compare(g,
              {{w, encode(t, random_floats(static_cast<size_t>(k * 320), 15))},
               {x, as_bytes(random_floats(static_cast<size_t>(k * m), 16))}},
              kNmseReordered);
    }
  }
}

// Invariant 8: a row's product is the same bits decoded alone or prefilled in a batch.
TEST(CudaOps, MulMatRowIsBitwiseTheSameAloneOrInABatch) {
  REQUIRE_GPU();
  auto d = gpu();
  ASSERT_NE(d, nullptr);
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t k = super_blocks(t) ? 1536 : 896;
    const auto wbytes = encode(t, random_floats(static_cast<size_t>(k * 320), 17));
    const auto xs = random_floats(static_cast<size_t>(k * 6), 18);
    std::vector<std::vector<float>> results;
    for (int64_t m : {1, 6}) {
      GraphBuilder b;
      const NodeId w = b.input("w", t, {k, 320});
      const NodeId x = b.input("x", DType::kF32, {k, m});
      b.mark_output(b.mul_mat(w, x));
      const ComputeGraph g = b.finish();
      auto r = run_on(
          *d, g,
          {{w, wbytes}, {x, as_bytes(std::vector<float>(xs.begin(), xs.begin() + 896 * m))}});
      ASSERT_TRUE(r.ok()) << r.error().message;
      results.push_back(floats(r->begin()->second));
    }
    ASSERT_EQ(std::memcmp(results[0].data(), results[1].data(), 320 * sizeof(float)), 0);
  }
}

TEST(CudaOps, AnOutOfRangeRowIdIsAnErrorNamingTheNode) {
  REQUIRE_GPU();
  auto d = gpu();
  ASSERT_NE(d, nullptr);
  GraphBuilder b;
  const NodeId table = b.input("table", DType::kF32, {64, 10});
  const NodeId ids = b.input("ids", DType::kI32, {2});
  const NodeId rows = b.get_rows(table, ids);
  b.name(rows, "inp_embd");
  b.mark_output(rows);
  const ComputeGraph g = b.finish();
  auto r = run_on(
      *d, g,
      {{table, as_bytes(random_floats(640, 19))}, {ids, as_bytes(std::vector<int32_t>{3, 10})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("inp_embd"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("row id out of range"), std::string::npos);
}

// ---- the registry ----------------------------------------------------------------

TEST(CudaDevices, ListedExactlyWhenTheRuntimeReportsAGpu) {
  const auto devices = Registry::global().devices();
  const auto n_cuda = std::count_if(devices.begin(), devices.end(), [](const DeviceInfo& d) {
    return d.name.rfind("cuda", 0) == 0;
  });
  Result<int> n = device_count();
  if (!n.ok()) {
    EXPECT_EQ(n_cuda, 0) << "a CUDA device is listed but the runtime reports none";
    return;
  }
  EXPECT_EQ(n_cuda, *n);
  for (const DeviceInfo& d : devices) {
    if (d.name.rfind("cuda", 0) == 0) {
      EXPECT_FALSE(d.host_memory);
      EXPECT_GT(d.memory_bytes, 0u);
    }
  }
}

// ---- a whole model ----------------------------------------------------------------

const std::string kSmol = std::string(MINFER_CACHE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Greedy run of a 9-token prompt then 24 decode steps: every step's logits and token.
// With `forced`, step i feeds forced[i] instead of its own argmax (teacher forcing: the
// logits of two backends stay comparable after a near-tie picks another token).
struct GreedyRun {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};

GreedyRun greedy(const std::vector<std::string>& devices, int32_t ngl,
                 const std::string& model = kSmol, const std::vector<int32_t>& forced = {}) {
  GreedyRun out;
  engine::EngineOptions o{.n_threads = 2};
  o.devices = devices;
  o.n_gpu_layers = ngl;
  auto e = engine::Engine::open(model, o);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  if (!e.ok()) return out;
  Status st = (*e)->set_context({.n_cells = 128, .n_seq_max = 1});
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  const int32_t prompt[] = {1, 504, 3458, 282, 4649, 314, 253, 1345, 30};
  engine::Batch b;
  for (int32_t i = 0; i < 9; ++i) b.add(prompt[i], 0, i, i == 8);
  auto r = (*e)->decode(b);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) return out;
  std::span<const float> row = r->row(0);
  for (int32_t pos = 9; pos < 9 + 24; ++pos) {
    out.logits.emplace_back(row.begin(), row.end());
    const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.tokens.push_back(best);
    const int32_t next = forced.empty() ? best : forced[static_cast<size_t>(pos - 9)];
    engine::Batch d;
    d.add(next, 0, pos, true);
    auto s = (*e)->decode(d);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (!s.ok()) return out;
    row = s->row(0);
  }
  return out;
}

TEST(CudaModel, SmolLM2GreedyTokensWithEveryLayerOnTheGpuEqualTheCpus) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " not present";
  const GreedyRun cpu = greedy({}, 0);
  const GreedyRun dev = greedy({"cuda0"}, 99);
  ASSERT_EQ(dev.tokens, cpu.tokens);
  for (size_t i = 0; i < cpu.logits.size(); ++i) {
    EXPECT_LE(nmse(dev.logits[i], cpu.logits[i]), 1e-6) << "step " << i;
  }
}

// The test fixtures over the op mixes the kernels cover: Qwen2.5-0.5B-shaped (NeoX rope,
// QKV bias, GQA 14/2) in Q4_0, Q8_0, F16 and a Q4_K_M mix; llama-shaped Q5_K_M and Q6_K;
// Gemma 3 270M Q4_K_M (GeGLU). Random-weight fixtures have near-ties, so the GPU run is
// fed the CPU's tokens and its logits are compared step by step.
TEST(CudaModel, FixtureLogitsWithEveryLayerOnTheGpuWithinNmse1e6) {
  REQUIRE_GPU();
  const std::string dir = std::string(MINFER_CACHE_DIR) + "/models/";
  int ran = 0;
  for (const char* name :
       {"minfer-fixture-qwen2.5-0.5b-q4_0.gguf", "minfer-fixture-qwen2.5-0.5b-q8_0.gguf",
        "minfer-fixture-qwen2.5-0.5b-f16.gguf", "minfer-fixture-qwen2.5-0.5b-q4_k_m.gguf",
        "minfer-fixture-llama-0.1b-q5_k_m.gguf", "minfer-fixture-llama-0.1b-q6_k.gguf",
        "gemma-3-270m-q4_k_m.gguf"}) {
    const std::string path = dir + name;
    if (!std::filesystem::exists(path)) continue;
    SCOPED_TRACE(name);
    ++ran;
    const GreedyRun cpu = greedy({}, 0, path);
    const GreedyRun dev = greedy({"cuda0"}, 99, path, cpu.tokens);
    ASSERT_EQ(dev.logits.size(), cpu.logits.size());
    for (size_t i = 0; i < cpu.logits.size(); ++i) {
      EXPECT_LE(nmse(dev.logits[i], cpu.logits[i]), 1e-6) << "step " << i;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no fixture in " << dir << " (tools/make_test_models.sh)";
}

TEST(CudaModel, GraphReplayGivesTheDirectLaunchesLogits_bitwise) {
  REQUIRE_GPU();
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " not present";
  // A second registration of device 0 with graphs off (MINFER_NO_CUDA_GRAPHS=1's backend).
  ASSERT_TRUE(Registry::global()
                  .add(DeviceFactory{
                      .info = {.name = "cuda0-direct", .description = "test", .host_memory = false},
                      .create = [](graph::BackendId id) -> Result<std::unique_ptr<Backend>> {
                        MINFER_TRY(std::unique_ptr<CudaBackend> b,
                                   CudaBackend::create({.device = 0, .id = id, .graphs = false}));
                        return std::unique_ptr<Backend>(std::move(b));
                      }})
                  .ok());
  const GreedyRun replay = greedy({"cuda0"}, 99);
  const GreedyRun direct = greedy({"cuda0-direct"}, 99);
  Registry::global().remove("cuda0-direct");
  ASSERT_EQ(replay.logits.size(), direct.logits.size());
  for (size_t i = 0; i < replay.logits.size(); ++i) {
    ASSERT_EQ(std::memcmp(replay.logits[i].data(), direct.logits[i].data(),
                          replay.logits[i].size() * sizeof(float)),
              0)
        << "step " << i;
  }
}

}  // namespace
}  // namespace minfer::backend::cuda
