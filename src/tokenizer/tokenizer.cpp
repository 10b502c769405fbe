// Stage 4 (text → ids): encode — special-token partition, then SPM, BPE or WordPiece
// on each raw piece, with BOS/EOS as the vocabulary asks (llama.cpp's
// llama_vocab::tokenize).
// Invariants: special-token text becomes those tokens only with parse_special
// (user-defined tokens always); SentencePiece prefixes one space at the start and
// after every special token when add_space_prefix is set; BOS/EOS only with
// add_special; a WordPiece vocabulary without an add_eos flag closes with [SEP].
#include <algorithm>

#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {
// SentencePiece's whitespace escape: ' ' → U+2581 LOWER ONE EIGHTH BLOCK.
void escape_spaces(std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (const char c : text) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out += c;
    }
  }
  text.swap(out);
}
}  // namespace

Result<std::vector<TokenId>> VocabTokenizer::encode(std::string_view text,
                                                    const EncodeOptions& opts) const {
  const std::vector<Fragment> frags = partition(text, opts.parse_special);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (opts.add_special && special_.add_bos) out.push_back(special_.bos);

  bool prev_special = true;  // SentencePiece: a space prefix at the very start too
  for (const Fragment& f : frags) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.offset, f.length);
    if (type_ == VocabType::kSpm) {
      std::string piece;
      if (special_.add_space_prefix && prev_special) piece = " ";
      piece.append(raw);
      escape_spaces(piece);
      spm_encode(piece, out);
    } else if (type_ == VocabType::kWpm) {
      wpm_encode(raw, out);
    } else {
      MINFER_TRY_STATUS(bpe_encode(raw, out));
    }
    prev_special = false;
  }

  if (opts.add_special && special_.add_eos) {
    out.push_back(special_.eos);
  } else if (opts.add_special && wpm_close_with_sep_) {
    out.push_back(special_.sep);
  }
  return out;
}

bool Tokenizer::is_eog(TokenId id) const {
  return id != kNoToken && std::binary_search(special_.eog.begin(), special_.eog.end(), id);
}

}  // namespace minfer::tokenizer
