// Tests (engine): engines over tiny random models (tests/model/tiny_model.h), with or
// without a real vocabulary, plus helpers to compare logits bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "../model/tiny_model.h"
#include "engine/engine.h"

namespace minfer::engine::testing {

using minfer::testing::TempFile;
using minfer::testing::TinySpec;

// The GPT-2 vocabulary of llama.cpp's tokenizer tests (50257 tokens).
inline std::string gpt2_vocab() {
  return minfer::testing::vocab_path("ggml-vocab-gpt-2.gguf");
}

struct TinyEngine {
  std::unique_ptr<TempFile> file;
  std::unique_ptr<Engine> engine;
  Engine* operator->() { return engine.get(); }
  Engine& operator*() { return *engine; }
};

inline TinyEngine make_engine(const TinySpec& spec, int32_t n_threads, uint32_t n_ctx,
                              const std::string& stem, EngineOptions options = {}) {
  TinyEngine t;
  t.file = std::make_unique<TempFile>(stem + "-t" + std::to_string(n_threads));
  Status w = minfer::testing::write_tiny_model(t.file->path, spec);
  EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message);
  options.n_threads = n_threads;
  auto e = Engine::open(t.file->path, options);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  if (!e.ok()) return t;
  t.engine = std::move(*e);
  Status st = t.engine->set_n_ctx(n_ctx);
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message);
  return t;
}

// Opens a tiny model with `options` and returns the engine or the error (for refusals).
inline Result<std::unique_ptr<Engine>> make_engine_status(const TinySpec& spec,
                                                          const EngineOptions& options) {
  TempFile file("status");
  Status w = minfer::testing::write_tiny_model(file.path, spec);
  if (!w.ok()) return w.error();
  return Engine::open(file.path, options);
}

inline std::vector<int32_t> iota_positions(size_t n, int32_t first = 0) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

// Copies the logits (the span dies at the next forward).
// Sequence 0's rows `tokens` at `positions`, the last n_out asking for logits.
inline Batch seq0_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                        uint32_t n_out) {
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.add(tokens[i], 0, i < positions.size() ? positions[i] : 0, i + n_out >= tokens.size());
  }
  return batch;
}

// Logits of the last n_out rows, row after row: F32 [n_vocab, n_out].
inline std::vector<float> run(Context& e, const std::vector<int32_t>& tokens,
                              const std::vector<int32_t>& positions, uint32_t n_out) {
  const Batch batch = seq0_batch(tokens, positions, n_out);
  auto r = e.decode(batch);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) return {};
  std::vector<float> out;
  for (size_t i = tokens.size() - n_out; i < tokens.size(); ++i) {
    const std::span<const float> row = r->row(i);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Bitwise equality of two float vectors; reports the first differing element.
inline ::testing::AssertionResult same_bits(const std::vector<float>& a,
                                            const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "first mismatch at element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// The models the determinism tests (thread count, prefill chunking, batch composition)
// run: every architecture with Q8_0 weights, and qwen3moe with F32 weights too — Q8_0
// activation rounding absorbs an ulp-level difference of the expert matmul's rows (a
// grouped kernel whose bits depended on which rows share an expert passed with Q8_0
// weights alone), F32 weights carry it to the logits.
// llama_batch_invariant false: --numerics llamacpp makes this model's rows depend on
// their batch, as llama.cpp does — its F32 weights (qwen3moe's router) go through
// ggml_vec_dot_f32 for one row and llamafile's tinyBLAS for more.
struct DeterminismModel {
  const char* name;
  minfer::testing::TinySpec spec;
  bool llamacpp_batch_invariant = true;
};
inline std::vector<DeterminismModel> determinism_models(bool tied = true) {
  std::vector<DeterminismModel> out;
  for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe"}) {
    out.push_back({arch,
                   {.arch = arch, .tied = tied, .qkv_bias = std::string(arch) == "qwen2"},
                   std::string(arch) != "qwen3moe"});
  }
  out.push_back({"qwen3moe-f32", {.arch = "qwen3moe", .wtype = DType::kF32, .tied = tied}, false});
  return out;
}

}  // namespace minfer::engine::testing
