// Stage 4 tests: llama.cpp's own tokenizer vectors (tests/data/vocab/*.gguf.inp/.out,
// from llama.cpp's models/ folder) must come out identical.
// Invariant checked: for every input, ids equal llama.cpp's with add_special=false,
// parse_special=false; a failure prints the input, both id lists and the first
// differing position.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "vocab_fixture.h"

namespace minfer::tokenizer::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Inputs are separated by "\n__ggml_vocab_test__\n"; what follows the last separator
// is not a test. The empty string between two separators is one.
std::vector<std::string> read_inputs(const std::string& path) {
  const std::string text = read_file(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos; (pos = text.find(sep, start)) != std::string::npos; start = pos + sep.size()) {
    out.push_back(text.substr(start, pos - start));
  }
  return out;
}

std::vector<std::vector<TokenId>> read_outputs(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::vector<TokenId>> out;
  for (std::string line; std::getline(f, line);) {
    std::istringstream ls(line);
    std::vector<TokenId> ids;
    for (TokenId id; ls >> id;) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

class VocabGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabGolden, ids_identical_to_llama_cpp) {
  const std::string name = GetParam();
  const Tokenizer* tok = load_vocab(name);
  ASSERT_NE(tok, nullptr);
  const std::string base = vocab_path(name);
  const auto inputs = read_inputs(base + ".inp");
  const auto outputs = read_outputs(base + ".out");
  ASSERT_FALSE(inputs.empty());
  ASSERT_EQ(inputs.size(), outputs.size()) << base;
  size_t passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = tok->encode(inputs[i], EncodeOptions{.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    const auto& want = outputs[i];
    if (*ids == want) {
      ++passed;
      continue;
    }
    const size_t at = first_mismatch(want, *ids);
    ADD_FAILURE() << name << " input #" << i << " '" << inputs[i] << "'\n  expected " << show(want)
                  << "\n  actual   " << show(*ids) << "\n  first mismatch at " << at;
  }
  std::cout << "[ vocab    ] " << name << ": " << passed << "/" << inputs.size() << " identical\n";
}

std::string param_name(const ::testing::TestParamInfo<const char*>& param) {
  std::string n = param.param;
  for (char& c : n) c = (c == '-') ? '_' : c;
  return n;
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVectors, VocabGolden, ::testing::ValuesIn(kVocabs), param_name);
// WordPiece (BAAI/bge-small-en-v1.5, an older converter's GGUF: no add_* flags, no
// normalizer keys). Not in kVocabs: lowercasing makes decode(encode(s)) != s. Its
// vectors are tokenizers' ids, as llama.cpp's convert_hf_to_gguf_update.py records them.
INSTANTIATE_TEST_SUITE_P(LlamaCppWordPieceVectors, VocabGolden, ::testing::Values("bert-bge"),
                         param_name);

}  // namespace
}  // namespace minfer::tokenizer::testing
