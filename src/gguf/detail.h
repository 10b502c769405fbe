// Stage 2 (file): helpers shared by the GGUF reader and writer (not public API).
// Invariant: the reader and the writer accept exactly the same keys and tensor names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace minfer::gguf::detail {

// Why `key` cannot be a metadata key ("" if it can): empty, or not UTF-8.
std::string key_problem(std::string_view key);
// Why `name` cannot be a tensor name ("" if it can): empty, longer than
// kMaxTensorNameLength (ggml keeps names in a 64-byte buffer), not UTF-8, or holding
// a NUL (ggml would silently truncate it there).
std::string tensor_name_problem(std::string_view name);

// Printable form of untrusted text for error messages: at most 64 bytes, control
// and non-ASCII bytes as \xNN.
std::string quote_for_error(std::string_view s);

}  // namespace minfer::gguf::detail
