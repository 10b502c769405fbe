// Stage 4 (text → ids): the special-token partition — text containing special-token
// texts is cut into raw pieces and those tokens before any BPE/SPM runs, as
// llama.cpp's tokenizer_st_partition does.
// Invariants: special tokens are tried longest text first, each over every raw piece
// left by the longer ones, leftmost match first; control and unknown tokens are
// matched only with parse_special, user-defined tokens always (as HF tokenizers
// pre-split added tokens); lstrip/rstrip drop ASCII whitespace beside a match.
#include <list>

#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {
// C-locale isspace, which is what llama.cpp applies to the bytes beside a token.
bool is_ascii_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}
}  // namespace

std::vector<Fragment> VocabTokenizer::partition(std::string_view text, bool parse_special) const {
  std::list<Fragment> frags;
  if (!text.empty())
    frags.push_back(Fragment{.token = kNoToken, .offset = 0, .length = text.size()});

  for (const TokenId id : special_cache_) {
    const uint32_t attr = attrs_[static_cast<size_t>(id)];
    if (!parse_special && (attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& needle = tokens_[static_cast<size_t>(id)];

    for (auto it = frags.begin(); it != frags.end(); ++it) {
      if (it->token != kNoToken) continue;
      size_t base = it->offset;
      size_t len = it->length;
      // Replace this raw piece by [left] token [right], repeating on the right part.
      auto insert_at = std::next(it);
      bool replaced = false;
      while (true) {
        const size_t match = text.substr(0, base + len).find(needle, base);
        if (match == std::string_view::npos) break;
        replaced = true;
        if (match > base) {
          size_t left_len = match - base;
          if (attr & kAttrLstrip) {
            while (left_len > 0 && is_ascii_space(text[base + left_len - 1])) --left_len;
          }
          if (left_len > 0) {
            frags.insert(insert_at,
                         Fragment{.token = kNoToken, .offset = base, .length = left_len});
          }
        }
        frags.insert(insert_at, Fragment{.token = id, .offset = 0, .length = 0});
        const size_t end = match + needle.size();
        if (end >= base + len) {
          len = 0;
          break;
        }
        size_t right = end;
        size_t right_len = base + len - end;
        if (attr & kAttrRstrip) {
          while (right_len > 0 && is_ascii_space(text[right])) ++right, --right_len;
        }
        base = right;
        len = right_len;
        if (len == 0) break;
      }
      if (!replaced) continue;
      // What is left after the last match is itself a raw piece (searched no further
      // for this token: the loop above already did).
      if (len > 0)
        frags.insert(insert_at, Fragment{.token = kNoToken, .offset = base, .length = len});
      frags.erase(it);
      // Continue after the pieces just inserted (at least the token precedes insert_at).
      it = std::prev(insert_at);
    }
  }
  return {frags.begin(), frags.end()};
}

}  // namespace minfer::tokenizer
