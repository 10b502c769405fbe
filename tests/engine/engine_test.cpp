// Stage 15 tests (the loop): one rebuild per run, KV surviving the prefill → decode
// rebuild, n_ctx as reuse identity, loud bounds before anything runs, and determinism
// (bitwise) across thread counts and prefill chunking; the generation loop's gates;
// the real SmolLM2 model generating text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "engine_fixture.h"

namespace minfer::engine {
namespace {

using testing::gpt2_vocab;
using testing::iota_positions;
using testing::make_engine;
using testing::make_engine_status;
using testing::run;
using testing::same_bits;
using testing::seq0_batch;
using testing::TinySpec;

const std::vector<int32_t> kPrompt = {5, 17, 42, 8, 91, 3, 66, 12, 30};

// Logit bias that keeps every end-of-generation token out of a run.
std::vector<sample::LogitBias> no_eog(const Engine& e) {
  std::vector<sample::LogitBias> bias;
  for (TokenId id : e.tokenizer().special().eog) bias.push_back({.id = id, .bias = -100.0f});
  return bias;
}

TEST(Engine, A64TokenRunRebuildsOnceThenReusesTheDecodeGraph62Times) {
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 256, "run64");
  ASSERT_TRUE(t.engine);
  GenerateOptions o{.n_predict = 64};
  o.sampler.logit_bias = no_eog(*t);
  std::string text;
  auto g = Generator::create(*t, o, [&](std::string_view s) { text += s; });
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_TRUE((*g)->prefill(kPrompt).ok());
  uint64_t decode_uid = 0;
  int steps = 0;
  for (;;) {
    auto more = (*g)->step();
    ASSERT_TRUE(more.ok()) << more.error().message;
    if (!*more) break;
    if (steps++ == 0) decode_uid = t->stats().graph_uid;
    EXPECT_EQ(t->stats().graph_uid, decode_uid) << "graph uid changed at decode step " << steps;
  }
  (*g)->finish();
  const GenerateStats& s = (*g)->stats();
  EXPECT_EQ(s.n_generated, 64);
  EXPECT_EQ(s.stop, StopReason::kNPredict);
  EXPECT_EQ(s.prefill_builds, 1u);
  EXPECT_EQ(s.decode_rebuilds, 1u);
  // 63 forwards: the 64th token ends the run at the -n gate without a forward of it
  // (its logits would be dropped); the first forward builds the decode graph.
  EXPECT_EQ(s.decode_reuses, 62u);
  EXPECT_EQ(s.n_forwards, 63);
  EXPECT_EQ(t->cache_stats().rebuilds, 2u);  // prefill graph + decode graph
  EXPECT_EQ(t->cache_stats().reuses, 62u);
  EXPECT_FALSE(text.empty());
}

TEST(Engine, KvContentsSurviveThePrefillToDecodeRebuild) {
  const uint32_t n_ctx = 32;
  auto t = make_engine(TinySpec{}, 1, n_ctx, "kvsurvive");
  ASSERT_TRUE(t.engine);
  const std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.begin() + 6);
  run(*t, prompt, iota_positions(6), 1);
  alloc::Allocator& a = *t->allocator();
  const auto& hp = t->hparams();
  const size_t row_bytes = hp.n_embd_kv() * sizeof(float);
  std::vector<std::vector<std::byte>> before;
  for (int32_t il = 0; il < static_cast<int32_t>(hp.n_layer); ++il) {
    for (auto kind : {graph::KvKind::kK, graph::KvKind::kV}) {
      auto cell0 = a.region_cell(il, kind, 0);
      ASSERT_TRUE(cell0.ok());
      before.emplace_back(*cell0, *cell0 + 6 * row_bytes);
    }
  }
  const uint64_t uid_prefill = t->stats().graph_uid;
  const std::vector<float> decoded = run(*t, {kPrompt[6]}, {6}, 1);
  EXPECT_NE(t->stats().graph_uid, uid_prefill);  // the decode step rebuilt
  EXPECT_EQ(t->cache_stats().rebuilds, 2u);
  size_t i = 0;
  for (int32_t il = 0; il < static_cast<int32_t>(hp.n_layer); ++il) {
    for (auto kind : {graph::KvKind::kK, graph::KvKind::kV}) {
      auto cell0 = a.region_cell(il, kind, 0);
      ASSERT_TRUE(cell0.ok());
      EXPECT_EQ(std::memcmp(*cell0, before[i].data(), before[i].size()), 0)
          << "layer " << il << " region " << static_cast<int>(kind) << " changed";
      ++i;
    }
  }
  // The decode step really read the prompt's KV: it equals a 7-token prefill's last row.
  auto fresh = make_engine(TinySpec{}, 1, n_ctx, "kvsurvive-ref");
  ASSERT_TRUE(fresh.engine);
  const std::vector<int32_t> seven(kPrompt.begin(), kPrompt.begin() + 7);
  EXPECT_TRUE(same_bits(decoded, run(*fresh, seven, iota_positions(7), 1)));
}

