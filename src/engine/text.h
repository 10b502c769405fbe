// Stage 15 (the loop): token → bytes without allocating, and UTF-8-safe emission.
// Invariants: the byte table is built once per model, so the decode loop never calls
// the tokenizer (whose token_to_bytes returns a fresh string); the emitter never
// writes half a UTF-8 sequence except at flush (end of stream), and a stop string's
// bytes are never emitted.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace minfer::engine {

// Bytes of every token id (control tokens → empty, as detokenizing without special
// tokens does). ~n_vocab small strings; built once at the start of a run.
class TokenBytes {
 public:
  explicit TokenBytes(const tokenizer::Tokenizer& tok);
  std::string_view operator[](tokenizer::TokenId id) const {
    return bytes_[static_cast<size_t>(id)];
  }
  size_t max_len() const { return max_len_; }

 private:
  std::vector<std::string> bytes_;
  size_t max_len_ = 0;
};

// Where generated text goes (stdout in the CLI, a string in tests). Called with
// complete UTF-8 sequences only (except for the final flush of a broken stream).
using TextSink = std::function<void(std::string_view)>;

// Holds the bytes of an unfinished UTF-8 sequence until the token that completes it
// arrives (what tokenizer::StreamDecoder does per token id; this one takes bytes, so
// the loop can emit a token's bytes only up to where a stop string begins).
class Utf8Emitter {
 public:
  explicit Utf8Emitter(TextSink sink);
  void feed(std::string_view bytes);
  void flush();

 private:
  TextSink sink_;
  std::string pending_;  // at most one incomplete sequence (< 4 bytes) between feeds
};

}  // namespace minfer::engine
