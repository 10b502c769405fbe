// Stage 3b (convert): a WordPiece tokenizer.json (BERT) as llama.cpp's converter writes
// it — BertModel.set_vocab over TextModel.get_vocab_base: the token list in the
// "phantom space" form, the token types and the pre-tokenizer name.
// Invariants: token i is the token with id i (holes are "[PAD{i}]", UNUSED); the
// pre-tokenizer name comes from the converter's fingerprint of the vocabulary (the
// sha256 of the ids of a fixed text), never from a guess: an unknown fingerprint is an
// error, as in the converter.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/result.h"

namespace minfer::convert {

struct WordPieceVocab {
  std::string pre;  // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

// `n_vocab`: config.json vocab_size (the list is padded to it; a larger id is an error).
Result<WordPieceVocab> wordpiece_vocab(const nlohmann::json& tokenizer, uint32_t n_vocab);

// The converter's fingerprint of a WordPiece tokenizer.json: the sha256 of Python's
// str() of the ids it gives the converter's check text (with the post-processor's
// special tokens). Errors: a normalizer or post-processor this converter cannot follow.
Result<std::string> wordpiece_fingerprint(const nlohmann::json& tokenizer);

}  // namespace minfer::convert