TEST(Engine, ChangingNctxForcesARebuildWithNewRegions) {
  auto t = make_engine(TinySpec{}, 1, 64, "nctx");
  ASSERT_TRUE(t.engine);
  run(*t, {1}, {0}, 1);
  run(*t, {2}, {1}, 1);
  EXPECT_EQ(t->stats().rebuilds, 1u);
  EXPECT_EQ(t->stats().reuses, 1u);
  const uint64_t uid64 = t->stats().graph_uid;
  ASSERT_TRUE(t->set_n_ctx(64).ok());  // same context: cells freed, graph kept
  run(*t, {1}, {0}, 1);
  EXPECT_EQ(t->stats().rebuilds, 1u);
  EXPECT_EQ(t->stats().graph_uid, uid64);
  ASSERT_TRUE(t->set_n_ctx(128).ok());
  run(*t, {1}, {0}, 1);
  EXPECT_EQ(t->stats().rebuilds, 2u);
  EXPECT_NE(t->stats().graph_uid, uid64);
  EXPECT_EQ(t->cache()->current_params().cparams.n_ctx, 128u);
  EXPECT_EQ(t->allocator()->region(0, graph::KvKind::kK)->n_cells, 128);
  EXPECT_FALSE(t->set_n_ctx(100000).ok());  // beyond the model's context length
}

TEST(Engine, PositionAtOrPastNctxFailsBeforeAnythingRuns) {
  auto t = make_engine(TinySpec{}, 1, 16, "bounds");
  ASSERT_TRUE(t.engine);
  run(*t, {1, 2, 3, 4}, iota_positions(4), 1);
  const EngineStats before = t->stats();
  const uint64_t executes = t->sched_stats().executes;
  const uint32_t used = t->kv()->n_used();
  const graph::CacheStats cache_before = t->cache_stats();
  for (const auto& [tokens, positions] :
       std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>{
           {{5}, {16}}, {{5, 6}, {4, 16}}, {{5}, {-1}}, {{5}, {1000}}}) {
    auto r = t->decode(seq0_batch(tokens, positions, 1));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("outside the context (n_ctx 16)"), std::string::npos)
        << r.error().message;
  }
  EXPECT_FALSE(t->decode(seq0_batch({96}, {4}, 1)).ok());                     // bad id
  EXPECT_FALSE(t->decode(seq0_batch({5, 6}, iota_positions(2, 4), 0)).ok());  // no logit row
  EXPECT_FALSE(t->decode(Batch{}).ok());                                      // empty
  EXPECT_EQ(t->sched_stats().executes, executes);                             // no kernel ran
  EXPECT_EQ(t->stats().executes, before.executes);
  EXPECT_EQ(t->kv()->n_used(), used);  // no cell was placed
  EXPECT_EQ(t->cache_stats().rebuilds, cache_before.rebuilds);
  EXPECT_EQ(t->cache_stats().reuses, cache_before.reuses);
  EXPECT_EQ(run(*t, {5}, {15}, 1).size(), 96u);  // the last cell is fine
}

// The numerics configurations invariant 8 is proved for: the default (f32 cache), the
// f16 cache, and llama.cpp's arithmetic (Q8_0 weights: its quant dots are
// batch-independent; only its f16 weights are not, as in llama.cpp).
struct NumericsCase {
  const char* name;
  EngineOptions options;
};
std::vector<NumericsCase> numerics_cases() {
  std::vector<NumericsCase> cases = {
      {"f32-cache", {}},
      {"f16-cache", {.kv_format = graph::KvFormat::kF16}},
  };
  if (backend::cpu::detect_isa() != backend::cpu::CpuIsa::kScalar) {
    cases.push_back(
        {"llamacpp", {.kv_format = graph::KvFormat::kF16, .numerics = Numerics::kLlamaCpp}});
  }
  return cases;
}

