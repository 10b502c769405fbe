// Stage 15 (the loop): byte table and UTF-8-safe emitter.
#include "engine/text.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace minfer::engine {

TokenBytes::TokenBytes(const tokenizer::Tokenizer& tok) {
  bytes_.resize(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    bytes_[static_cast<size_t>(id)] = tok.token_to_bytes(id, /*special=*/false);
    max_len_ = std::max(max_len_, bytes_[static_cast<size_t>(id)].size());
  }
}

Utf8Emitter::Utf8Emitter(TextSink sink) : sink_(std::move(sink)) {
  pending_.reserve(64);
}

void Utf8Emitter::feed(std::string_view bytes) {
  if (bytes.empty()) return;
  if (pending_.empty()) {
    // Common case: emit straight from the caller's bytes, keep only an unfinished tail.
    const size_t keep = tokenizer::unicode::incomplete_utf8_tail(bytes);
    if (keep < bytes.size()) sink_(bytes.substr(0, bytes.size() - keep));
    pending_.assign(bytes.substr(bytes.size() - keep));
    return;
  }
  pending_.append(bytes);
  const size_t keep = tokenizer::unicode::incomplete_utf8_tail(pending_);
  if (keep < pending_.size()) sink_(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
}

void Utf8Emitter::flush() {
  if (!pending_.empty()) sink_(pending_);
  pending_.clear();
}

}  // namespace minfer::engine
