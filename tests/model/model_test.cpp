// Stage 6 tests (weights + topology): hparams from metadata, weight binding errors
// (unknown architecture, missing tensor, wrong shape, refused rope scaling), and the
// builder contract — deterministic in GraphParams, tail rows only in prefill, named
// intermediates, per-architecture differences (bias, rope mode, tied output).
#include "model/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "graph/cache.h"
#include "graph/input_names.h"
#include "model/layers.h"
#include "tiny_model.h"

namespace minfer::model {
namespace {

using testing::TempFile;
using testing::TinySpec;
using testing::write_tiny_model;

graph::GraphParams params(uint32_t n_tokens, uint32_t n_out, uint32_t n_ctx = 64) {
  graph::GraphParams p;
  p.n_tokens = n_tokens;
  p.n_out = n_out;
  p.gtype = n_tokens == 1 ? graph::GraphType::kDecode : graph::GraphType::kPrefill;
  p.cparams.n_ctx = n_ctx;
  return p;
}

struct Loaded {
  gguf::Model file;
  std::unique_ptr<Model> model;
};

// Writes `spec`, opens it and loads the model; the Result carries the load error.
Result<Loaded> load(const TinySpec& spec, const std::string& stem) {
  TempFile f(stem);
  MINFER_TRY_STATUS(write_tiny_model(f.path, spec));
  MINFER_TRY(gguf::Model file, gguf::Model::open(f.path));
  Loaded l{std::move(file), nullptr};
  MINFER_TRY(l.model, Model::load(l.file));
  return l;
}

std::string load_error(const TinySpec& spec, const std::string& stem) {
  auto r = load(spec, stem);
  EXPECT_FALSE(r.ok()) << "expected " << stem << " to fail";
  return r.ok() ? std::string() : r.error().message;
}

size_t count_op(const graph::ComputeGraph& g, graph::Op op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(HParams, ReadFromMetadataWithDefaults) {
  auto l = load(TinySpec{.n_embd = 64, .n_layer = 3, .n_head = 4, .n_head_kv = 2}, "hp");
  ASSERT_TRUE(l.ok()) << l.error().message;
  const HParams& hp = l->model->hparams();
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.n_layer, 3u);
  EXPECT_EQ(hp.n_embd, 64u);
  EXPECT_EQ(hp.n_ff, 128u);
  EXPECT_EQ(hp.n_head, 4u);
  EXPECT_EQ(hp.n_head_kv, 2u);
  EXPECT_EQ(hp.n_embd_head, 16u);  // n_embd / n_head
  EXPECT_EQ(hp.n_rot, 16u);        // defaults to the head size
  EXPECT_EQ(hp.n_embd_kv(), 32u);
  EXPECT_EQ(hp.n_ctx_train, 512u);
  EXPECT_EQ(hp.n_vocab, 96u);  // from token_embd (no vocab_size, no tokens)
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f);
  EXPECT_EQ(hp.rope_mode, graph::RopeMode::kNormal);
  EXPECT_TRUE(l->model->weights().output_tied);
}

TEST(HParams, UnknownArchitectureIsAnErrorNamingIt) {
  const std::string msg = load_error(TinySpec{.arch = "mamba9"}, "arch");
  EXPECT_NE(msg.find("unknown architecture 'mamba9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
  EXPECT_NE(msg.find("qwen2"), std::string::npos) << msg;
}

TEST(HParams, MissingKeyIsNamed) {
  const std::string msg = load_error(TinySpec{.drop_kv = {"llama.embedding_length"}}, "nokey");
  EXPECT_NE(msg.find("llama.embedding_length"), std::string::npos) << msg;
}

TEST(HParams, InconsistentHeadsAreRefused) {
  const std::string msg = load_error(
      TinySpec{.extra_kv = {{"llama.attention.head_count_kv", gguf::Value::u32(3)}}}, "heads");
  EXPECT_NE(msg.find("head_count_kv 3"), std::string::npos) << msg;
}

TEST(HParams, LinearRopeScalingIsHonoured) {
  auto l = load(TinySpec{.extra_kv = {{"llama.rope.scaling.type", gguf::Value::string("linear")},
                                      {"llama.rope.scaling.factor", gguf::Value::f32(4.0f)}}},
                "linear");
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_FLOAT_EQ(l->model->hparams().rope_freq_scale, 0.25f);
  graph::ComputeGraph g = l->model->build_graph(params(3, 1));
  for (const auto& n : g.nodes()) {
    if (n.op == graph::Op::kRope) {
      EXPECT_FLOAT_EQ(n.params.freq_scale, 0.25f);
    }
  }
}

TEST(HParams, OtherRopeScalingIsRefusedByName) {
  const std::string msg =
      load_error(TinySpec{.extra_kv = {{"llama.rope.scaling.type", gguf::Value::string("yarn")},
                                       {"llama.rope.scaling.factor", gguf::Value::f32(4.0f)}}},
                 "yarn");
  EXPECT_NE(msg.find("'yarn'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
}

TEST(Weights, MissingTensorIsAnErrorNamingIt) {
  const std::string msg = load_error(TinySpec{.drop_tensor = "blk.1.ffn_up.weight"}, "missing");
  EXPECT_NE(msg.find("missing tensor 'blk.1.ffn_up.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64, 128]"), std::string::npos) << msg;
}

TEST(Weights, WrongShapeIsAnErrorWithBothShapes) {
  const std::string msg = load_error(TinySpec{.bad_shape_tensor = "blk.0.attn_k.weight"}, "shape");
  EXPECT_NE(msg.find("'blk.0.attn_k.weight' has shape [64, 33], expected [64, 32]"),
            std::string::npos)
      << msg;
}

TEST(Weights, Qwen2RequiresQkvBiases) {
  const std::string msg = load_error(TinySpec{.arch = "qwen2", .qkv_bias = false}, "qwen2nobias");
  EXPECT_NE(msg.find("missing tensor 'blk.0.attn_q.bias'"), std::string::npos) << msg;
}

TEST(Weights, UntiedOutputIsBoundTiedOutputReusesTheEmbedding) {
  auto untied = load(TinySpec{.tied = false}, "untied");
  ASSERT_TRUE(untied.ok()) << untied.error().message;
  EXPECT_FALSE(untied->model->weights().output_tied);
  EXPECT_EQ(untied->model->weights().output.name, "output.weight");
  graph::ComputeGraph gu = untied->model->build_graph(params(1, 1));
  EXPECT_TRUE(gu.find("output.weight").has_value());

  auto tied = load(TinySpec{.tied = true}, "tied");
  ASSERT_TRUE(tied.ok());
  graph::ComputeGraph gt = tied->model->build_graph(params(1, 1));
  EXPECT_FALSE(gt.find("output.weight").has_value());
  // One token_embd node feeds both the embedding lookup and the LM head.
  const graph::NodeId emb = *gt.find("token_embd.weight");
  const graph::Node& head = gt.node(*gt.find("result_output"));
  EXPECT_EQ(head.src[0], emb);
  size_t n_emb_nodes = 0;
  for (const auto& n : gt.nodes()) n_emb_nodes += n.name == "token_embd.weight";
  EXPECT_EQ(n_emb_nodes, 1u);
}

TEST(Graph, BuildIsDeterministicInParams) {
  for (const char* arch : {"llama", "qwen2"}) {
    auto l = load(TinySpec{.arch = arch, .qkv_bias = std::string(arch) == "qwen2"},
                  std::string("det-") + arch);
    ASSERT_TRUE(l.ok()) << l.error().message;
    for (const auto& p : {params(7, 1), params(1, 1), params(5, 5), params(4, 2, 128)}) {
      graph::ComputeGraph a = l->model->build_graph(p);
      graph::ComputeGraph b = l->model->build_graph(p);
      Status st = graph::GraphCache::verify_structural(a, b);
      EXPECT_TRUE(st.ok()) << arch << " " << graph::to_string(p) << ": "
                           << (st.ok() ? "" : st.error().message);
      std::string why;
      EXPECT_TRUE(a.well_formed(&why)) << why;
    }
  }
}

TEST(Graph, PrefillCutsTheLastLayerToTheTailRowsDecodeHasNoTail) {
  auto l = load(TinySpec{}, "tail");
  ASSERT_TRUE(l.ok());
  graph::ComputeGraph pre = l->model->build_graph(params(7, 1));
  ASSERT_TRUE(pre.find_input(graph::kInputTailIds).has_value());
  EXPECT_EQ(pre.node(*pre.find_input(graph::kInputTailIds)).shape, (graph::Shape{1}));
  // embedding lookup + the two tail gathers
  EXPECT_EQ(count_op(pre, graph::Op::kGetRows), 3u);
  EXPECT_EQ(pre.node(*pre.find("l_out-1")).shape, (graph::Shape{64, 1}));
  EXPECT_EQ(pre.node(*pre.find("l_out-0")).shape, (graph::Shape{64, 7}));
  EXPECT_EQ(pre.node(pre.outputs().front()).shape, (graph::Shape{96, 1}));

  graph::ComputeGraph dec = l->model->build_graph(params(1, 1));
  EXPECT_FALSE(dec.find_input(graph::kInputTailIds).has_value());
  EXPECT_EQ(count_op(dec, graph::Op::kGetRows), 1u);

  graph::ComputeGraph all = l->model->build_graph(params(7, 7));  // every row's logits
  EXPECT_FALSE(all.find_input(graph::kInputTailIds).has_value());
  EXPECT_EQ(all.node(all.outputs().front()).shape, (graph::Shape{96, 7}));
}

TEST(Graph, IntermediatesAreNamedPerLayer) {
  auto l = load(TinySpec{}, "names");
  ASSERT_TRUE(l.ok());
  graph::ComputeGraph g = l->model->build_graph(params(3, 1));
  for (const char* base :
       {"attn_norm", "Qcur", "Kcur", "Vcur", "Qrope", "Krope", "kqv_out", "attn_out", "ffn_inp",
        "ffn_norm", "ffn_gate", "ffn_up", "ffn_swiglu", "ffn_out", "l_out"}) {
    for (int il = 0; il < 2; ++il) {
      const std::string name = std::string(base) + "-" + std::to_string(il);
      auto id = g.find(name);
      ASSERT_TRUE(id.has_value()) << name;
      EXPECT_EQ(g.node(*id).layer, il) << name;
    }
  }
  for (const char* name : {"inp_embd", "result_norm", "result_output", "cache_k-0", "cache_v-1",
                           "token_ids", "positions", "kv_cells", "kv_window", "tail_ids"}) {
    EXPECT_TRUE(g.find(name).has_value()) << name;
  }
  EXPECT_EQ(g.node(*g.find("cache_k-1")).shape, (graph::Shape{32, 64}));  // [n_embd_kv, n_ctx]
}

TEST(Graph, Qwen2HasBiasesAndNeoxRopeLlamaNormalRopeNoBias) {
  auto q = load(TinySpec{.arch = "qwen2", .qkv_bias = true}, "qwen2");
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->model->arch(), "qwen2");
  graph::ComputeGraph gq = q->model->build_graph(params(2, 1));
  auto ll = load(TinySpec{}, "llama");
  ASSERT_TRUE(ll.ok());
  graph::ComputeGraph gl = ll->model->build_graph(params(2, 1));
  for (const auto& n : gq.nodes()) {
    if (n.op == graph::Op::kRope) {
      EXPECT_EQ(n.params.rope_mode, graph::RopeMode::kNeox);
    }
  }
  for (const auto& n : gl.nodes()) {
    if (n.op == graph::Op::kRope) {
      EXPECT_EQ(n.params.rope_mode, graph::RopeMode::kNormal);
    }
  }
  EXPECT_EQ(gq.node(*gq.find("Qcur-0")).op, graph::Op::kAdd);  // projection + bias
  EXPECT_TRUE(gq.find("blk.1.attn_v.bias").has_value());
  EXPECT_EQ(gl.node(*gl.find("Qcur-0")).op, graph::Op::kMulMat);
  // qwen2 has 3 bias adds per layer more than llama
  EXPECT_EQ(count_op(gq, graph::Op::kAdd), count_op(gl, graph::Op::kAdd) + 3 * 2);
}

TEST(Graph, UnimplementedParamsAreErrorsNotGraphs) {
  auto l = load(TinySpec{}, "badparams");
  ASSERT_TRUE(l.ok());
  graph::GraphParams p = params(2, 1);
  p.cparams.kv_format = graph::KvFormat::kQ8_0;  // head size 16: not whole q8_0 blocks
  EXPECT_FALSE(l->model->check_params(p).ok());
  EXPECT_FALSE(l->model->check_params(params(2, 3)).ok());  // n_out > n_tokens
  EXPECT_TRUE(l->model->check_params(params(2, 2)).ok());
}

// llama.cpp's attn_rot conditions (llama_kv_cache: a quantized K / V and a head size
// that is a multiple of 64; K's block the largest power of two dividing it, V's 64).
TEST(Graph, QuantizedKvRotationFollowsLlamaCppsConditions) {
  using graph::KvFormat;
  auto rot = [](uint32_t hd, graph::KvFormats f, bool on = true) {
    HParams hp;
    hp.n_embd_head = hd;
    graph::CParams c;
    c.kv_format = f;
    c.kv_rotation = on;
    const KvRotation r = kv_rotation(hp, c);
    return std::pair<int32_t, int32_t>{r.k, r.v};
  };
  using P = std::pair<int32_t, int32_t>;
  EXPECT_EQ(rot(64, KvFormat::kQ8_0), (P{64, 64}));    // SmolLM2, Qwen2.5-0.5B
  EXPECT_EQ(rot(128, KvFormat::kQ4_0), (P{128, 64}));  // Llama, Qwen3
  EXPECT_EQ(rot(256, KvFormat::kQ8_0), (P{256, 64}));  // Gemma 3 270M
  EXPECT_EQ(rot(192, KvFormat::kQ8_0), (P{64, 64}));
  EXPECT_EQ(rot(96, KvFormat::kQ8_0), (P{0, 0}));  // not a multiple of 64
  EXPECT_EQ(rot(16, KvFormat::kQ4_0), (P{0, 0}));
  EXPECT_EQ(rot(64, KvFormat::kF16), (P{0, 0}));  // f16 is not quantized
  EXPECT_EQ(rot(64, KvFormat::kF32), (P{0, 0}));
  EXPECT_EQ(rot(128, {KvFormat::kQ4_0, KvFormat::kF16}), (P{128, 0}));
  EXPECT_EQ(rot(128, {KvFormat::kF16, KvFormat::kQ8_0}), (P{0, 64}));
  EXPECT_EQ(rot(64, KvFormat::kQ8_0, /*on=*/false), (P{0, 0}));
}

// Where the rotation sits (llama.cpp's build_attn): Q and K after RoPE, V before the
// store, the attention output rotated back before the output projection; none without
// kv_rotation; the graph stays a pure function of its params.
TEST(Graph, QuantizedKvRotationRotatesQKVBeforeTheStoreAndTheOutputBack) {
  auto l = load(TinySpec{.n_embd = 128, .n_head = 2, .n_head_kv = 1}, "kvrot");  // head 64
  ASSERT_TRUE(l.ok()) << l.error().message;
  graph::GraphParams p = params(3, 1);
  p.cparams.attn_numerics = graph::AttnNumerics::kGgmlF16;
  p.cparams.kv_format = graph::KvFormat::kQ8_0;
  ASSERT_TRUE(l->model->check_params(p).ok());
  EXPECT_EQ(count_op(l->model->build_graph(p), graph::Op::kHadamard), 0u);  // rotation off
  p.cparams.kv_rotation = true;
  graph::ComputeGraph g = l->model->build_graph(p);
  graph::ComputeGraph again = l->model->build_graph(p);
  EXPECT_TRUE(graph::GraphCache::verify_structural(g, again).ok());
  EXPECT_EQ(count_op(g, graph::Op::kHadamard), 4u * 2);  // Q, K, V, output; 2 layers
  for (int il = 0; il < 2; ++il) {
    auto at = [&](const std::string& base) {
      auto id = g.find(base + "-" + std::to_string(il));
      EXPECT_TRUE(id.has_value()) << base;
      return id.value_or(graph::kNoNode);
    };
    const graph::NodeId qrot = at("Qrot"), krot = at("Krot"), vrot = at("Vrot"),
                        orot = at("kqv_out_rot");
    EXPECT_EQ(g.node(qrot).src[0], at("Qrope"));
    EXPECT_EQ(g.node(krot).src[0], at("Krope"));
    EXPECT_EQ(g.node(vrot).src[0], at("Vcur"));
    EXPECT_EQ(g.node(qrot).params.n_rot, 64);
    EXPECT_EQ(g.node(vrot).params.n_rot, 64);
    EXPECT_EQ(g.node(at("kqv_out")).src[0], qrot);  // attention reads rotated Q
    EXPECT_EQ(g.node(orot).src[0], at("kqv_out"));
    EXPECT_EQ(g.node(at("attn_out")).src[1], orot);  // wo × rotated-back output
    for (const auto& n : g.nodes()) {
      if (n.op == graph::Op::kKvStore && n.layer == il) {
        EXPECT_EQ(n.src[1], n.params.kv_kind == graph::KvKind::kK ? krot : vrot);
      }
    }
  }
  // a q8_0 V with an f16 K: only V and the output rotate
  p.cparams.kv_format = {graph::KvFormat::kF16, graph::KvFormat::kQ8_0};
  EXPECT_EQ(count_op(l->model->build_graph(p), graph::Op::kHadamard), 2u * 2);
}

TEST(RealModel, SmolLM2LoadsWithTiedOutput) {
  const std::string path =
      std::string(MINFER_CACHE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present (scripts/setup.sh)";
  auto file = gguf::Model::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto m = Model::load(*file);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const HParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.n_layer, 30u);
  EXPECT_EQ(hp.n_embd, 576u);
  EXPECT_EQ(hp.n_head, 9u);
  EXPECT_EQ(hp.n_head_kv, 3u);
  EXPECT_EQ(hp.n_embd_head, 64u);
  EXPECT_EQ(hp.n_vocab, 49152u);
  EXPECT_EQ(hp.n_ctx_train, 8192u);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 100000.0f);
  EXPECT_TRUE((*m)->weights().output_tied);
  graph::ComputeGraph g = (*m)->build_graph(params(4, 1, 256));
  EXPECT_TRUE(g.find("l_out-29").has_value());
}

}  // namespace
}  // namespace minfer::model