TEST(Engine, LogitsAreBitIdenticalWith1And2Threads) {
  for (const NumericsCase& nc : numerics_cases()) {
    for (const auto& [arch, spec, llamacpp_invariant] : testing::determinism_models()) {
      const std::string stem = std::string(arch) + "-" + nc.name;
      auto t1 = make_engine(spec, 1, 64, "thr1-" + stem, nc.options);
      auto t2 = make_engine(spec, 2, 64, "thr2-" + stem, nc.options);
      ASSERT_TRUE(t1.engine && t2.engine) << stem;
      const uint32_t n = static_cast<uint32_t>(kPrompt.size());
      EXPECT_TRUE(same_bits(run(*t1, kPrompt, iota_positions(n), n),
                            run(*t2, kPrompt, iota_positions(n), n)))
          << stem << " prefill";
      for (int32_t pos = static_cast<int32_t>(n); pos < static_cast<int32_t>(n) + 4; ++pos) {
        EXPECT_TRUE(same_bits(run(*t1, {pos % 96}, {pos}, 1), run(*t2, {pos % 96}, {pos}, 1)))
            << stem << " decode at " << pos;
      }
    }
  }
}

TEST(Engine, PrefillAtOnceEqualsTokenByTokenBitwise) {
  for (const NumericsCase& nc : numerics_cases()) {
    for (const auto& [arch, spec, llamacpp_invariant] :
         testing::determinism_models(/*tied=*/false)) {
      if (nc.options.numerics == Numerics::kLlamaCpp && !llamacpp_invariant) continue;
      const std::string stem = std::string(arch) + "-" + nc.name;
      auto whole = make_engine(spec, 2, 64, "whole-" + stem, nc.options);
      auto steps = make_engine(spec, 2, 64, "steps-" + stem, nc.options);
      ASSERT_TRUE(whole.engine && steps.engine) << stem;
      const size_t n = kPrompt.size();
      const size_t nv = whole->hparams().n_vocab;
      // Every prompt position's logits in one forward (n_out = n) ...
      const std::vector<float> all =
          run(*whole, kPrompt, iota_positions(n), static_cast<uint32_t>(n));
      ASSERT_EQ(all.size(), n * nv);
      for (size_t i = 0; i < n; ++i) {
        // ... equal the logits of the same token decoded alone at its position.
        const std::vector<float> one = run(*steps, {kPrompt[i]}, {static_cast<int32_t>(i)}, 1);
        const std::vector<float> row(all.begin() + static_cast<std::ptrdiff_t>(i * nv),
                                     all.begin() + static_cast<std::ptrdiff_t>((i + 1) * nv));
        EXPECT_TRUE(same_bits(row, one)) << stem << " position " << i;
      }
      // The tail-row graph (n_out = 1) gives the last row bit for bit too.
      auto tail = make_engine(spec, 1, 64, "tail-" + stem, nc.options);
      ASSERT_TRUE(tail.engine);
      const std::vector<float> last(all.end() - static_cast<std::ptrdiff_t>(nv), all.end());
      EXPECT_TRUE(same_bits(run(*tail, kPrompt, iota_positions(n), 1), last)) << stem;
    }
  }
}

// gemma3's local layers read only the last n_swa positions (the kv_window_swa input):
// rows whose whole history fits in the window equal a model whose window covers
// everything, bit for bit; rows past it differ.
TEST(Engine, SlidingWindowChangesOnlyRowsPastIt_bitwise) {
  TinySpec narrow{.arch = "gemma3", .n_swa = 4};
  TinySpec wide{.arch = "gemma3", .n_swa = 1000};
  auto a = make_engine(narrow, 2, 64, "swa-narrow");
  auto b = make_engine(wide, 2, 64, "swa-wide");
  ASSERT_TRUE(a.engine && b.engine);
  const size_t n = kPrompt.size();
  const size_t nv = a->hparams().n_vocab;
  const std::vector<float> la = run(*a, kPrompt, iota_positions(n), static_cast<uint32_t>(n));
  const std::vector<float> lb = run(*b, kPrompt, iota_positions(n), static_cast<uint32_t>(n));
  auto row = [&](const std::vector<float>& v, size_t i) {
    return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(i * nv),
                              v.begin() + static_cast<std::ptrdiff_t>((i + 1) * nv));
  };
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(same_bits(row(la, i), row(lb, i))) << i;
  for (size_t i = 4; i < n; ++i) EXPECT_FALSE(same_bits(row(la, i), row(lb, i))) << i;
  // Decoding past the window: the token decoded alone equals its row of a full prefill.
  auto c = make_engine(narrow, 1, 64, "swa-steps");
  ASSERT_TRUE(c.engine);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same_bits(run(*c, {kPrompt[i]}, {static_cast<int32_t>(i)}, 1), row(la, i))) << i;
  }
}

