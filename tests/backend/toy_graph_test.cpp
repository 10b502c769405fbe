// Stage 11+12 tests (execution, end to end): the toy transformer (tests/graph) run by
// the Scheduler on the CPU backend. Bars: finite logits; prefill-then-last-row equals
// token-by-token decode bitwise (ARCHITECTURE §2.8); thread counts bitwise equal.
#include <gtest/gtest.h>

#include <cmath>

#include "../graph/toy_transformer.h"
#include "graph/input_names.h"
#include "harness.h"

namespace minfer::backend::cpu {
namespace {

using testing::CpuRig;

void bind_toy_weights(CpuRig& rig, const graph::ComputeGraph& g) {
  uint32_t seed = 100;
  for (const graph::Node& n : g.nodes()) {
    if (n.op != graph::Op::kWeight) continue;
    // norms near 1, matrices small so activations stay in range over the layers
    const bool norm = n.dtype == DType::kF32;
    auto v = testing::random_floats(static_cast<size_t>(n.shape.n_elements()), seed++,
                                    norm ? 0.8f : -0.25f, norm ? 1.2f : 0.25f);
    rig.bind(n.name, testing::encode(n.dtype, v));
  }
}

// Runs tokens [0, n) as one prefill (n_out = 1) or as n decode steps; returns the
// logits of the last token.
std::vector<float> run_toy(int32_t threads, const std::vector<int32_t>& tokens, bool one_by_one,
                           DType wtype) {
  CpuRig rig(threads);
  testing::ToyConfig cfg;
  cfg.wtype = wtype;
  const uint32_t n_ctx = 64;
  auto step = [&](uint32_t n_tok, uint32_t first) -> std::vector<float> {
    graph::GraphParams p = testing::toy_params(n_tok, n_ctx);
    auto r = rig.cache().get_or_build(p, [&](const graph::GraphParams& gp) {
      graph::ComputeGraph g = testing::build_toy(gp, cfg);
      EXPECT_TRUE(rig.sched().assign_backends(g).ok());
      return g;
    });
    EXPECT_TRUE(r.ok()) << r.error().message;
    const graph::ComputeGraph& g = **r;
    bind_toy_weights(rig, g);
    std::vector<int32_t> ids, pos, win;
    for (uint32_t i = 0; i < n_tok; ++i) {
      ids.push_back(tokens[first + i]);
      pos.push_back(static_cast<int32_t>(first + i));
      win.push_back(0);
      win.push_back(static_cast<int32_t>(first + i + 1));
    }
    rig.fill_i32(g, graph::kInputTokenIds, ids);
    rig.fill_i32(g, graph::kInputPositions, pos);
    rig.fill_i32(g, graph::kInputKvCells, pos);
    rig.fill_i32(g, graph::kInputKvWindow, win);
    if (n_tok > 1) {
      const int32_t tail[1] = {static_cast<int32_t>(n_tok - 1)};
      rig.fill_i32(g, graph::kInputTailIds, tail);
    }
    Status st = rig.run(g);
    EXPECT_TRUE(st.ok()) << st.error().message;
    return rig.read(g, g.outputs()[0]);
  };
  if (!one_by_one) return step(static_cast<uint32_t>(tokens.size()), 0);
  std::vector<float> last;
  for (uint32_t i = 0; i < tokens.size(); ++i) last = step(1, i);
  return last;
}

TEST(ToyGraph, PrefillEqualsDecodeAndThreadCounts_bitwise) {
  const std::vector<int32_t> tokens = {3, 17, 42, 5, 88, 1, 60};
  for (DType wtype : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(dtype_name(wtype)));
    std::vector<float> prefill1 = run_toy(1, tokens, false, wtype);
    ASSERT_EQ(prefill1.size(), 96u);
    for (float v : prefill1) ASSERT_TRUE(std::isfinite(v));
    float spread = 0.0f;
    for (float v : prefill1) spread = std::max(spread, std::fabs(v - prefill1[0]));
    EXPECT_GT(spread, 0.0f);  // not a constant (all-zero) output
    std::vector<float> prefill3 = run_toy(3, tokens, false, wtype);
    EXPECT_EQ(0, std::memcmp(prefill1.data(), prefill3.data(), prefill1.size() * 4));
    std::vector<float> decode2 = run_toy(2, tokens, true, wtype);
    EXPECT_EQ(0, std::memcmp(prefill1.data(), decode2.data(), prefill1.size() * 4));
  }
}

}  // namespace
}  // namespace minfer::backend::cpu
