// Stage 4 (text → ids): WordPiece (`tokenizer.ggml.model = bert`) as Hugging Face
// tokenizers runs a BERT tokenizer.json: BertNormalizer, BertPreTokenizer, WordPiece.
// Invariants: the vocabulary is llama.cpp's phantom-space form (convert_hf_to_gguf.py:
// a word's first piece "w" is stored as "▁w", a continuation "##w" as "w", control
// tokens as they are); a word that cannot be covered by pieces, or is longer than 100
// characters, becomes one [UNK]; control tokens are never pieces of a word.
//
// Where llama.cpp's WPM tokenizer (llm_tokenizer_wpm) differs from tokenizers,
// tokenizers is followed:
//  - a word over 100 characters is one [UNK] (max_input_chars_per_word; llama.cpp
//    has no limit and splits it into pieces);
//  - the longest match shortens a candidate one character at a time (llama.cpp one
//    byte at a time, which only matters for pieces that are not whole characters);
//  - the categories come from the Unicode tables below, not llama.cpp's flags.
// Known difference from tokenizers: its category tables (unicode_categories) are
// Unicode 9's, ours are libutf8proc's (Unicode 15). Characters assigned or moved
// between categories since (e.g. U+2E43.. punctuation, U+0890 Cf, new Mn marks) can
// normalize or split differently.
#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {

// tokenizer.json's WordPiece `max_input_chars_per_word` (its default, and what every
// BERT tokenizer we know sets); the GGUF does not carry it.
constexpr size_t kMaxInputCharsPerWord = 100;

// U+2581, llama.cpp's phantom space before a word's first piece.
constexpr std::string_view kPhantomSpace = "\xE2\x96\x81";

// BertNormalizer's handle_chinese_chars: the CJK Unified Ideographs blocks (and
// extensions A..F) and the CJK Compatibility Ideographs. Extension E is taken from
// U+2B920, not U+2B820, because tokenizers does so.
bool is_chinese_char(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// BertNormalizer's clean_text removes NUL, U+FFFD and "control" characters: Cc, Cf,
// Cs, Co — but not \t, \n, \r, which it turns into spaces. A code point our lenient
// UTF-8 decoding produced above U+10FFFF is invalid input and goes the way of U+FFFD.
bool is_removed_by_clean_text(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  return cp == 0 || cp == unicode::kReplacementChar || cp > utf8::kMaxCodePoint ||
         unicode::is_control_format_surrogate_private(cp);
}

// BertPreTokenizer's punctuation: Rust's char::is_ascii_punctuation (which includes
// the ASCII symbols $+<=>^`|~) or general category P*.
bool is_bert_punctuation(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  return unicode::is_punctuation(cp);
}

}  // namespace

void VocabTokenizer::wpm_encode(std::string_view text, std::vector<TokenId>& out) const {
  // BertNormalizer, in its order: clean_text, handle_chinese_chars, strip_accents
  // (NFD, then drop Mn), lowercase.
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (const uint32_t cp : unicode::decode_utf8(text)) {
    if (is_removed_by_clean_text(cp)) continue;
    if (unicode::is_whitespace(cp)) {
      cps.push_back(' ');
    } else if (is_chinese_char(cp)) {
      cps.insert(cps.end(), {' ', cp, ' '});
    } else {
      cps.push_back(cp);
    }
  }
  if (wpm_strip_accents_) {
    cps = unicode::nfd(cps);
    std::erase_if(cps, unicode::is_nonspacing_mark);
  }
  if (wpm_lowercase_) {
    std::vector<uint32_t> lower;
    lower.reserve(cps.size());
    for (const uint32_t cp : cps) unicode::append_lowercase(cp, lower);
    cps.swap(lower);
  }

  // BertPreTokenizer: whitespace separates words and is dropped; each punctuation
  // character is a word of its own.
  std::string word;
  size_t n_chars = 0;
  auto flush = [&] {
    if (n_chars == 0) return;
    wpm_encode_word(word, n_chars, out);
    word.clear();
    n_chars = 0;
  };
  for (const uint32_t cp : cps) {
    if (unicode::is_whitespace(cp)) {
      flush();
      continue;
    }
    const bool punct = is_bert_punctuation(cp);
    if (punct) flush();
    utf8::append(word, cp);
    ++n_chars;
    if (punct) flush();
  }
  flush();
}

void VocabTokenizer::wpm_encode_word(const std::string& word, size_t n_chars,
                                     std::vector<TokenId>& out) const {
  if (n_chars > kMaxInputCharsPerWord) {
    out.push_back(special_.unk);
    return;
  }
  // Greedy longest match from the left, one character shorter at a time; a
  // position no piece matches makes the whole word one [UNK].
  const size_t first = out.size();
  std::string key;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = std::min(word.size(), start + wpm_max_token_len_);
    while (end > start && end < word.size() &&
           utf8::is_continuation(static_cast<uint8_t>(word[end])))
      --end;
    TokenId id = kNoToken;
    while (end > start) {
      id = wpm_piece(std::string_view(word).substr(start, end - start), start == 0, key);
      if (id != kNoToken) break;
      do {
        --end;
      } while (end > start && utf8::is_continuation(static_cast<uint8_t>(word[end])));
    }
    if (id == kNoToken) {
      out.resize(first);
      out.push_back(special_.unk);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

TokenId VocabTokenizer::wpm_piece(std::string_view piece, bool word_start, std::string& key) const {
  key.clear();
  if (word_start) key += kPhantomSpace;
  key += piece;
  const TokenId id = find_token(key);
  // Control tokens keep their text without a phantom space, so "[PAD]" would look
  // like a continuation piece; they are never part of a word.
  if (id == kNoToken || (attrs_[static_cast<size_t>(id)] & (kAttrControl | kAttrUnknown))) {
    return kNoToken;
  }
  return id;
}

}  // namespace minfer::tokenizer