TEST(Engine, F16CacheStaysWithinHalfPrecisionOfTheF32Cache) {
  // Same model and prompt; the f16 cache only rounds K and V (relative 2^-11), so the
  // logits move by far less than the model's own quantization noise.
  const TinySpec spec{.arch = "qwen2", .qkv_bias = true};
  auto a = make_engine(spec, 1, 64, "kv32");
  auto b = make_engine(spec, 1, 64, "kv16", {.kv_format = graph::KvFormat::kF16});
  ASSERT_TRUE(a.engine && b.engine);
  const uint32_t n = static_cast<uint32_t>(kPrompt.size());
  const std::vector<float> la = run(*a, kPrompt, iota_positions(n), n);
  const std::vector<float> lb = run(*b, kPrompt, iota_positions(n), n);
  ASSERT_EQ(la.size(), lb.size());
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(la[i]) - lb[i]));
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(la[i])));
  }
  EXPECT_GT(max_diff, 0.0);  // the cache really is f16
  EXPECT_LT(max_diff, 2e-2 * std::max(1.0, max_abs)) << "max |logit| " << max_abs;
}

// q8_0 and q4_0 caches, alone or beside another V / K type, keep invariant 8: logits are
// bit-identical on 1 and 2 threads and for a prompt prefilled at once or token by token
// (head size 32: whole blocks per head), and they are really quantized (other bits than
// the f32 cache, and near them).
TEST(Engine, QuantizedCachesAreThreadAndBatchInvariant_bitwise) {
  using graph::KvFormat;
  for (graph::KvFormats kv : {graph::KvFormats(KvFormat::kQ8_0), graph::KvFormats(KvFormat::kQ4_0),
                              graph::KvFormats(KvFormat::kQ8_0, KvFormat::kF16),
                              graph::KvFormats(KvFormat::kF32, KvFormat::kQ4_0)}) {
    for (const char* arch : {"llama", "qwen2", "gemma3"}) {
      const TinySpec spec{.arch = arch,
                          .n_head = 2,
                          .n_head_kv = 1,
                          .tied = false,
                          .qkv_bias = std::string(arch) == "qwen2"};
      std::string stem = std::string(arch) + "-" + graph::kv_formats_name(kv);
      std::replace(stem.begin(), stem.end(), '/', '-');
      auto t1 = make_engine(spec, 1, 64, "qkv1-" + stem, {.kv_format = kv});
      auto t2 = make_engine(spec, 2, 64, "qkv2-" + stem, {.kv_format = kv});
      auto f32 = make_engine(spec, 2, 64, "qkvf-" + stem);
      ASSERT_TRUE(t1.engine && t2.engine && f32.engine) << stem;
      const size_t n = kPrompt.size();
      const size_t nv = t1->hparams().n_vocab;
      const std::vector<float> all = run(*t1, kPrompt, iota_positions(n), static_cast<uint32_t>(n));
      const std::vector<float> ref =
          run(*f32, kPrompt, iota_positions(n), static_cast<uint32_t>(n));
      EXPECT_FALSE(same_bits(all, ref)) << stem << ": the cache is not quantized";
      double max_diff = 0.0, max_abs = 0.0;
      for (size_t i = 0; i < all.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(all[i]) - ref[i]));
        max_abs = std::max(max_abs, std::fabs(static_cast<double>(ref[i])));
      }
      // 4 bits per value move a random tiny model's logits by up to a third of their range.
      const bool four_bits = kv.k == KvFormat::kQ4_0 || kv.v == KvFormat::kQ4_0;
      const double bound = four_bits ? 0.5 : 0.1;
      EXPECT_LT(max_diff, bound * std::max(1.0, max_abs)) << stem;
      for (size_t i = 0; i < n; ++i) {
        const std::vector<float> one = run(*t2, {kPrompt[i]}, {static_cast<int32_t>(i)}, 1);
        const std::vector<float> row(all.begin() + static_cast<std::ptrdiff_t>(i * nv),
                                     all.begin() + static_cast<std::ptrdiff_t>((i + 1) * nv));
        EXPECT_TRUE(same_bits(row, one)) << stem << " position " << i;
      }
    }
  }
}

