// Stage 4 (ids → text): token pieces, whole-sequence decode and the streaming decoder
// (llama.cpp's token_to_piece / llama_detokenize without its space clean-up).
// Invariants: control and unknown tokens yield bytes only when `special` is set;
// byte-level BPE pieces are mapped back through the GPT-2 table; WordPiece pieces
// carry the space before their word; StreamDecoder never
// returns a UTF-8 sequence cut in two, and flush() returns whatever is held.
#include <cstdlib>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {

// <0xXX> → the byte, read as llama.cpp does (two hex digits after "<0x").
char byte_token_value(const std::string& text) {
  const std::string hex = text.size() >= 5 ? text.substr(3, 2) : std::string();
  return static_cast<char>(std::strtol(hex.c_str(), nullptr, 16));
}

// Byte-level BPE piece → bytes. A code point outside the GPT-2 table cannot come from
// a byte; llama.cpp writes it out as a marker, so do we.
std::string byte_level_decode(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const uint32_t cp : unicode::decode_utf8(text)) {
    if (const auto b = unicode::cp_to_byte(cp)) {
      out.push_back(static_cast<char>(*b));
      continue;
    }
    out += "[UNK_BYTE_0x";
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char c : utf8::encode(cp)) {
      const auto u = static_cast<uint8_t>(c);
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
    out += text + "]";
  }
  return out;
}

std::string unescape_spaces(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
      out.push_back(' ');
      i += 3;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace

std::string VocabTokenizer::token_to_bytes(TokenId id, bool special) const {
  if (id < 0 || id >= n_vocab()) return {};
  const uint32_t attr = attrs_[static_cast<size_t>(id)];
  const std::string& text = tokens_[static_cast<size_t>(id)];
  if (!special && (attr & (kAttrUnknown | kAttrControl))) return {};
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
    // tokenizers' WordPiece decoder makes every piece not marked "##" a word.
    return type_ == VocabType::kWpm ? " " + text : text;
  }
  if (attr & kAttrNormal) {
    // WordPiece pieces are in llama.cpp's phantom-space form, "▁" before a word.
    return type_ == VocabType::kBpe ? byte_level_decode(text) : unescape_spaces(text);
  }
  if (attr & kAttrByte) return std::string(1, byte_token_value(text));
  return {};  // unused / undefined tokens print nothing, as in llama.cpp
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool special) const {
  std::string out;
  bool strip_space = special_.add_space_prefix;
  for (const TokenId id : ids) {
    std::string piece = token_to_bytes(id, special);
    if (strip_space && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    strip_space = false;
    if (drop_first_space_ && out.empty() && !piece.empty() && piece.front() == ' ') {
      piece.erase(0, 1);
    }
    out += piece;
  }
  return out;
}

std::string StreamDecoder::push(TokenId id) {
  pending_ += tok_.token_to_bytes(id, special_);
  const size_t keep = utf8::incomplete_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace minfer::tokenizer
