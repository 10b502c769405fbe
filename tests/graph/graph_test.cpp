// Stage 7 tests (graph IR): builder shapes and names, fusion, DOT/JSON export.
// Bars: exact node counts, names and shapes — no tolerances involved.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "graph/builder.h"
#include "graph/export.h"
#include "graph/fusion.h"
#include "toy_transformer.h"

namespace minfer::graph {
namespace {

using testing::build_toy;
using testing::toy_params;

int count_op(const ComputeGraph& g, Op op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(GraphBuilder, ToyGraphIsWellFormedWithNamedIntermediatesAndShapes) {
  GraphParams p = toy_params(7);
  p.cparams.fusion.rms_norm_mul = false;
  ComputeGraph g = build_toy(p);
  std::string why;
  ASSERT_TRUE(g.well_formed(&why)) << why;
  EXPECT_EQ(g.uid(), 0u);            // not cached yet
  EXPECT_EQ(g.inputs().size(), 5u);  // token_ids, positions, kv_cells, kv_window, tail_ids
  ASSERT_EQ(g.outputs().size(), 1u);
  const Node& logits = g.node(g.outputs()[0]);
  EXPECT_EQ(logits.name, "result_output");
  EXPECT_EQ(logits.shape, (Shape{96, 1}));  // [n_vocab, n_out]
  auto norm = g.find("attn_norm-1");
  ASSERT_TRUE(norm);
  EXPECT_EQ(g.node(*norm).layer, 1);
  EXPECT_EQ(g.node(*norm).shape, (Shape{64, 7}));
  auto q = g.find("Qcur-0");
  ASSERT_TRUE(q);
  EXPECT_EQ(g.node(*q).shape, (Shape{16, 4, 7}));
  EXPECT_EQ(g.node(*q).params.rope_mode, RopeMode::kNeox);
  EXPECT_EQ(g.node(*q).params.n_rot, 16);
  EXPECT_EQ(count_op(g, Op::kKvRegion), 4);
  EXPECT_EQ(count_op(g, Op::kKvStore), 4);
  EXPECT_EQ(count_op(g, Op::kAttention), 2);
  EXPECT_EQ(count_op(g, Op::kRmsNorm), 5);
}

TEST(GraphBuilder, DecodeGraphHasNoTailInput) {
  ComputeGraph g = build_toy(toy_params(1));
  EXPECT_FALSE(g.find_input(kInputTailIds));
  EXPECT_EQ(g.inputs().size(), 4u);
}

TEST(GraphBuilder, MulMatAcceptsQuantWeightsAndBroadcastsShapes) {
  GraphBuilder b;
  NodeId w = b.weight("w", DType::kQ4_K, {256, 10});  // Q4_K [256, 10]
  NodeId x = b.input("x", DType::kF32, {256, 3});     // F32 [256, 3]
  NodeId y = b.mul_mat(w, x);                         // F32 [10, 3]
  NodeId bias = b.input("bias", DType::kF32, {10});   // F32 [10]
  NodeId z = b.add(y, bias);                          // F32 [10, 3]
  b.mark_output(z);
  ComputeGraph g = b.finish();
  EXPECT_EQ(g.node(y).shape, (Shape{10, 3}));
  EXPECT_EQ(g.node(z).shape, (Shape{10, 3}));
  EXPECT_EQ(tensor_bytes(DType::kQ4_K, Shape{256, 10}), 1440u);  // 10 rows × 144 B
}

TEST(GraphBuilderDeathTest, ShapeMismatchIsABrokenInvariant) {
  GraphBuilder b;
  NodeId a = b.input("a", DType::kF32, {8, 2});  // F32 [8, 2]
  NodeId c = b.input("c", DType::kF32, {4, 2});  // F32 [4, 2]
  EXPECT_DEATH(b.add(a, c), "does not broadcast");
}

TEST(Fusion, RmsNormMulFusesEveryNormAndKeepsTheMulName) {
  GraphParams p = toy_params(7);
  p.cparams.fusion.rms_norm_mul = false;
  ComputeGraph unfused = build_toy(p);
  p.cparams.fusion.rms_norm_mul = true;
  ComputeGraph fused = build_toy(p);
  EXPECT_EQ(count_op(fused, Op::kRmsNorm), 0);
  EXPECT_EQ(count_op(fused, Op::kRmsNormMul), 5);  // 2 per layer + output norm
  EXPECT_EQ(fused.size(), unfused.size() - 5);
  std::string why;
  EXPECT_TRUE(fused.well_formed(&why)) << why;
  auto n = fused.find("attn_norm-0");
  ASSERT_TRUE(n);
  EXPECT_EQ(fused.node(*n).op, Op::kRmsNormMul);
  EXPECT_EQ(fused.node(*n).params.eps, 1e-5f);
  // the fused node reads x (the embedding) and the norm weight directly
  EXPECT_EQ(fused.node(fused.node(*n).src[0]).name, "inp_embd");
  EXPECT_EQ(fused.node(fused.node(*n).src[1]).name, "blk.0.attn_norm.weight");
  // outputs and inputs survive renumbering
  EXPECT_EQ(fused.node(fused.outputs()[0]).name, "result_output");
  EXPECT_EQ(fused.inputs().size(), unfused.inputs().size());
}

TEST(Fusion, NormWithTwoConsumersOrUnsupportedBackendIsNotFused) {
  GraphBuilder b;
  NodeId x = b.input("x", DType::kF32, {8, 2});  // F32 [8, 2]
  NodeId w = b.weight("w", DType::kF32, {8});    // F32 [8]
  NodeId n = b.rms_norm(x, 1e-6f);               // F32 [8, 2]
  NodeId m = b.mul(n, w);                        // F32 [8, 2]
  NodeId s = b.add(m, n);                        // F32 [8, 2] (second reader of n)
  b.mark_output(s);
  ComputeGraph g = b.finish();
  EXPECT_EQ(run_fusion(g, FusionFlags{}).rms_norm_mul, 0);

  GraphBuilder b2;
  NodeId x2 = b2.input("x", DType::kF32, {8, 2});  // F32 [8, 2]
  NodeId w2 = b2.weight("w", DType::kF32, {8});    // F32 [8]
  b2.mark_output(b2.mul(b2.rms_norm(x2, 1e-6f), w2));
  ComputeGraph g2 = b2.finish();
  FusionSupport none{[](BackendId, Op) { return false; }};
  EXPECT_EQ(run_fusion(g2, FusionFlags{}, none).rms_norm_mul, 0);
  EXPECT_EQ(run_fusion(g2, FusionFlags{}).rms_norm_mul, 1);
}

TEST(Export, JsonListsEveryNodeWithShapesAndParams) {
  ComputeGraph g = build_toy(toy_params(3));
  auto j = nlohmann::json::parse(to_json(g));
  ASSERT_EQ(j["nodes"].size(), g.size());
  EXPECT_EQ(j["outputs"][0], g.outputs()[0]);
  const auto& q = j["nodes"][*g.find("Qcur-1")];
  EXPECT_EQ(q["op"], "rope");
  EXPECT_EQ(q["shape"], nlohmann::json::array({16, 4, 3}));
  EXPECT_EQ(q["params"]["mode"], "neox");
  EXPECT_EQ(q["layer"], 1);
}

TEST(Export, DotHasOneLinePerNodeAndEdge) {
  ComputeGraph g = build_toy(toy_params(3));
  std::string dot = to_dot(g);
  size_t edges = 0, pos = 0;
  while ((pos = dot.find(" -> ", pos)) != std::string::npos) edges++, pos++;
  size_t want = 0;
  for (const Node& n : g.nodes()) want += static_cast<size_t>(n.n_src);
  EXPECT_EQ(edges, want);
  EXPECT_NE(dot.find("result_output"), std::string::npos);
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
}

TEST(Params, ValidateRejectsImpossibleParams) {
  GraphParams p = toy_params(4, 8);
  EXPECT_TRUE(validate(p).ok());
  p.n_out = 5;
  EXPECT_FALSE(validate(p).ok());
  p = toy_params(9, 8);
  EXPECT_FALSE(validate(p).ok());  // more tokens than the context holds
  p = toy_params(0, 8);
  EXPECT_FALSE(validate(p).ok());
  EXPECT_NE(to_string(toy_params(1)).find("gtype=decode"), std::string::npos);
}

}  // namespace
}  // namespace minfer::graph