TEST(Engine, NumericsAndCacheTypeAreCheckedAtOpen) {
  // llama.cpp numerics need the f16 cache (its flash attention reads f16 K/V).
  auto bad = make_engine_status(TinySpec{}, {.numerics = Numerics::kLlamaCpp});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("f16 KV cache"), std::string::npos) << bad.error().message;
  // A quantized cache holds whole 32-blocks per head: head size 16 is refused, naming both.
  auto q8 = make_engine_status(TinySpec{}, {.kv_format = graph::KvFormat::kQ8_0});
  ASSERT_FALSE(q8.ok());
  EXPECT_NE(q8.error().message.find("KV cache type q8_0 needs a head size that is a multiple of "
                                    "32; this model's is 16"),
            std::string::npos)
      << q8.error().message;
  auto q8l =
      make_engine_status(TinySpec{.n_head = 2, .n_head_kv = 1},
                         {.kv_format = graph::KvFormat::kQ8_0, .numerics = Numerics::kLlamaCpp});
  ASSERT_FALSE(q8l.ok());
  EXPECT_NE(q8l.error().message.find("f16 KV cache (cache type is q8_0)"), std::string::npos)
      << q8l.error().message;
  EXPECT_TRUE(parse_numerics("llamacpp").ok());
  EXPECT_EQ(*parse_numerics("llamacpp-avx512fp16"), Numerics::kLlamaCppAvx512Fp16);
  EXPECT_FALSE(parse_numerics("llama.cpp").ok());
  EXPECT_FALSE(graph::parse_kv_format("bf16").ok());
}

TEST(Generate, EndOfGenerationIsDroppedWithoutAForward) {
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 64, "eog");
  ASSERT_TRUE(t.engine);
  GenerateOptions o{.n_predict = 16};
  for (TokenId id : t->tokenizer().special().eog) o.sampler.logit_bias.push_back({id, 100.0f});
  std::string text;
  auto s = generate(*t, kPrompt, o, [&](std::string_view b) { text += b; });
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->stop, StopReason::kEog);
  EXPECT_EQ(s->n_generated, 0);
  EXPECT_EQ(s->n_forwards, 0);
  EXPECT_EQ(t->stats().executes, 1u);  // the prefill only
  EXPECT_TRUE(text.empty());
}

TEST(Generate, StopStringTruncatesTheStreamAndNoByteOfItIsPrinted) {
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 128, "stop");
  ASSERT_TRUE(t.engine);
  GenerateOptions o{.n_predict = 24};
  o.sampler.temp = 0.0f;
  o.sampler.logit_bias = no_eog(*t);
  std::string full;
  auto s = generate(*t, kPrompt, o, [&](std::string_view b) { full += b; });
  ASSERT_TRUE(s.ok()) << s.error().message;
  // Token boundaries of the greedy stream.
  std::vector<size_t> token_end;
  {
    auto g = Generator::create(*t, o, [](std::string_view) {});
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(t->set_n_ctx(128).ok());
    ASSERT_TRUE((*g)->prefill(kPrompt).ok());
    while (*(*g)->step()) {
    }
    (*g)->finish();
    size_t bytes = 0;
    for (TokenId id : (*g)->generated()) {
      bytes += t->tokenizer().token_to_bytes(id).size();
      token_end.push_back(bytes);
    }
  }
  ASSERT_EQ(token_end.back(), full.size());
  // A stop string starting in the middle of the stream, spanning a token boundary if
  // one exists: the earliest occurrence decides, and the output ends where it starts
  // (the bytes that began it were held back, not printed).
  const size_t k = full.size() / 2, len = std::min<size_t>(4, full.size() - k);
  ASSERT_GT(len, 0u);
  o.stop = {full.substr(k, len)};
  const size_t match = full.find(o.stop[0]);
  size_t j = 0;
  while (token_end[j] < match + len) ++j;  // the token that completes the match
  const std::string expected = full.substr(0, match);
  ASSERT_TRUE(t->set_n_ctx(128).ok());
  std::string out;
  auto s2 = generate(*t, kPrompt, o, [&](std::string_view b) { out += b; });
  ASSERT_TRUE(s2.ok()) << s2.error().message;
  EXPECT_EQ(s2->stop, StopReason::kStopString);
  EXPECT_EQ(s2->n_generated, static_cast<int32_t>(j + 1));
  EXPECT_EQ(out, expected);
}

