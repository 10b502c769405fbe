// Stage 2 (file): the values of a GGUF's `tokenizer.ggml.token_type` array
// (llama.cpp's LLAMA_TOKEN_TYPE_*, gguf-py's TokenType) — one definition for the
// tokenizer that reads them and the vocabulary converter that writes them.
#pragma once

#include <cstdint>

namespace minfer::gguf {

enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

}  // namespace minfer::gguf
