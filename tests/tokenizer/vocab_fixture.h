// Stage 4 tests: loads the llama.cpp vocab fixtures (testdata/vocab/ggml-vocab-*.gguf)
// once per process. Invariant: a fixture that fails to load fails the test that asked.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace minfer::tokenizer::testing {

// Ids as "[1 2 3]", and the first index where two id lists differ, for failure messages.
inline std::string show(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}
inline size_t first_mismatch(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  return at;
}

inline std::string vocab_path(const std::string& name) {
  return std::string(MINFER_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
}

// The tokenizer of vocab `name` ("gpt-2", "llama-spm", ...); nullptr after recording a
// test failure when it cannot be loaded.
inline const Tokenizer* load_vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  auto model = gguf::Model::open(vocab_path(name));
  if (!model.ok()) {
    ADD_FAILURE() << "cannot open " << vocab_path(name) << ": " << model.error().message;
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(*model);
  if (!tok.ok()) {
    ADD_FAILURE() << "cannot build tokenizer " << name << ": " << tok.error().message;
    return nullptr;
  }
  return cache.emplace(name, std::move(tok).value()).first->second.get();
}

inline const char* const kVocabs[] = {"gpt-2",          "llama-spm", "phi-3",
                                      "deepseek-coder", "qwen2",     "llama-bpe"};

}  // namespace minfer::tokenizer::testing