TEST(Generate, ContextFullStopsCleanly) {
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 12, "ctxfull");
  ASSERT_TRUE(t.engine);
  GenerateOptions o{.n_predict = -1};
  o.sampler.logit_bias = no_eog(*t);
  auto s = generate(*t, kPrompt, o, [](std::string_view) {});
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->stop, StopReason::kContext);
  EXPECT_EQ(s->n_generated, 12 - static_cast<int32_t>(kPrompt.size()) + 1);
}

TEST(Generate, KeepCountsAfterALeadingBosAndMinusOneOrTooManyIsTheWholePrompt) {
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 16, "keep");
  ASSERT_TRUE(t.engine);
  const tokenizer::Tokenizer& tok = t->tokenizer();
  const TokenId bos = tok.special().bos;
  ASSERT_NE(bos, tokenizer::kNoToken);
  const std::vector<TokenId> with_bos = {bos, 5, 17, 42, 8};
  EXPECT_EQ(keep_count(0, with_bos, tok), 1);  // the BOS is always kept
  EXPECT_EQ(keep_count(2, with_bos, tok), 3);
  EXPECT_EQ(keep_count(4, with_bos, tok), 5);
  EXPECT_EQ(keep_count(5, with_bos, tok), 5);
  EXPECT_EQ(keep_count(99, with_bos, tok), 5);
  EXPECT_EQ(keep_count(-1, with_bos, tok), 5);
  EXPECT_EQ(keep_count(0, kPrompt, tok), 0);
  EXPECT_EQ(keep_count(3, kPrompt, tok), 3);
  EXPECT_EQ(keep_count(-1, kPrompt, tok), static_cast<int32_t>(kPrompt.size()));
  EXPECT_EQ(shift_discard(32, 4), 14);
  EXPECT_EQ(shift_discard(32, 31), 0);
  EXPECT_EQ(shift_discard(32, 30), 1);
}

