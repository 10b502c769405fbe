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
