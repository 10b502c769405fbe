// Stage 4 (text → ids): SentencePiece-style BPE (tokenizer.ggml.model = llama) as
// llama.cpp's llm_tokenizer_spm_session runs it: start from UTF-8 characters, merge
// the adjacent pair whose joined text is the vocabulary token with the highest score.
// Invariants: ties go to the leftmost pair; a queued pair is dropped once either side
// changed; a final symbol that is not a token becomes byte tokens <0xXX>.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_tokenizer.h"

namespace minfer::tokenizer {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;
  size_t n;  // 0 once merged into the left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

struct BigramBelow {  // priority_queue top = highest score, then leftmost
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

TokenId VocabTokenizer::spm_byte_token(uint8_t byte) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char hex[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  TokenId id = find_token(std::string_view(hex, 6));
  if (id != kNoToken) return id;
  const char raw = static_cast<char>(byte);
  id = find_token(std::string_view(&raw, 1));
  // llama.cpp aborts (map::at) when a vocabulary has neither form; unk is the
  // SentencePiece answer for a piece the vocabulary cannot spell.
  return id != kNoToken ? id : special_.unk;
}

void VocabTokenizer::spm_encode(const std::string& text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  for (size_t off = 0; off < text.size();) {
    const size_t n =
        std::min(text.size() - off, utf8::lead_length(static_cast<uint8_t>(text[off])));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{.prev = index - 1, .next = index + 1, .offset = off, .n = n});
    off += n;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramBelow> queue;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const std::string_view joined = std::string_view(text).substr(l.offset, l.n + r.n);
    const TokenId id = find_token(joined);
    if (id == kNoToken) return;
    queue.push(Bigram{.left = left,
                      .right = right,
                      .score = scores_[static_cast<size_t>(id)],
                      .size = joined.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(b.left)];
    Symbol& right = symbols[static_cast<size_t>(b.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  // llama.cpp's resegment also consults the pairs it queued (rev_merge) for a final
  // symbol that is not a token; that never fires: merged symbols are tokens by
  // construction, and an unmerged symbol is one UTF-8 character, which no pair of
  // symbols can spell. Such symbols go straight to byte tokens.
  for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = std::string_view(text).substr(s.offset, s.n);
    const TokenId id = find_token(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      const TokenId byte_id = spm_byte_token(static_cast<uint8_t>(c));
      if (byte_id != kNoToken) out.push_back(byte_id);
    }
  }
}

}  // namespace minfer::tokenizer