// Greedy generation past a 32-position context, keeping the first 4 tokens: each time
// the context fills, 14 positions go ((32 - 4) / 2) and the rest is recomputed. The
// step after a shift samples from logits bit-identical to a fresh engine's that
// prefills the kept tokens (the kv_tokens() mirror) in one forward, and the following
// tokens are that fresh run's greedy continuation. The shifted run prefills in chunks
// of 5 (the shift's recompute too): the bits do not depend on it.
TEST(Generate, ContextShiftContinuesPastNctxAsAFreshRunOfTheKeptTokens_bitwise) {
  constexpr uint32_t kCtx = 32;
  constexpr int32_t kKeep = 4, kFollow = 8;
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, kCtx, "shift");
  auto fresh = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, kCtx, "shift-fresh");
  ASSERT_TRUE(t.engine && fresh.engine);
  GenerateOptions o{.n_predict = 80};
  o.sampler.temp = 0.0f;
  o.sampler.repeat_penalty = 1.0f;
  o.sampler.logit_bias = no_eog(*t);
  o.n_batch = 5;
  o.context_shift = true;
  o.n_keep = kKeep;
  std::vector<std::vector<float>> logits;  // per sampling step
  o.on_logits = [&](std::span<const float> l) { logits.emplace_back(l.begin(), l.end()); };
  auto g = Generator::create(*t, o, [](std::string_view) {});
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_TRUE((*g)->prefill(kPrompt).ok());
  struct Shift {
    size_t step;                // the first sampling step after it
    std::vector<TokenId> kept;  // the KV after it, the token that needed room included
  };
  std::vector<Shift> shifts;
  for (;;) {
    auto more = (*g)->step();
    ASSERT_TRUE(more.ok()) << more.error().message;
    if (static_cast<size_t>((*g)->stats().n_shifts) > shifts.size()) {
      shifts.push_back({logits.size(), (*g)->kv_tokens()});
    }
    if (!*more) break;
  }
  (*g)->finish();
  const GenerateStats& s = (*g)->stats();
  EXPECT_EQ(s.stop, StopReason::kNPredict);
  EXPECT_EQ(s.n_generated, 80);
  // 9 prompt tokens: the first shift at 32 positions, then one every 14 tokens.
  EXPECT_EQ(s.n_shifts, 4);
  EXPECT_EQ(s.n_discarded, 4 * 14);
  ASSERT_EQ(shifts.size(), 4u);
  const std::vector<TokenId>& generated = (*g)->generated();
  for (const Shift& sh : shifts) {
    ASSERT_EQ(sh.kept.size(), kCtx - 14 + 1);  // the token fed after the shift too
    // The kept prefix is the prompt's first tokens.
    EXPECT_TRUE(std::equal(kPrompt.begin(), kPrompt.begin() + kKeep, sh.kept.begin()));
    EXPECT_EQ(sh.kept.back(), generated[sh.step - 1]);
    GenerateOptions fo{.n_predict = kFollow};
    fo.sampler = o.sampler;
    std::vector<std::vector<float>> fresh_logits;
    fo.on_logits = [&](std::span<const float> l) { fresh_logits.emplace_back(l.begin(), l.end()); };
    ASSERT_TRUE(fresh->set_n_ctx(kCtx).ok());
    auto f = Generator::create(*fresh, fo, [](std::string_view) {});
    ASSERT_TRUE(f.ok()) << f.error().message;
    ASSERT_TRUE((*f)->prefill(sh.kept).ok());
    while (*(*f)->step()) {
    }
    (*f)->finish();
    const auto n = std::min<size_t>(kFollow, generated.size() - sh.step);
    ASSERT_GE(fresh_logits.size(), n);
    for (size_t j = 0; j < n; ++j) {
      EXPECT_TRUE(same_bits(logits[sh.step + j], fresh_logits[j]))
          << "shift at step " << sh.step << ", step " << j << " after it";
      EXPECT_EQ(generated[sh.step + j], (*f)->generated()[j]) << "step " << j << " after it";
    }
  }
}

TEST(Generate, ContextShiftWithNothingToDiscardStopsAtTheFullContext) {
  // Keeping the whole 9-token prompt of a 10-position context leaves one position after
  // it: nothing to discard, so the run ends as without a shift.
  auto t = make_engine(TinySpec{.vocab_gguf = gpt2_vocab()}, 1, 10, "noshift");
  ASSERT_TRUE(t.engine);
  GenerateOptions o{.n_predict = -1};
  o.sampler.logit_bias = no_eog(*t);
  o.context_shift = true;
  o.n_keep = static_cast<int32_t>(kPrompt.size());
  auto s = generate(*t, kPrompt, o, [](std::string_view) {});
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->stop, StopReason::kContext);
  EXPECT_EQ(s->n_shifts, 0);
  EXPECT_EQ(s->n_generated, 2);
}

TEST(RealModel, SmolLM2GeneratesText) {
  const std::string path =
      std::string(MINFER_CACHE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present (scripts/setup.sh)";
  auto e = Engine::open(path, {.n_threads = 2});
  ASSERT_TRUE(e.ok()) << e.error().message;
  Engine& eng = **e;
  auto ids = eng.tokenizer().encode("The capital of France is", {.add_special = true});
  ASSERT_TRUE(ids.ok());
  ASSERT_TRUE(eng.set_n_ctx(256).ok());
  GenerateOptions o{.n_predict = 12};
  o.sampler.temp = 0.0f;
  std::string text;
  auto s = generate(eng, *ids, o, [&](std::string_view b) { text += b; });
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_GT(s->n_generated, 0);
  EXPECT_NE(text.find("Paris"), std::string::npos) << text;
  if (s->stop == StopReason::kNPredict) {
    EXPECT_EQ(s->decode_rebuilds, 1u);
    EXPECT_EQ(s->decode_reuses, 10u);  // 11 forwards: the 12th token needs none
  }
}

}  // namespace
}  // namespace minfer::engine
