// Tests (engine): sentence embeddings from a real encoder (all-MiniLM-L6-v2) — batch
// invariance bit for bit, pooling and normalisation, refusals. The agreement with
// sentence-transformers and llama.cpp is in embed_parity_test.cpp (label long).
#include "embed_fixture.h"

namespace minfer::engine {
namespace {

using testing::Case;
using testing::MiniLm;
using testing::model_path;
using testing::reference;

TEST_F(MiniLm, AnInputsVectorIsBitIdenticalAloneOrBatchedWithOthersAtAnyThreadCount) {
  const std::vector<Case> cases = reference();
  ASSERT_GE(cases.size(), 40U);
  std::vector<std::vector<TokenId>> batch;
  for (size_t i = 0; i < 12; ++i) batch.push_back(cases[i * 3].ids);
  auto together = embed(*engine_, batch);
  ASSERT_TRUE(together.ok()) << together.error().message;
  auto reversed_inputs = batch;
  std::reverse(reversed_inputs.begin(), reversed_inputs.end());
  auto reversed = embed(*engine_, reversed_inputs);
  ASSERT_TRUE(reversed.ok()) << reversed.error().message;
  auto one_thread = Engine::open(model_path(), {.n_threads = 1});
  ASSERT_TRUE(one_thread.ok());
  ASSERT_TRUE((*one_thread)->set_context({.n_cells = 512, .n_seq_max = 8, .n_ctx_seq = 512}).ok());
  for (size_t i = 0; i < batch.size(); ++i) {
    auto alone = embed(*engine_, std::span(&batch[i], 1));
    ASSERT_TRUE(alone.ok()) << alone.error().message;
    EXPECT_EQ(alone->vectors[0], together->vectors[i]) << "input " << i;
    EXPECT_EQ(reversed->vectors[batch.size() - 1 - i], together->vectors[i]) << "input " << i;
    auto single = embed(**one_thread, std::span(&batch[i], 1));
    ASSERT_TRUE(single.ok()) << single.error().message;
    EXPECT_EQ(single->vectors[0], together->vectors[i]) << "input " << i << " on 1 thread";
  }
  // Nothing is kept: every cell is free after a call.
  EXPECT_EQ(engine_->kv_cells()->n_used(), 0U);
}

TEST_F(MiniLm, PoolingNoneClsLastAndNormalisationModes) {
  const std::vector<TokenId> ids = reference().at(1).ids;
  auto none = embed(*engine_, std::span(&ids, 1), {.pooling = Pooling::kNone, .normalize = -1});
  ASSERT_TRUE(none.ok()) << none.error().message;
  ASSERT_EQ(none->vectors[0].size(), ids.size() * 384);
  EXPECT_EQ(none->n_tokens[0], static_cast<int32_t>(ids.size()));
  auto cls = embed(*engine_, std::span(&ids, 1), {.pooling = Pooling::kCls, .normalize = -1});
  auto last = embed(*engine_, std::span(&ids, 1), {.pooling = Pooling::kLast, .normalize = -1});
  auto mean = embed(*engine_, std::span(&ids, 1), {.pooling = Pooling::kMean, .normalize = -1});
  ASSERT_TRUE(cls.ok() && last.ok() && mean.ok());
  const std::vector<float>& rows = none->vectors[0];
  // cls is row 0 of the per-token output, last the last row (the same rows, bit for bit).
  EXPECT_EQ(cls->vectors[0], std::vector<float>(rows.begin(), rows.begin() + 384));
  EXPECT_EQ(last->vectors[0], std::vector<float>(rows.end() - 384, rows.end()));
  for (size_t d = 0; d < 384; d += 97) {
    double sum = 0;
    for (size_t p = 0; p < ids.size(); ++p) sum += rows[p * 384 + d];
    EXPECT_EQ(mean->vectors[0][d], static_cast<float>(sum / static_cast<double>(ids.size())));
  }
  // The model's own pooling (mean, bert.pooling_type 1) with L2 normalisation by default.
  auto dflt = embed(*engine_, std::span(&ids, 1));
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->pooling, Pooling::kMean);
  double norm2 = 0;
  for (float x : dflt->vectors[0]) norm2 += double{x} * x;
  EXPECT_NEAR(norm2, 1.0, 1e-6);
  std::vector<float> v = mean->vectors[0];
  normalize_embedding(v, 0);  // max-abs → 32760
  float maxabs = 0;
  for (float x : v) maxabs = std::max(maxabs, std::fabs(x));
  EXPECT_NEAR(maxabs, 32760.0f, 0.01f);
  v = mean->vectors[0];
  normalize_embedding(v, 1);  // taxicab
  double l1 = 0;
  for (float x : v) l1 += std::fabs(x);
  EXPECT_NEAR(l1, 1.0, 1e-5);
}

TEST_F(MiniLm, RefusesEmptyOverlongInputsRankPoolingAndMismatchedTokenTypesWithTheInputNamed) {
  std::vector<std::vector<TokenId>> inputs = {{101, 7592, 102}, {}};
  auto r = embed(*engine_, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("input 1 has no tokens"), std::string::npos);
  inputs[1] = std::vector<TokenId>(513, 1000);
  r = embed(*engine_, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("input 1 has 513 tokens"), std::string::npos)
      << r.error().message;
  r = embed(*engine_, std::span(inputs.data(), 1), {.pooling = Pooling::kRank});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("classification head"), std::string::npos);
  // Token types must match the inputs one for one, token for token.
  const std::vector<std::vector<int32_t>> short_types = {{0, 0}};
  r = embed(*engine_, std::span(inputs.data(), 1), {}, short_types);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("input 0 has 3 tokens but 2 token types"), std::string::npos)
      << r.error().message;
  r = embed(*engine_, std::span(inputs.data(), 1), {}, std::span(short_types.data(), 0));
  EXPECT_TRUE(r.ok()) << r.error().message;  // none given: every token is type 0
  const std::vector<std::vector<int32_t>> two = {{0, 0, 0}, {0, 0, 0}};
  r = embed(*engine_, std::span(inputs.data(), 1), {}, two);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("2 token type lists for 1 inputs"), std::string::npos);
  inputs[1] = {101, 40000, 102};  // outside the 30522-token vocabulary
  r = embed(*engine_, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(engine_->kv_cells()->n_used(), 0U);
  EXPECT_TRUE(parse_pooling("mean").ok());
  EXPECT_FALSE(parse_pooling("max").ok());
}

}  // namespace
}  // namespace minfer::engine
