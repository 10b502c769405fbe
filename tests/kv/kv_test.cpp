// Stage 10 tests (KV cells): placement, loud bounds, windows as graph input data,
// reservations, seq rm/cp/shift. Bars: exact cells and window runs.
#include <gtest/gtest.h>

#include <vector>

#include "../graph/toy_transformer.h"
#include "alloc/allocator.h"
#include "graph/cache.h"
#include "graph/input_names.h"
#include "kv/cells.h"
#include "kv/graph_inputs.h"

namespace minfer::kv {
namespace {

KvCells make(uint32_t n_ctx, uint32_t n_seq = 1) {
  auto c = KvCells::create({.n_ctx = n_ctx, .n_seq_max = n_seq});
  EXPECT_TRUE(c.ok());
  return std::move(c).value();
}

std::vector<KvToken> seq_tokens(SeqId seq, Pos from, Pos to) {
  std::vector<KvToken> t;
  for (Pos p = from; p < to; ++p) t.push_back({seq, p});
  return t;
}

std::vector<int32_t> place_ok(KvCells& c, const std::vector<KvToken>& batch) {
  auto r = c.place(batch);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::vector<int32_t>{};
}

TEST(KvCells, PositionAtOrPastNctxIsAnErrorAndChangesNothing) {
  KvCells c = make(8);
  place_ok(c, seq_tokens(0, 0, 3));
  auto r = c.place(std::vector<KvToken>{{0, 3}, {0, 8}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("position 8"), std::string::npos) << r.error().message;
  EXPECT_EQ(c.n_used(), 3u);  // all or nothing: position 3 was not placed either
  EXPECT_FALSE(c.find(0, 3));
  EXPECT_FALSE(c.place(std::vector<KvToken>{{0, -1}}).ok());
  EXPECT_FALSE(c.place(std::vector<KvToken>{{1, 0}}).ok());  // sequence out of range
  EXPECT_FALSE(c.place(std::vector<KvToken>{{0, 4}, {0, 4}}).ok());
  EXPECT_FALSE(c.window(std::vector<KvToken>{{0, 8}}, {}).ok());
}

TEST(KvCells, FullCacheIsAnError) {
  KvCells c = make(4, 2);
  place_ok(c, seq_tokens(0, 0, 4));
  auto r = c.place(std::vector<KvToken>{{1, 0}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cache full"), std::string::npos);
}

TEST(KvCells, SingleSequenceCellEqualsPositionAndWindowIsCausal) {
  KvCells c = make(16);
  auto batch = seq_tokens(0, 0, 5);
  EXPECT_EQ(place_ok(c, batch), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  auto w = c.window(batch, {.n_runs = 1});
  ASSERT_TRUE(w.ok());
  // row t: one run (first cell 0, t + 1 cells) — each query reads positions <= its own
  EXPECT_EQ(*w, (std::vector<int32_t>{0, 1, 0, 2, 0, 3, 0, 4, 0, 5}));
  std::vector<KvToken> step{{0, 5}};
  EXPECT_EQ(place_ok(c, step), std::vector<int32_t>{5});
  EXPECT_EQ(*c.window(step, {.n_runs = 2}), (std::vector<int32_t>{0, 6, 0, 0}));  // padded
  auto all = c.window(std::vector<KvToken>{{0, 0}}, {.n_runs = 1, .causal = false});
  EXPECT_EQ(*all, (std::vector<int32_t>{0, 6}));
}

TEST(KvCells, InterleavedSequencesNeedMoreRunsThanTheLayoutIsAnError) {
  KvCells c = make(16, 2);
  place_ok(c, {{0, 0}, {1, 0}, {0, 1}, {1, 1}});  // cells 0..3 alternate sequences
  std::vector<KvToken> q{{1, 1}};
  auto one = c.window(q, {.n_runs = 1});
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message.find("needs 2 runs"), std::string::npos) << one.error().message;
  auto two = c.window(q, {.n_runs = 2});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<int32_t>{1, 1, 3, 1}));
}

TEST(KvCells, ReservationKeepsASequenceContiguous) {
  KvCells c = make(32, 2);
  auto r = c.reserve(1, 8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (CellRange{0, 8}));
  EXPECT_FALSE(c.reserve(1, 4).ok());  // one reservation per sequence
  // sequence 0 avoids sequence 1's reserved cells
  EXPECT_EQ(place_ok(c, seq_tokens(0, 0, 3)), (std::vector<int32_t>{8, 9, 10}));
  EXPECT_EQ(place_ok(c, seq_tokens(1, 0, 3)), (std::vector<int32_t>{0, 1, 2}));
  place_ok(c, seq_tokens(0, 3, 5));
  place_ok(c, seq_tokens(1, 3, 8));
  EXPECT_EQ(*c.window(std::vector<KvToken>{{1, 7}}, {.n_runs = 1}), (std::vector<int32_t>{0, 8}));
  auto full = c.place(std::vector<KvToken>{{1, 8}});
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message.find("reservation"), std::string::npos);
  c.release(1);
  EXPECT_EQ(place_ok(c, std::vector<KvToken>{{1, 8}}), std::vector<int32_t>{13});
}

TEST(KvCells, RollbackOverwritesTheSameCellAndSeqRmFrees) {
  KvCells c = make(16);
  place_ok(c, seq_tokens(0, 0, 6));
  EXPECT_EQ(place_ok(c, std::vector<KvToken>{{0, 4}}), std::vector<int32_t>{4});  // overwrite
  EXPECT_EQ(c.n_used(), 6u);
  EXPECT_EQ(c.seq_rm(0, 3, -1), 3u);
  EXPECT_EQ(c.n_used(), 3u);
  EXPECT_EQ(c.seq_pos_max(0), 2);
  EXPECT_EQ(place_ok(c, seq_tokens(0, 3, 5)), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(c.seq_rm(-1, 0, -1), 5u);
  EXPECT_EQ(c.n_used(), 0u);
}

TEST(KvCells, SeqCpSharesThePrefixAndWritesCopyOnWrite) {
  KvCells c = make(16, 2);
  place_ok(c, seq_tokens(0, 0, 4));
  ASSERT_TRUE(c.seq_cp(0, 1, 0, 3).ok());  // share positions 0..2
  EXPECT_TRUE(c.has_seq(1, 1));
  EXPECT_FALSE(c.has_seq(3, 1));
  EXPECT_EQ(c.n_used(), 4u);  // shared, not copied
  EXPECT_EQ(place_ok(c, std::vector<KvToken>{{1, 3}}), std::vector<int32_t>{4});
  // shared prefix (cells 0..2) + private cell 4: two runs, in position order
  EXPECT_FALSE(c.window(std::vector<KvToken>{{1, 3}}, {.n_runs = 1}).ok());
  auto w = c.window(std::vector<KvToken>{{1, 3}}, {.n_runs = 2});
  EXPECT_EQ(*w, (std::vector<int32_t>{0, 3, 4, 1}));
  // rewriting a shared position leaves sequence 0's cell alone
  EXPECT_EQ(place_ok(c, std::vector<KvToken>{{1, 1}}), std::vector<int32_t>{5});
  EXPECT_TRUE(c.has_seq(1, 0));
  EXPECT_FALSE(c.has_seq(1, 1));
  EXPECT_EQ(c.pos(1), 1);
  EXPECT_FALSE(c.seq_cp(0, 1, 0, 2).ok());  // sequence 1 holds position 1 elsewhere now
}

TEST(KvCells, SeqShiftMovesPositionsAndRecordsReropeDeltas) {
  KvCells c = make(8, 2);
  place_ok(c, seq_tokens(0, 0, 6));
  c.seq_rm(0, 0, 2);
  ASSERT_TRUE(c.seq_shift(0, 2, -1, -2).ok());  // context shift: 2..5 → 0..3
  EXPECT_EQ(c.seq_pos_min(0), 0);
  EXPECT_EQ(c.seq_pos_max(0), 3);
  EXPECT_EQ(*c.find(0, 0), 2);
  ASSERT_TRUE(c.has_shift());
  auto d = c.take_shifts();
  EXPECT_EQ(d, (std::vector<int32_t>{0, 0, -2, -2, -2, -2, 0, 0}));
  EXPECT_FALSE(c.has_shift());
  EXPECT_FALSE(c.seq_shift(0, 0, -1, 5).ok());  // position 3 + 5 >= n_ctx
  EXPECT_EQ(c.seq_pos_max(0), 3);               // unchanged on error
  ASSERT_TRUE(c.seq_cp(0, 1, 0, 1).ok());
  EXPECT_FALSE(c.seq_shift(0, 0, 1, 1).ok());  // shared cell
}

TEST(KvCells, EveryFormatIsAcceptedAndBadSeqCountsAreRefused) {
  for (graph::KvFormat f : {graph::KvFormat::kF32, graph::KvFormat::kF16, graph::KvFormat::kQ8_0,
                            graph::KvFormat::kQ4_0}) {
    EXPECT_TRUE(KvCells::create({.n_ctx = 8, .format = f}).ok()) << graph::kv_format_name(f);
  }
  EXPECT_EQ(*kv_dtype(graph::KvFormat::kQ8_0), DType::kQ8_0);
  EXPECT_EQ(*kv_dtype(graph::KvFormat::kQ4_0), DType::kQ4_0);
  EXPECT_FALSE(KvCells::create({.n_ctx = 8, .n_seq_max = 65}).ok());
  EXPECT_TRUE(KvCells::create({.n_ctx = 8, .n_seq_max = 64}).ok());
}

TEST(KvGraphInputs, DeclaredShapesDependOnParamsOnly) {
  graph::GraphParams p = testing::toy_params(5, 32);
  p.cparams.window.n_runs = 3;
  graph::GraphBuilder b;
  KvGraphInputs in = declare_kv_inputs(b, p);
  KvLayerRegions r = declare_kv_regions(b, p, 0, 32, 48);
  EXPECT_EQ(b.node(in.cells).shape, (graph::Shape{5}));
  EXPECT_EQ(b.node(in.window).shape, (graph::Shape{6, 5}));
  EXPECT_EQ(b.node(in.window).name, graph::kInputKvWindow);
  EXPECT_EQ(b.node(r.k).shape, (graph::Shape{32, 32}));
  EXPECT_EQ(b.node(r.v).shape, (graph::Shape{48, 32}));
}

// The decode loop in miniature: the window grows every step, the graph does not.
TEST(KvGraphInputs, DecodeStepsReuseOneGraphWhileWindowDataGrows) {
  graph::GraphCache cache(std::make_unique<alloc::Allocator>());
  auto& a = cache.memory_as<alloc::Allocator>();
  KvCells cells = make(64);
  auto build = [](const graph::GraphParams& p) { return testing::build_toy(p); };

  auto prompt = seq_tokens(0, 0, 6);
  auto g = cache.get_or_build(testing::toy_params(6), build);
  ASSERT_TRUE(g.ok());
  auto pc = cells.place(prompt);
  auto pw = cells.window(prompt, {.n_runs = 1});
  ASSERT_TRUE(pc.ok() && pw.ok());
  ASSERT_TRUE(a.fill_input_i32(**g, graph::kInputKvCells, *pc).ok());
  ASSERT_TRUE(a.fill_input_i32(**g, graph::kInputKvWindow, *pw).ok());

  uint64_t decode_uid = 0;
  for (Pos pos = 6; pos < 16; ++pos) {
    auto dg = cache.get_or_build(testing::toy_params(1), build);
    ASSERT_TRUE(dg.ok());
    if (decode_uid == 0) decode_uid = (*dg)->uid();
    EXPECT_EQ((*dg)->uid(), decode_uid);
    std::vector<KvToken> step{{0, pos}};
    auto sc = cells.place(step);
    auto sw = cells.window(step, {.n_runs = 1});
    ASSERT_TRUE(sc.ok() && sw.ok());
    ASSERT_TRUE(a.fill_input_i32(**dg, graph::kInputKvCells, *sc).ok());
    ASSERT_TRUE(a.fill_input_i32(**dg, graph::kInputKvWindow, *sw).ok());
    const int32_t* win = a.data_as<int32_t>(**dg, *(*dg)->find_input(graph::kInputKvWindow));
    EXPECT_EQ(win[0], 0);
    EXPECT_EQ(win[1], pos + 1);  // reads cells 0..pos
  }
  EXPECT_EQ(cache.stats().rebuilds, 2u);
  EXPECT_EQ(cache.stats().reuses, 9u);
  // a step past the context is refused before anything would run
  KvCells small = make(8);
  place_ok(small, seq_tokens(0, 0, 8));
  EXPECT_FALSE(small.place(std::vector<KvToken>{{0, 8}}).ok());
}

TEST(KvCells, RunsNeededCountsContiguousPiecesOfEachSequence) {
  KvCells c = make(16, 2);
  // Interleaved: seq 0 at cells 0, 2, 4 (positions 0..2), seq 1 at cells 1, 3, 5.
  for (Pos p = 0; p < 3; ++p) place_ok(c, std::vector<KvToken>{{0, p}, {1, p}});
  auto r = c.runs_needed(std::vector<KvToken>{{0, 2}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  auto r1 = c.runs_needed(std::vector<KvToken>{{0, 0}});  // causal: position 0 sees one cell
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(*r1, 1);
  // A contiguous sequence needs one run, whatever the other rows of the batch.
  KvCells d = make(16, 2);
  place_ok(d, seq_tokens(0, 0, 5));
  place_ok(d, seq_tokens(1, 0, 4));
  auto r2 = d.runs_needed(std::vector<KvToken>{{0, 4}, {1, 3}});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, 1);
  // A shared prefix (seq_cp) plus own cells: two runs for seq 1.
  KvCells e = make(16, 2);
  place_ok(e, seq_tokens(0, 0, 4));
  ASSERT_TRUE(e.seq_cp(0, 1, 0, 2).ok());
  place_ok(e, seq_tokens(1, 2, 4));
  auto r3 = e.runs_needed(std::vector<KvToken>{{1, 3}});
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(*r3, 2);
  EXPECT_FALSE(e.runs_needed(std::vector<KvToken>{{2, 0}}).ok());
  EXPECT_FALSE(e.runs_needed(std::vector<KvToken>{{0, 16}}).ok());
}

}  // namespace
}  // namespace minfer::kv

namespace minfer::kv {
namespace {

// Sliding-window attention (gemma3's local layers): a query at p reads positions
// (p - sliding, p], as llama.cpp masks LLAMA_SWA_TYPE_STANDARD (p - p_cell >= n_swa).
TEST(KvCells, SlidingWindowReadsOnlyTheLastNPositions) {
  KvCells c = make(16);
  auto batch = seq_tokens(0, 0, 6);
  place_ok(c, batch);
  auto w = c.window(batch, {.n_runs = 1, .sliding = 3});
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(*w, (std::vector<int32_t>{0, 1, 0, 2, 0, 3, 1, 3, 2, 3, 3, 3}));
  // a sliding window wider than the sequence is the full causal window
  EXPECT_EQ(*c.window(batch, {.n_runs = 1, .sliding = 100}), *c.window(batch, {.n_runs = 1}));
  // shared prefix + private cells: the window drops the prefix once it slides past it
  KvCells s = make(16, 2);
  place_ok(s, seq_tokens(0, 0, 4));
  ASSERT_TRUE(s.seq_cp(0, 1, 0, 3).ok());  // sequence 1 shares positions 0..2 (cells 0..2)
  place_ok(s, std::vector<KvToken>{{1, 3}, {1, 4}, {1, 5}});  // cells 4, 5, 6
  auto two = s.window(std::vector<KvToken>{{1, 3}, {1, 5}}, {.n_runs = 2, .sliding = 3});
  ASSERT_TRUE(two.ok()) << two.error().message;
  EXPECT_EQ(*two, (std::vector<int32_t>{1, 2, 4, 1, 4, 3, 0, 0}));
  // a non-causal sliding window is refused by name
  auto bad = c.window(batch, {.n_runs = 1, .causal = false, .sliding = 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("sliding"), std::string::npos);
}

}  // namespace
}  // namespace minfer::kv
